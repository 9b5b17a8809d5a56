"""`StanzaAnnotator`: Stanza (tokens, UPOS, XPOS, lemma, deprel, head) as the annotator of raw text.

Where the Stanza models live is settable: the `model_dir` argument, else `$HF_SRCFEAT_STANZA_DIR`, else
Stanza's own resources folder with its normal download. An explicit folder never triggers a download.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .annotated_sentence import AnnotatedSentence, AnnotatedWord, multiword_spacing
from .annotator import ANNOTATION_FORMAT, DEFAULT_MAX_CHARACTERS, Annotator
from .file_digests import file_digest

STANZA_DIR_ENV = "HF_SRCFEAT_STANZA_DIR"
STANZA_PROCESSORS = "tokenize,mwt,pos,lemma,depparse"

def import_stanza():
    """Stanza, or an error that says how to get it (it is only needed to annotate raw text)."""
    try:
        import stanza
    except ImportError as error:
        raise ImportError(
            "Annotating raw text needs Stanza, which is not installed: `pip install stanza` (or "
            "`pip install hf-srcfeat`). Without it, pass pre-parsed input (`tokenizer(annotations=...)`, e.g. from "
            "`read_conllu`) or plain subwords (`tokenizer(texts, source_features=False)`)."
        ) from error
    return stanza


class StanzaAnnotator(Annotator):
    """Stanza pipeline (tokenize, mwt, pos, lemma, depparse) annotating each text as one sentence.

    Args:
        language: Stanza language code.
        model_dir: Stanza resources folder; default `$HF_SRCFEAT_STANZA_DIR`, else Stanza's default folder
            with its normal download. A folder given here or by the variable is used as is, never downloaded.
        device: where Stanza runs ("cpu", "cuda" or "cuda:N").
        max_characters: longest text parsed (default 10,000): Stanza's time and memory grow quickly with a text's
            length (1,000 words took 17 s and 2.3 GB; 5,000 words, 91 s and over 11 GB before failing).
        pretokenized, cache_path, use_cache, batch_size: as `Annotator`.
    """

    backend = "stanza"

    def __init__(self, language: str = "en", model_dir: str | os.PathLike | None = None,
                 pretokenized: bool = False, cache_path: str | os.PathLike | None = None,
                 use_cache: bool = True, batch_size: int = 256, device: str = "cpu", max_characters: int = DEFAULT_MAX_CHARACTERS):
        chosen = model_dir or os.environ.get(STANZA_DIR_ENV)
        self.model_dir = Path(chosen) if chosen else None
        if self.model_dir is not None and not (self.model_dir / language).is_dir():
            raise FileNotFoundError(
                f"No Stanza models for {language!r} in {self.model_dir} (from "
                f"{'model_dir, --stanza_dir' if model_dir else STANZA_DIR_ENV}); expected a folder "
                f"{self.model_dir / language}.")
        self.device = device
        super().__init__(language, pretokenized=pretokenized, cache_path=cache_path, use_cache=use_cache,
                         batch_size=batch_size, max_characters=max_characters)

    def settings(self) -> dict:
        return {"backend": self.backend, "language": self.language}

    @classmethod
    def from_arguments(cls, language: str | None, model: str | os.PathLike | None, device: str, **options
                       ) -> StanzaAnnotator:
        return cls(language=language or "en", model_dir=model, device=device, **options)

    @classmethod
    def from_settings(cls, settings: dict, **options) -> StanzaAnnotator:
        return cls(language=settings.get("language", "en"), **options)

    @property
    def processors(self) -> str:
        if self.words_only:
            return "tokenize" if self.pretokenized else "tokenize,mwt"
        return "tokenize,pos,lemma,depparse" if self.pretokenized else STANZA_PROCESSORS

    @property
    def models_folder(self) -> Path:
        """Where the Stanza models are read from: `model_dir`, else Stanza's own resources folder
        ($STANZA_RESOURCES_DIR or its default), into which its normal download puts them."""
        if self.model_dir is not None:
            return self.model_dir
        # Through import_stanza: a published tokenizer's code then loads without Stanza installed.
        return Path(os.environ.get("STANZA_RESOURCES_DIR", import_stanza().resources.common.DEFAULT_MODEL_DIR))

    @property
    def identity(self) -> str:
        """Everything that changes the output: Stanza version, language, processors, and the content of the model
        files and of resources.json that produce the parses (also for Stanza's default download, so updated
        models never reuse old parses)."""
        stanza = import_stanza()
        folder = self.models_folder
        if self.model_dir is None and not (folder / self.language).is_dir():
            _ = self.pipeline  # the normal download, so that the files it brings are what the key names
        # Model files are named by content, not by path or date: a copied or re-mounted folder keeps its cache.
        files = sorted((folder / self.language).rglob("*.pt"))
        if (folder / "resources.json").exists():
            files.append(folder / "resources.json")
        models = ";".join(f"{path.relative_to(folder)}:{file_digest(path)}" for path in files)
        # The parts (and so the keys of existing caches) are those of the annotator before the backend interface.
        parts = [f"format={ANNOTATION_FORMAT}", f"stanza={stanza.__version__}", f"lang={self.language}",
                 f"processors={self.processors}", f"pretokenized={self.pretokenized}", f"models={models}"]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def load(self):
        stanza = import_stanza()
        options = dict(lang=self.language, processors=self.processors, tokenize_no_ssplit=True,
                       tokenize_pretokenized=self.pretokenized, use_gpu=self.device != "cpu", device=self.device,
                       logging_level="WARN", dir=str(self.models_folder))  # the folder `identity` hashes
        if self.model_dir is not None:
            options.update(download_method=None)
        return stanza.Pipeline(**options)

    def parse_batch(self, texts: list[str]) -> list[AnnotatedSentence]:
        documents = self.pipeline.bulk_process(list(texts))
        return [self._convert(text, document) for text, document in zip(texts, documents, strict=True)]

    @staticmethod
    def _convert(text: str, document) -> AnnotatedSentence:
        words: list[AnnotatedWord] = []
        # tokenize_no_ssplit keeps one sentence per text; should Stanza still split, later sentences'
        # roots attach to the first sentence's root so that one tree spans the whole segment.
        first_root, offset = None, 0
        for sentence in document.sentences:
            for token in sentence.tokens:
                token_words = []
                # Stanza replaces a very long token (about 1,000 characters) by the literal "<UNK>"; the raw
                # text still has it, at the token's character offsets.
                original = text[token.start_char:token.end_char] if token.text == "<UNK>" and \
                    token.start_char is not None and len(token.words) == 1 else None
                for word in token.words:
                    head = word.head + offset if word.head else 0
                    if head == 0:
                        if first_root is None:
                            first_root = word.id + offset
                        else:
                            head = first_root
                    word_text = original or word.text
                    lemma = word.lemma if word.lemma is not None and not original else word_text
                    token_words.append(AnnotatedWord(
                        text=word_text, upos=word.upos or "X", xpos=word.xpos or "_", lemma=lemma,
                        deprel=word.deprel or "dep", head=head, feats=word.feats or "_"))
                words.extend(multiword_spacing(token_words, original or token.text, bool(token.spaces_after)))
            offset += len(sentence.words)
        return AnnotatedSentence(words=words, text=text)
