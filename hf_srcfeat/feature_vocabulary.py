"""Vocabularies of the word-level source features (POS, lemma, dependency relation, B/I/E/S subword tag).

The POS feature is UPOS (17 universal tags, a closed set) or, with `pos_tagset="xpos"`, the parser's
language-specific tags (Penn Treebank's for English, as CoreNLP gives them to Chen et al. and Chakrabarty et
al.), learned from the training sentences like the relation labels. The morphological features (`feats`: a
word's whole CoNLL-U FEATS string, e.g. "Number=Plur|Person=3", "_" for none) are a vocabulary of their own;
tokenizers saved before it existed have none. User factors (`AnnotatedWord.factors`: named-entity tags,
domain tags, ...) get a vocabulary each, by name, learned from the training sentences that carry them.

Every vocabulary starts with the same three entries, so that id 0 is always padding:
`<pad>` (0), `<unk>` (1, a label not seen when the vocabulary was built) and `<special>` (2, a special token
such as `</s>`, which belongs to no word). Saved with the tokenizer as one JSON file.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .annotated_sentence import AnnotatedSentence
from .safe_writing import write_json_atomically

PAD_LABEL, UNK_LABEL, SPECIAL_LABEL = "<pad>", "<unk>", "<special>"
RESERVED_LABELS = (PAD_LABEL, UNK_LABEL, SPECIAL_LABEL)
PAD_ID, UNK_ID, SPECIAL_ID = 0, 1, 2

#: The 17 Universal Dependencies part-of-speech tags: the UPOS vocabulary is closed, not learned.
UNIVERSAL_POS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
                      "PUNCT", "SCONJ", "SYM", "VERB", "X")
#: Position of a subword token in its word (Sennrich & Haddow 2016): Begin, Inside, End, or Single.
SUBWORD_TAGS = ("B", "I", "E", "S")
#: Which tag of a word the POS feature holds: `AnnotatedWord.upos` or `AnnotatedWord.xpos`.
POS_TAGSETS = ("upos", "xpos")


class FeatureVocabulary:
    """A label <-> id map with the reserved entries first."""

    def __init__(self, labels: Iterable[str], fallback_to_base_relation: bool = False):
        self.labels = list(RESERVED_LABELS) + [label for label in labels if label not in RESERVED_LABELS]
        self.ids = {label: index for index, label in enumerate(self.labels)}
        if len(self.ids) != len(self.labels):
            raise ValueError("feature vocabulary labels must be unique.")
        # An unseen relation subtype ("obl:npmod") falls back to its relation ("obl") before <unk>.
        self.fallback_to_base_relation = fallback_to_base_relation
        # Whether an unseen label was reported to the user (user factors: once per vocabulary, not per sentence).
        self.unseen_reported = False

    def __len__(self) -> int:
        return len(self.labels)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureVocabulary) and self.labels == other.labels

    def id(self, label: str) -> int:
        found = self.ids.get(label)
        if found is None and self.fallback_to_base_relation:
            found = self.ids.get(label.split(":")[0])
        return UNK_ID if found is None else found

    @classmethod
    def from_counts(cls, counts: Counter, min_frequency: int = 1, max_size: int | None = None,
                    fallback_to_base_relation: bool = False) -> FeatureVocabulary:
        """Labels seen at least `min_frequency` times, most frequent first, ties alphabetical."""
        ranked = sorted((label for label, count in counts.items() if count >= min_frequency),
                        key=lambda label: (-counts[label], label))
        if max_size is not None:
            ranked = ranked[:max(0, max_size - len(RESERVED_LABELS))]
        return cls(ranked, fallback_to_base_relation)


@dataclass
class FeatureVocabularies:
    """The vocabularies of `pos_ids`, `lemma_ids`, `deprel_ids` and `subword_tag_ids`; `pos_tagset` says
    whether `pos` holds UPOS or XPOS tags."""

    pos: FeatureVocabulary
    lemma: FeatureVocabulary
    deprel: FeatureVocabulary
    subword_tag: FeatureVocabulary
    pos_tagset: str = "upos"
    feats: FeatureVocabulary | None = None
    extra: dict[str, FeatureVocabulary] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pos_tagset not in POS_TAGSETS:
            raise ValueError(f"pos_tagset must be one of {list(POS_TAGSETS)}, got {self.pos_tagset!r}.")

    def pos_tag(self, word) -> str:
        """The tag of `word` that the POS feature holds."""
        return word.xpos if self.pos_tagset == "xpos" else word.upos

    @classmethod
    def build(cls, sentences: Iterable[AnnotatedSentence], lemma_min_frequency: int = 2,
              max_lemmas: int | None = 10000, pos_tagset: str = "upos") -> FeatureVocabularies:
        """Lemma and relation (and XPOS) vocabularies from annotated training sentences; UPOS and B/I/E/S are
        fixed."""
        if pos_tagset not in POS_TAGSETS:
            raise ValueError(f"pos_tagset must be one of {list(POS_TAGSETS)}, got {pos_tagset!r}.")
        lemmas: Counter[str] = Counter()
        relations: Counter[str] = Counter()
        xpos_tags: Counter[str] = Counter()
        morphology: Counter[str] = Counter()
        user_factors: dict[str, Counter] | None = None
        for sentence in sentences:
            names = [name for name, _ in sentence.words[0].factors]
            if user_factors is None:
                user_factors = {name: Counter() for name in names}
            for word in sentence.words:
                if [name for name, _ in word.factors] != list(user_factors):
                    raise ValueError(f"sentence {sentence.name}: word {word.text!r} has the user factors "
                                     f"{[name for name, _ in word.factors]}, the training data so far "
                                     f"{list(user_factors)}; every word needs the same factors, in the same order.")
                for name, value in word.factors:
                    user_factors[name][value] += 1
                lemmas[word.lemma] += 1
                relations[word.deprel] += 1
                relations[word.deprel.split(":")[0]] += 0  # the base relation is always a fallback entry
                xpos_tags[word.xpos] += 1
                morphology[word.feats] += 1
        if pos_tagset == "xpos":
            xpos_tags.pop("_", None)  # "no tag" in CoNLL-U: unknown, not a tag
            if not xpos_tags:
                raise ValueError("pos_tagset='xpos' but the training sentences carry no XPOS tags (all '_'); the "
                                 "parser or CoNLL-U files give none: use pos_tagset='upos'.")
            pos = FeatureVocabulary.from_counts(xpos_tags)
        else:
            pos = FeatureVocabulary(UNIVERSAL_POS_TAGS)
        return cls(pos=pos,
                   lemma=FeatureVocabulary.from_counts(lemmas, lemma_min_frequency, max_lemmas),
                   deprel=FeatureVocabulary.from_counts(relations, min_frequency=0,
                                                        fallback_to_base_relation=True),
                   subword_tag=FeatureVocabulary(SUBWORD_TAGS), pos_tagset=pos_tagset,
                   feats=FeatureVocabulary.from_counts(morphology),
                   extra={name: FeatureVocabulary.from_counts(counts) for name, counts in (user_factors or {}).items()})

    def sizes(self) -> dict[str, Any]:
        """Embedding table sizes, by the config argument names the models use."""
        sizes: dict[str, Any] = {"num_pos_tags": len(self.pos), "num_lemmas": len(self.lemma),
                 "num_dependency_relations": len(self.deprel), "num_subword_tags": len(self.subword_tag)}
        if self.feats is not None:
            sizes["num_morph_features"] = len(self.feats)
        if self.extra:
            sizes["extra_factors"] = {name: len(vocabulary) for name, vocabulary in self.extra.items()}
        return sizes

    def to_dict(self) -> dict:
        # Written only when not the default, so every tokenizer saved before the choice existed keeps its file
        # and its fingerprint (which models record).
        optional: dict[str, object] = {"pos_tagset": self.pos_tagset} if self.pos_tagset != "upos" else {}
        if self.feats is not None:
            optional["feats"] = self.feats.labels
        if self.extra:
            optional["extra_factors"] = {name: vocabulary.labels for name, vocabulary in self.extra.items()}
        return {"format": 1, "reserved": list(RESERVED_LABELS), **optional,
                **{name: getattr(self, name).labels for name in ("pos", "lemma", "deprel", "subword_tag")}}

    @classmethod
    def from_dict(cls, data: dict) -> FeatureVocabularies:
        if list(data.get("reserved", [])) != list(RESERVED_LABELS):
            raise ValueError(f"feature vocabulary file has reserved entries {data.get('reserved')}, expected "
                             f"{list(RESERVED_LABELS)}.")
        return cls(pos=FeatureVocabulary(data["pos"]), lemma=FeatureVocabulary(data["lemma"]),
                   deprel=FeatureVocabulary(data["deprel"], fallback_to_base_relation=True),
                   subword_tag=FeatureVocabulary(data["subword_tag"]), pos_tagset=data.get("pos_tagset", "upos"),
                   feats=FeatureVocabulary(data["feats"]) if "feats" in data else None,
                   extra={name: FeatureVocabulary(labels) for name, labels in data.get("extra_factors", {}).items()})

    def save(self, path: str | os.PathLike) -> None:
        write_json_atomically(path, self.to_dict(), ensure_ascii=False, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> FeatureVocabularies:
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"feature vocabulary file {path} is not valid JSON ({error}).") from None
        missing = [name for name in ("pos", "lemma", "deprel", "subword_tag") if name not in data] \
            if isinstance(data, dict) else ["pos", "lemma", "deprel", "subword_tag"]
        if missing:
            raise ValueError(f"feature vocabulary file {path} lacks {missing}; it should be the "
                             "feature_vocab.json that save_pretrained writes.")
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as error:
            raise ValueError(f"feature vocabulary file {path}: {error}") from error
