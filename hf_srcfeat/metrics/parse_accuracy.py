"""How well an annotator parses: word-level UPOS, lemma, UAS and LAS against gold trees."""

from __future__ import annotations

from collections.abc import Sequence

from hf_srcfeat.annotated_sentence import AnnotatedSentence


def annotation_scores(gold: Sequence[AnnotatedSentence], predicted: Sequence[AnnotatedSentence]) -> dict:
    """Word-level UPOS, lemma, UAS and LAS (relation without subtype), in percent, of `predicted` against
    `gold` sentences with the same words (annotate gold-tokenized text with `pretokenized=True`)."""
    counts = {"upos": 0, "lemma": 0, "uas": 0, "las": 0}
    words = 0
    for gold_sentence, predicted_sentence in zip(gold, predicted, strict=True):
        if len(gold_sentence.words) != len(predicted_sentence.words):
            raise ValueError(f"sentence {gold_sentence.name}: {len(gold_sentence.words)} gold words but "
                             f"{len(predicted_sentence.words)} predicted; score gold-tokenized input.")
        for g, p in zip(gold_sentence.words, predicted_sentence.words, strict=True):
            words += 1
            counts["upos"] += g.upos == p.upos
            counts["lemma"] += g.lemma == p.lemma
            counts["uas"] += g.head == p.head
            counts["las"] += g.head == p.head and g.deprel.split(":")[0] == p.deprel.split(":")[0]
    return {"sentences": len(gold), "words": words,
            **{name: round(100 * count / words, 2) for name, count in counts.items()}}
