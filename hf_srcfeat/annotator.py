"""`Annotator`: what every parser backend shares (validation, cache, batching, progress, worker processes).
A backend implements the four methods its docstring lists; `annotators.py` registers it by name."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import replace
from multiprocessing.pool import Pool

from .annotated_sentence import AnnotatedSentence, AnnotatedWord, check_text
from .annotation_cache import AnnotationCache, default_cache_path

#: Part of the cache key: raise it when AnnotatedWord changes, so older cache entries are not reused.
ANNOTATION_FORMAT = 3  # 3: words carry their morphological features (FEATS)

#: Longest text an annotator parses unless told otherwise (about 1,800 words): a parser's time and memory grow
#: quickly with a text's length, and the models translate sentences.
DEFAULT_MAX_CHARACTERS = 10_000


class AnnotatorLoadError(RuntimeError):
    """The parser's models cannot be loaded: nothing can be parsed, a failure of the whole run, not of one text."""


class Annotator:
    """What every annotator shares: one text = one tree, validation of the texts, the on-disk cache, batching,
    the progress bar, worker processes and thread safety. A backend (Stanza, spaCy, ...) subclasses it and
    implements these:

    - `backend`: its name, `settings()`: what a saved tokenizer records to re-create it, and the classmethods
      `from_settings` (the reverse) and `from_arguments` (a command's `--annotator` arguments);
    - `identity_parts()`: everything that changes its output (library and model versions), part of the cache key;
    - `parse_batch(texts)`: the parses of a batch of texts (pre-tokenized when `self.pretokenized`), one tree each;
      with `self.words_only`, only the words (tags and tree left at their defaults: "X", the word as its lemma,
      every word attached to the first), for models that read no parse;
    - `load()`: its pipeline, built once on first use (dropped when pickled, rebuilt where it is unpickled).

    Args:
        language: language code of the texts.
        pretokenized: texts are already tokenized (words separated by spaces); the split is kept.
        cache_path: SQLite cache file; default `$HF_SRCFEAT_ANNOTATION_CACHE`, else
            `~/.cache/hf_srcfeat/annotations.sqlite`.
        use_cache: read and write the cache; `False` parses every text.
        batch_size: texts handed to the backend at once.
        max_characters: longest text parsed (default 10,000, about 1,800 words); a longer one is an error naming it.
    """

    backend = ""

    def __init__(self, language: str, pretokenized: bool = False, cache_path: str | os.PathLike | None = None,
                 use_cache: bool = True, batch_size: int = 256, max_characters: int = DEFAULT_MAX_CHARACTERS):
        self.language = language
        self.pretokenized = pretokenized
        self.words_only = False  # see `with_words_only`
        self.batch_size = batch_size
        self.max_characters = max_characters
        self.cache = AnnotationCache(cache_path or default_cache_path()) if use_cache else None
        self._pipeline = None
        self._lock = threading.Lock()  # one pipeline, used by one thread at a time
        self._helpers: tuple[int, Pool] | None = None  # (count, process pool) of `annotate(num_proc=...)`

    # ------------------------------------------------------------------ what a backend implements

    def settings(self) -> dict:
        """JSON-able description a saved tokenizer keeps to re-create this annotator."""
        raise NotImplementedError

    def identity_parts(self) -> list[str]:
        raise NotImplementedError

    def load(self):
        raise NotImplementedError

    def parse_batch(self, texts: list[str]) -> list[AnnotatedSentence]:
        raise NotImplementedError

    @classmethod
    def from_arguments(cls, language: str | None, model: str | os.PathLike | None, device: str, **options
                       ) -> Annotator:
        """The annotator a command's `--annotator` arguments describe (`annotators.make_annotator`)."""
        raise NotImplementedError

    @classmethod
    def from_settings(cls, settings: dict, **options) -> Annotator:
        """Re-create the annotator whose `settings()` a tokenizer recorded."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    def __getstate__(self) -> dict:
        # The pipeline is rebuilt on first use; helper processes belong to the process that started them.
        return {**self.__dict__, "_pipeline": None, "_lock": None, "_helpers": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())
        self.__dict__.setdefault("_helpers", None)
        self.__dict__.setdefault("words_only", False)

    def with_pretokenized_input(self) -> Annotator:
        """The same annotator for texts whose words are already separated by spaces."""
        return self._twin(pretokenized=True)

    def with_words_only(self) -> Annotator:
        """The same annotator segmenting texts into its words without tagging or parsing them: the words (and so
        the subwords) are those of a full parse, for a model that reads no tag or tree (`config.reads_parse`)."""
        return self._twin(words_only=True)

    def _twin(self, **settings: bool) -> Annotator:
        """A copy with `settings` changed and a pipeline, lock and helper processes of its own (made on first use)."""
        twin = copy.copy(self)
        vars(twin).update(settings, _pipeline=None, _lock=threading.Lock(), _helpers=None)
        return twin

    def close(self) -> None:
        """Stop the helper processes `annotate(num_proc=...)` started (they otherwise stay up for the next call
        and end with this annotator or the interpreter)."""
        if self._helpers is not None:
            self._helpers[1].terminate()
            self._helpers = None

    @property
    def pipeline(self):
        if self._pipeline is None:
            try:
                self._pipeline = self.load()
            except AnnotatorLoadError:
                raise
            except Exception as error:  # noqa: BLE001 - whatever the backend raises, the parser is unavailable
                language = f" ({self.language})" if self.language else ""  # a spaCy pipeline's, once loaded
                raise AnnotatorLoadError(f"the {self.backend} annotator{language} cannot load: "
                                         f"{type(error).__name__}: {error}") from error
        return self._pipeline

    @property
    def identity(self) -> str:
        """Cache key part: the annotation format, the backend, and everything that changes its output."""
        parts = [f"format={ANNOTATION_FORMAT}", f"backend={self.backend}", f"lang={self.language}",
                 f"pretokenized={self.pretokenized}", *self.identity_parts()]
        if self.words_only:  # a part only when set, so that the keys of full parses stay what they were
            parts.append("words_only=True")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def __call__(self, texts: str | Sequence[str], show_progress: bool = False) -> list[AnnotatedSentence]:
        return self.annotate([texts] if isinstance(texts, str) else texts, show_progress=show_progress)

    def annotate(self, texts: Sequence[str], show_progress: bool = True, num_proc: int = 1
                 ) -> list[AnnotatedSentence]:
        """One AnnotatedSentence per text (cached texts are not parsed again). With `num_proc` > 1 the texts not
        yet cached are parsed by that many processes, one torch thread each: this one and `num_proc` - 1 helpers
        with their own pipeline, which stay up for later calls (`close()` stops them)."""
        for index, text in enumerate(texts):
            check_text(index, text)
            if len(text) > self.max_characters:
                raise ValueError(f"text {index} has {len(text):,} characters, more than max_characters="
                                 f"{self.max_characters:,}: split it into sentences (the models translate sentences) "
                                 "or raise max_characters.")
        unique = list(dict.fromkeys(texts))
        identity = self.identity
        done = self.cache.get_many(identity, unique) if self.cache is not None else {}
        missing = [text for text in unique if text not in done]
        if missing:
            from tqdm.auto import tqdm

            progress = tqdm(total=len(missing), desc=self.backend, unit="sent", disable=not show_progress)
            chunks = [missing[start:start + self.batch_size] for start in range(0, len(missing), self.batch_size)]
            for parsed, as_json in self._parse_chunks(chunks, num_proc):
                if self.cache is not None:
                    self.cache.put_many(identity, as_json or parsed)
                done.update(parsed)
                progress.update(len(parsed))
            progress.close()
        return [done[text] for text in texts]

    def _parse_chunks(self, chunks: list[list[str]], num_proc: int
                      ) -> Iterator[tuple[dict[str, AnnotatedSentence], dict[str, str] | None]]:
        """The parses of each chunk as each is done, with their JSON where a helper sent it. With `num_proc` > 1
        this process parses too, and `num_proc` - 1 helper processes take chunks from the same queue: a helper that
        is still loading its models holds up nothing, and helpers stay up for the next call (a corpus is annotated
        chunk by chunk), so the models load once per process."""
        if num_proc <= 1 or len(chunks) < 2:
            for chunk in chunks:
                yield self._parse_here(chunk), None
            return
        helpers = self._helper_pool(num_proc - 1)
        pending = deque(chunks)
        finished: queue.Queue = queue.Queue()  # (chunk, parses as JSON, error) from the helpers
        state = {"outstanding": 0}
        guard = threading.Lock()

        def hand_out() -> None:
            """Give a helper the next chunk; runs again as each of its chunks comes back, so it never waits on
            this process."""
            with guard:
                if not pending:
                    return
                chunk = pending.popleft()
                state["outstanding"] += 1

            def done(parses: list[str]) -> None:
                finished.put((chunk, parses, None))
                hand_out()

            helpers.apply_async(_parse_in_helper, (chunk,), callback=done,
                                error_callback=lambda error: finished.put((chunk, None, error)))

        def collected(item) -> tuple[dict[str, AnnotatedSentence], dict[str, str]]:
            chunk, parses, error = item
            with guard:
                state["outstanding"] -= 1
            if error is not None:
                raise error
            return (dict(zip(chunk, (AnnotatedSentence.from_json(parse) for parse in parses), strict=True)),
                    dict(zip(chunk, parses, strict=True)))

        for _ in range(num_proc - 1):
            hand_out()
        with one_torch_thread():
            while True:
                while not finished.empty():
                    yield collected(finished.get())
                with guard:
                    own = pending.popleft() if pending else None
                    if own is None and state["outstanding"] == 0:
                        return
                if own is None:  # the rest is with the helpers
                    yield collected(finished.get())
                    continue
                yield self._parse_here(own), None

    def _parse_here(self, chunk: list[str]) -> dict[str, AnnotatedSentence]:
        """A chunk parsed by this process's pipeline."""
        with self._lock:
            return dict(zip(chunk, self.parse_batch(list(chunk)), strict=True))

    def _helper_pool(self, count: int) -> Pool:
        """`count` spawned processes holding a copy of this annotator (no cache: this process writes it), each with
        one torch thread, loading the models as soon as they start; kept for later calls."""
        if self._helpers is not None and self._helpers[0] == count:
            return self._helpers[1]
        self.close()
        import multiprocessing

        helper = copy.copy(self)
        helper.cache = None
        pool = multiprocessing.get_context("spawn").Pool(count, initializer=_start_helper, initargs=(helper,))
        weakref.finalize(self, pool.terminate)
        self._helpers = (count, pool)
        return pool


@contextlib.contextmanager
def one_torch_thread():
    """This process parses with one torch thread while its helpers work (one thread per process, as they have)."""
    try:
        import torch
    except ImportError:  # a backend without torch (spaCy can run without it)
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def join_sentence_roots(words: list[AnnotatedWord], roots: list[int]) -> list[AnnotatedWord]:
    """One tree over a text a parser split into sentences: every later sentence's root (1-based `roots`, the
    first one kept) attaches to the first sentence's root, with the relation it had."""
    first = roots[0]
    return [replace(word, head=first) if index + 1 in roots[1:] else word for index, word in enumerate(words)]


def split_long_text(text: str, max_characters: int) -> list[str]:
    """`text` in pieces of at most `max_characters`, cut at whitespace (hard only inside a longer run without
    any): what a parser can take of a line too long to parse whole."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > max_characters:
        cut = text.rfind(" ", start + 1, start + max_characters + 1)
        cut = cut if cut > start else start + max_characters
        pieces.append(text[start:cut])
        start = cut
        while start < len(text) and text[start].isspace():
            start += 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def join_pieces(text: str, pieces: Sequence[AnnotatedSentence]) -> AnnotatedSentence:
    """One tree over the parses of `split_long_text`'s pieces: every later piece's root attaches to the first
    piece's root (as `join_sentence_roots` joins the sentences of one text)."""
    words: list[AnnotatedWord] = []
    roots: list[int] = []
    for piece in pieces:
        offset = len(words)
        if words:  # the pieces were cut at whitespace
            words[-1] = replace(words[-1], space_after=True)
        words.extend(replace(word, head=word.head + offset if word.head else 0) for word in piece.words)
        roots.extend(offset + index + 1 for index, word in enumerate(piece.words) if word.head == 0)
    return AnnotatedSentence(join_sentence_roots(words, roots), text=text)


#: The annotator a helper process of `Annotator.annotate(num_proc=...)` parses with, or why it cannot load.
_HELPER_ANNOTATOR: Annotator | None = None
_HELPER_LOAD_ERROR: Exception | None = None


def _start_helper(annotator: Annotator) -> None:
    """A helper process starts: one torch thread, the models loaded once, before the first chunk arrives. A
    failure is kept for the first chunk to raise: a pool whose initializer raises restarts the process forever."""
    global _HELPER_ANNOTATOR, _HELPER_LOAD_ERROR
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(1)
    _HELPER_ANNOTATOR = annotator
    try:
        annotator.pipeline  # noqa: B018 - loads the models
    except Exception as error:  # noqa: BLE001 - raised again with the first chunk, in the calling process
        _HELPER_LOAD_ERROR = error


def _parse_in_helper(texts: list[str]) -> list[str]:
    """A chunk parsed in a helper process; the parses go back as JSON."""
    if _HELPER_LOAD_ERROR is not None:
        raise _HELPER_LOAD_ERROR
    assert _HELPER_ANNOTATOR is not None, "set by _start_helper"
    return [sentence.to_json() for sentence in _HELPER_ANNOTATOR.parse_batch(texts)]
