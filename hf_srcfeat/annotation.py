"""Linguistic annotation of source sentences: Stanza (tokens, UPOS, XPOS, lemma, deprel, head) or CoNLL-U.

Where the Stanza models live is settable: the `model_dir` argument, else `$HF_SRCFEAT_STANZA_DIR`, else
Stanza's own resources folder with its normal download. An explicit folder never triggers a download.
Annotations are cached on disk (SQLite, JSON values) keyed by the text and the annotator's identity, so a
corpus is parsed once.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

STANZA_DIR_ENV = "HF_SRCFEAT_STANZA_DIR"
ANNOTATION_CACHE_ENV = "HF_SRCFEAT_ANNOTATION_CACHE"
STANZA_PROCESSORS = "tokenize,mwt,pos,lemma,depparse"
#: Part of the cache key: raise it when AnnotatedWord changes, so older cache entries are not reused.
ANNOTATION_FORMAT = 3  # 3: words carry their morphological features (FEATS)


@dataclass(frozen=True)
class AnnotatedWord:
    """One syntactic word. `head` is 1-based as in CoNLL-U; 0 marks the root. `space_after` says whether
    whitespace followed the word in the raw text (CoNLL-U `SpaceAfter=No`); the tokenizer keeps that spacing.
    `feats` is the CoNLL-U FEATS string ("Number=Plur|Person=3", "_" for none). `factors` holds factors no
    parser gives (named-entity tags, domain tags, word clusters...) as (name, value) pairs: CoNLL-U MISC
    `Factor_<name>=<value>`, or OpenNMT-py's `word￨value` input (`hf_srcfeat.user_factors`)."""

    text: str
    upos: str
    xpos: str
    lemma: str
    deprel: str
    head: int
    space_after: bool = True
    feats: str = "_"
    factors: tuple[tuple[str, str], ...] = ()

    def factor(self, name: str) -> str | None:
        """The value of the user factor `name`, or None."""
        return dict(self.factors).get(name)


@dataclass
class AnnotatedSentence:
    """The words of one source segment with their features; `sentence_id` names it in error messages."""

    words: list[AnnotatedWord]
    sentence_id: str = ""
    text: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        self.check()

    @property
    def name(self) -> str:
        return self.sentence_id or repr(self.text[:60] or " ".join(str(w.text) for w in self.words[:8]))

    def check(self) -> None:
        """Raise a ValueError naming the sentence unless the heads form one tree over its words."""
        if not self.words:
            raise ValueError(f"sentence {self.name} has no words.")
        count = len(self.words)
        for index, word in enumerate(self.words, start=1):
            if not isinstance(word, AnnotatedWord):
                raise TypeError(f"sentence {self.name}: word {index} is {type(word).__name__}, not an AnnotatedWord.")
            if not isinstance(word.text, str) or not word.text:
                raise ValueError(f"sentence {self.name}: word {index} has text {word.text!r}; a word is a non-empty "
                                 "string.")
            if isinstance(word.head, bool) or not isinstance(word.head, int):
                raise TypeError(f"sentence {self.name}: word {index} ({word.text!r}) has head {word.head!r} of type "
                                f"{type(word.head).__name__}; heads are integers (1-based, 0 for the root).")
            if not 0 <= word.head <= count:
                raise ValueError(f"sentence {self.name}: word {index} ({word.text!r}) has head {word.head}, "
                                 f"outside 0..{count}.")
        roots = [index for index, word in enumerate(self.words, start=1) if word.head == 0]
        if len(roots) != 1:
            raise ValueError(f"sentence {self.name} has {len(roots)} roots (words {roots}); a dependency tree "
                             "needs exactly one.")
        reaches_root = {0}
        for start in range(1, count + 1):
            path, node = set(), start
            # Each word is walked once: a path stops at the first word already known to reach the root.
            while node not in reaches_root:
                if node in path:
                    raise ValueError(f"sentence {self.name}: the heads of words {sorted(path)} form a cycle.")
                path.add(node)
                node = self.words[node - 1].head
            reaches_root.update(path)

    @property
    def heads(self) -> list[int]:
        return [word.head for word in self.words]

    def to_json(self) -> str:
        return json.dumps({"sentence_id": self.sentence_id, "text": self.text,
                           "words": [asdict(word) for word in self.words]}, ensure_ascii=False)

    @classmethod
    def from_json(cls, payload: str) -> AnnotatedSentence:
        data = json.loads(payload)
        words = [AnnotatedWord(**{**word, "factors": tuple(tuple(pair) for pair in word.get("factors", ()))})
                 for word in data["words"]]
        return cls(words=words, sentence_id=data["sentence_id"], text=data["text"])

    @classmethod
    def from_features(cls, words: Sequence[str], upos: Sequence[str], lemmas: Sequence[str],
                      deprels: Sequence[str], heads: Sequence[int], xpos: Sequence[str] | None = None,
                      sentence_id: str = "", feats: Sequence[str] | None = None) -> AnnotatedSentence:
        """Build from parallel per-word lists; lists of different lengths raise an error naming them."""
        xpos = xpos if xpos is not None else ["_"] * len(words)
        feats = feats if feats is not None else ["_"] * len(words)
        lengths = {"words": len(words), "upos": len(upos), "lemmas": len(lemmas), "deprels": len(deprels),
                   "heads": len(heads), "xpos": len(xpos), "feats": len(feats)}
        if len(set(lengths.values())) != 1:
            name = sentence_id or repr(" ".join(words[:8]))
            raise ValueError(f"sentence {name}: features do not match its words: {lengths}.")
        return cls(words=[AnnotatedWord(text, tag, extra_tag, lemma, relation, int(head), feats=morphology)
                          for text, tag, extra_tag, lemma, relation, head, morphology
                          in zip(words, upos, xpos, lemmas, deprels, heads, feats, strict=True)],
                   sentence_id=sentence_id, text=" ".join(words))


def check_text(index: int, text: object) -> None:
    """Raise an error naming text `index` unless it is a non-empty string of valid Unicode."""
    if isinstance(text, (bytes, bytearray)):
        raise TypeError(f"text {index} is {type(text).__name__}, not str: decode it first (text.decode('utf-8')).")
    if not isinstance(text, str):
        raise TypeError(f"text {index} is {type(text).__name__} ({text!r:.60}), not str: a sentence must be a string.")
    if not text.strip():
        raise ValueError(f"text {index} is empty or whitespace only; there is nothing to annotate.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"text {index} has a lone surrogate ({text[error.start]!r}) at character {error.start}: "
                         "not valid Unicode text (was it decoded with errors='surrogateescape'?).") from None


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


def multiword_spacing(words: list[AnnotatedWord], form: str, space_after: bool) -> list[AnnotatedWord]:
    """The words of one multi-word token with its spacing: they touch when they spell its form ("does" +
    "n't" = "doesn't"), else ("du" = "de" + "le") they are kept apart; the last takes the token's spacing."""
    touching = "".join(word.text for word in words) == form
    return [replace(word, space_after=space_after if index == len(words) - 1 else not touching)
            for index, word in enumerate(words)]


def read_conllu(source: str | os.PathLike | Iterable[str]) -> Iterator[AnnotatedSentence]:
    """Sentences of a CoNLL-U file (plain or .gz) or of an iterable of its lines.

    Multi-word token lines (`3-4`) and empty nodes (`8.1`) are skipped: features belong to syntactic words.
    The relation subtype is kept (`obl:tmod`); compare `deprel.split(':')[0]` for coarse LAS.
    """
    if isinstance(source, (str, os.PathLike)):
        opener = gzip.open if str(source).endswith(".gz") else open
        with opener(source, "rt", encoding="utf-8") as handle:  # streamed: a corpus is never read whole
            try:
                yield from read_conllu(handle)
            except UnicodeDecodeError as error:
                raise ValueError(f"{source} is not UTF-8 text ({error.reason}, byte {error.object[error.start]:#x});"
                                 " convert it, e.g. iconv -f latin1 -t utf-8.") from None
            except ValueError as error:
                raise ValueError(f"{source}: {error}") from error
        return
    words: list[AnnotatedWord] = []
    sentence_id, text = "", ""
    multiword: tuple[int, int, str, bool] | None = None  # (first id, last id, form, space after) of a range

    def integer(value: str, what: str, line_number: int) -> int:
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"CoNLL-U line {line_number}: {what} {value!r} is not an integer.") from None

    def finished(line_number: int) -> AnnotatedSentence:
        if multiword is not None:
            raise ValueError(f"CoNLL-U line {line_number}: the sentence ends inside the multi-word token "
                             f"{multiword[0]}-{multiword[1]} ({multiword[2]!r}), whose words are missing.")
        return AnnotatedSentence(words=words, sentence_id=sentence_id, text=text)

    line_number = 0
    for line_number, raw in enumerate(source, start=1):
        line = raw.rstrip("\r\n")
        if line_number == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte order mark
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "sent_id":
                sentence_id = value.strip()
            elif key.strip() == "text":
                text = value.strip()
            continue
        if not line.strip():
            if words:
                yield finished(line_number)
            words, sentence_id, text, multiword = [], "", "", None
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise ValueError(f"CoNLL-U line {line_number} has {len(columns)} columns, expected 10: {line!r}")
        if "." in columns[0]:
            continue
        if "-" in columns[0]:
            first, _, last = columns[0].partition("-")
            first_id, last_id = integer(first, "id", line_number), integer(last, "id", line_number)
            multiword = (first_id, last_id, columns[1], "SpaceAfter=No" not in columns[9])
            continue
        word_id = integer(columns[0], "id", line_number)
        if word_id != len(words) + 1:
            raise ValueError(f"CoNLL-U line {line_number}: word id {columns[0]} out of order in sentence "
                             f"{sentence_id or line_number}.")
        words.append(AnnotatedWord(text=columns[1], lemma=columns[2], upos=columns[3], xpos=columns[4],
                                   head=integer(columns[6], "head", line_number), deprel=columns[7],
                                   space_after="SpaceAfter=No" not in columns[9], feats=columns[5],
                                   factors=misc_factors(columns[9])))
        if multiword is not None and word_id == multiword[1]:
            words[multiword[0] - 1:] = multiword_spacing(words[multiword[0] - 1:], multiword[2], multiword[3])
            multiword = None
    if words:
        yield finished(line_number + 1)


#: Prefix of a user factor in the CoNLL-U MISC column: `Factor_ner=B-PER`.
MISC_FACTOR_PREFIX = "Factor_"


def misc_factors(misc: str) -> tuple[tuple[str, str], ...]:
    """The `Factor_<name>=<value>` entries of a MISC column, as (name, value) pairs."""
    pairs = []
    for entry in misc.split("|"):
        name, separator, value = entry.partition("=")
        if separator and name.startswith(MISC_FACTOR_PREFIX) and len(name) > len(MISC_FACTOR_PREFIX):
            pairs.append((name[len(MISC_FACTOR_PREFIX):], value))
    return tuple(pairs)


def misc_column(word: AnnotatedWord) -> str:
    entries = [] if word.space_after else ["SpaceAfter=No"]
    entries += [f"{MISC_FACTOR_PREFIX}{name}={value}" for name, value in word.factors]
    return "|".join(entries) or "_"


def conllu_lines(sentence: AnnotatedSentence) -> list[str]:
    """One sentence as CoNLL-U lines (with `# text` when known, `SpaceAfter=No` and user factors in MISC), ending
    in a blank line; `read_conllu` reads it back to the same words. DEPS and other MISC entries are not kept."""
    lines = [f"# sent_id = {sentence.sentence_id}"] if sentence.sentence_id else []
    if sentence.text:
        lines.append(f"# text = {sentence.text}")
    for index, word in enumerate(sentence.words, start=1):
        lines.append("\t".join([str(index), word.text, word.lemma, word.upos, word.xpos, word.feats, str(word.head),
                                word.deprel, "_", misc_column(word)]))
    return [*lines, ""]


def write_conllu(sentences: Iterable[AnnotatedSentence], path: str | os.PathLike, compress: bool | None = None
                 ) -> int:
    """Write sentences as a CoNLL-U file, gzip when `compress` (default: when the name ends in .gz); returns how
    many were written."""
    compress = str(path).endswith(".gz") if compress is None else compress
    opener = gzip.open if compress else open
    count = 0
    with opener(path, "wt", encoding="utf-8") as handle:
        for sentence in sentences:
            handle.write("\n".join(conllu_lines(sentence)) + "\n")
            count += 1
    return count


class AnnotationCacheError(RuntimeError):
    """The annotation cache file is not a readable cache."""


class AnnotationCache:
    """Persistent map (annotator identity, text) -> AnnotatedSentence in one SQLite file of JSON values.

    Each thread gets its own connection (SQLite connections may not cross threads), so a tokenizer or pipeline can
    serve a threaded web server or a thread pool."""

    #: Seconds to wait for a cache another process holds locked before going on without it.
    lock_timeout = 30.0

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._local = threading.local()
        self.usable = True  # False once the file could not be opened or written: parsing goes on without it

    @property
    def connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=self.lock_timeout)
            connection.execute("CREATE TABLE IF NOT EXISTS annotations (key TEXT PRIMARY KEY, value TEXT)")
            self._local.connection = connection
        return connection

    def _unusable(self, error: Exception) -> None:
        """A file that is not a cache is an error naming it; one that cannot be opened, read or written right now
        (read-only, locked, no room) is a warning, and parsing goes on without caching."""
        if not isinstance(error, sqlite3.OperationalError):
            raise AnnotationCacheError(
                f"annotation cache {self.path} is unreadable ({error}); delete it (it is rebuilt as texts are parsed) "
                f"or choose another file (cache_path=, --annotation_cache, ${ANNOTATION_CACHE_ENV}).") from error
        if self.usable:
            warnings.warn(f"annotation cache {self.path} cannot be used ({error}); parsing goes on without caching.",
                          stacklevel=3)
        self.usable = False

    def __getstate__(self) -> dict:
        # Picklable (datasets.map hashes and ships the tokenizer): connections are reopened where needed.
        return {"path": self.path, "usable": self.usable}

    def __setstate__(self, state: dict) -> None:
        self.path, self.usable, self._local = state["path"], state.get("usable", True), threading.local()

    @staticmethod
    def key(identity: str, text: str) -> str:
        return hashlib.sha256(f"{identity}\n{text}".encode()).hexdigest()

    def get_many(self, identity: str, texts: Sequence[str]) -> dict[str, AnnotatedSentence]:
        keys = {self.key(identity, text): text for text in texts}
        found: dict[str, AnnotatedSentence] = {}
        if not self.usable:
            return found
        key_list = list(keys)
        try:
            for start in range(0, len(key_list), 500):
                chunk = key_list[start:start + 500]
                rows = self.connection.execute(
                    f"SELECT key, value FROM annotations WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                for key, value in rows:
                    found[keys[key]] = AnnotatedSentence.from_json(value)
        except sqlite3.DatabaseError as error:
            self._unusable(error)
        return found

    def put_many(self, identity: str, sentences: dict[str, AnnotatedSentence]) -> None:
        if not self.usable:
            return
        try:
            with self.connection:
                self.connection.executemany(
                    "INSERT OR REPLACE INTO annotations VALUES (?, ?)",
                    [(self.key(identity, text), sentence.to_json()) for text, sentence in sentences.items()])
        except sqlite3.DatabaseError as error:
            self._unusable(error)

    def __len__(self) -> int:
        return self.connection.execute("SELECT COUNT(*) FROM annotations").fetchone()[0]


def default_cache_path() -> Path:
    """`$HF_SRCFEAT_ANNOTATION_CACHE`, else `annotations.sqlite` in the user's cache folder."""
    if os.environ.get(ANNOTATION_CACHE_ENV):
        return Path(os.environ[ANNOTATION_CACHE_ENV])
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "hf_srcfeat" / "annotations.sqlite"


_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """SHA-256 of a file's content, computed once per process for each (path, size, mtime)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        _FILE_DIGESTS[key] = digest.hexdigest()[:16]
    return _FILE_DIGESTS[key]


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


class Annotator:
    """What every annotator shares: one text = one tree, validation of the texts, the on-disk cache, batching,
    the progress bar, worker processes and thread safety. A backend (Stanza, spaCy, ...) subclasses it and
    implements four things:

    - `backend`: its name, and `settings()`: what a saved tokenizer records to re-create it (`annotator_from_settings`);
    - `identity_parts()`: everything that changes its output (library and model versions), part of the cache key;
    - `parse_batch(texts)`: the parses of a batch of texts (pre-tokenized when `self.pretokenized`), one tree each;
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
                 use_cache: bool = True, batch_size: int = 256, max_characters: int = 10000):
        self.language = language
        self.pretokenized = pretokenized
        self.batch_size = batch_size
        self.max_characters = max_characters
        self.cache = AnnotationCache(cache_path or default_cache_path()) if use_cache else None
        self._pipeline = None
        self._lock = threading.Lock()  # one pipeline, used by one thread at a time

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

    # ------------------------------------------------------------------ shared

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pipeline": None, "_lock": None}  # the pipeline is rebuilt on first use

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def with_pretokenized_input(self) -> Annotator:
        """The same annotator for texts whose words are already separated by spaces."""
        twin = copy.copy(self)
        twin.pretokenized, twin._pipeline, twin._lock = True, None, threading.Lock()
        return twin

    @property
    def pipeline(self):
        if self._pipeline is None:
            self._pipeline = self.load()
        return self._pipeline

    @property
    def identity(self) -> str:
        """Cache key part: the annotation format, the backend, and everything that changes its output."""
        parts = [f"format={ANNOTATION_FORMAT}", f"backend={self.backend}", f"lang={self.language}",
                 f"pretokenized={self.pretokenized}", *self.identity_parts()]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def __call__(self, texts: str | Sequence[str], show_progress: bool = False) -> list[AnnotatedSentence]:
        return self.annotate([texts] if isinstance(texts, str) else texts, show_progress=show_progress)

    def annotate(self, texts: Sequence[str], show_progress: bool = True, num_proc: int = 1
                 ) -> list[AnnotatedSentence]:
        """One AnnotatedSentence per text (cached texts are not parsed again). With `num_proc` > 1 the texts not
        yet cached are parsed by that many worker processes (each with one torch thread and its own pipeline),
        which write to the same cache."""
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
        if missing and num_proc > 1 and len(missing) >= 2 * num_proc:
            done.update(self._annotate_in_processes(missing, num_proc, show_progress))
        elif missing:
            from tqdm.auto import tqdm

            progress = tqdm(total=len(missing), desc=self.backend, unit="sent", disable=not show_progress)
            for start in range(0, len(missing), self.batch_size):
                chunk = missing[start:start + self.batch_size]
                with self._lock:
                    parsed = dict(zip(chunk, self.parse_batch(list(chunk)), strict=True))
                if self.cache is not None:
                    self.cache.put_many(identity, parsed)
                done.update(parsed)
                progress.update(len(chunk))
            progress.close()
        return [done[text] for text in texts]

    def _annotate_in_processes(self, texts: list[str], num_proc: int, show_progress: bool
                               ) -> dict[str, AnnotatedSentence]:
        """Parse `texts` in `num_proc` spawned processes, every num_proc-th text each; the parses come back as JSON."""
        import multiprocessing

        chunks = [texts[start::num_proc] for start in range(num_proc)]
        with multiprocessing.get_context("spawn").Pool(num_proc) as pool:
            results = pool.starmap(_parse_chunk, [(self, chunk, show_progress and index == 0)
                                                  for index, chunk in enumerate(chunks)])
        return {text: AnnotatedSentence.from_json(parse) for chunk, parses in zip(chunks, results, strict=True)
                for text, parse in zip(chunk, parses, strict=True)}


def join_sentence_roots(words: list[AnnotatedWord], roots: list[int]) -> list[AnnotatedWord]:
    """One tree over a text a parser split into sentences: every later sentence's root (1-based `roots`, the
    first one kept) attaches to the first sentence's root, with the relation it had."""
    first = roots[0]
    return [replace(word, head=first) if index + 1 in roots[1:] else word for index, word in enumerate(words)]


class StanzaAnnotator(Annotator):
    """Stanza pipeline (tokenize, mwt, pos, lemma, depparse) annotating each text as one sentence.

    Args:
        language: Stanza language code.
        model_dir: Stanza resources folder; default `$HF_SRCFEAT_STANZA_DIR`, else Stanza's default folder
            with its normal download. A folder given here or by the variable is used as is, never downloaded.
        device: where Stanza runs ("cpu" or "cuda").
        max_characters: longest text parsed (default 10,000): Stanza's time and memory grow quickly with a text's
            length (1,000 words took 17 s and 2.3 GB; 5,000 words, 91 s and over 11 GB before failing).
        pretokenized, cache_path, use_cache, batch_size: as `Annotator`.
    """

    backend = "stanza"

    def __init__(self, language: str = "en", model_dir: str | os.PathLike | None = None,
                 pretokenized: bool = False, cache_path: str | os.PathLike | None = None,
                 use_cache: bool = True, batch_size: int = 256, device: str = "cpu", max_characters: int = 10000):
        chosen = model_dir or os.environ.get(STANZA_DIR_ENV)
        self.model_dir = Path(chosen) if chosen else None
        if self.model_dir is not None and not (self.model_dir / language).is_dir():
            raise FileNotFoundError(
                f"No Stanza models for {language!r} in {self.model_dir} (from "
                f"{'model_dir' if model_dir else STANZA_DIR_ENV}); expected a folder {self.model_dir / language}.")
        self.device = device
        super().__init__(language, pretokenized=pretokenized, cache_path=cache_path, use_cache=use_cache,
                         batch_size=batch_size, max_characters=max_characters)

    def settings(self) -> dict:
        return {"backend": self.backend, "language": self.language}

    @property
    def processors(self) -> str:
        return "tokenize,pos,lemma,depparse" if self.pretokenized else STANZA_PROCESSORS

    @property
    def models_folder(self) -> Path:
        """Where the Stanza models are read from: `model_dir`, else Stanza's own resources folder
        ($STANZA_RESOURCES_DIR or its default), into which its normal download puts them."""
        if self.model_dir is not None:
            return self.model_dir
        from stanza.resources.common import DEFAULT_MODEL_DIR

        return Path(os.environ.get("STANZA_RESOURCES_DIR", DEFAULT_MODEL_DIR))

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
                       tokenize_pretokenized=self.pretokenized, use_gpu=self.device != "cpu",
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


def annotator_from_settings(settings: dict, **options) -> Annotator:
    """Re-create the annotator a tokenizer recorded (`Annotator.settings()`); `options` (cache_path, model_dir,
    device, ...) are passed on to its class."""
    backend = settings.get("backend", "stanza")
    if backend == "stanza":
        return StanzaAnnotator(language=settings.get("language", "en"), **options)
    if backend == "spacy":
        from .annotator_spacy import SpacyAnnotator

        return SpacyAnnotator(settings["model"], sentences=settings.get("sentences", "join"), **options)
    raise ValueError(f"unknown annotator backend {backend!r} in the tokenizer's settings ({settings}); this version of "
                     "hf_srcfeat knows 'stanza' and 'spacy'.")


def _parse_chunk(annotator: Annotator, texts: list[str], show_progress: bool) -> list[str]:
    """A worker process of `Annotator.annotate(num_proc=...)`: one torch thread, its own pipeline."""
    import torch

    torch.set_num_threads(1)
    return [sentence.to_json() for sentence in annotator.annotate(texts, show_progress=show_progress)]
