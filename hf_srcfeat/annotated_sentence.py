"""The data model of a parse: `AnnotatedWord`s forming one dependency tree in an `AnnotatedSentence`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace


@dataclass(frozen=True)
class AnnotatedWord:
    """One syntactic word. `head` is 1-based as in CoNLL-U; 0 marks the root. `space_after` says whether
    whitespace followed the word in the raw text (CoNLL-U `SpaceAfter=No`); the tokenizer keeps that spacing.
    `feats` is the CoNLL-U FEATS string ("Number=Plur|Person=3", "_" for none). `factors` holds factors no
    parser gives (named-entity tags, domain tags, word clusters...) as (name, value) pairs: CoNLL-U MISC
    `Factor_<name>=<value>`, or OpenNMT-py's `word￨value` input (`hf_srcfeat.data.user_factors`)."""

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


#: AnnotatedWord's fields in order: the keys of a word in `AnnotatedSentence.to_json`.
WORD_FIELDS = tuple(field_.name for field_ in fields(AnnotatedWord))


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
            path: set[int] = set()
            node = start
            # Each word is walked once: a path stops at the first word already known to reach the root.
            while node not in reaches_root:
                if node in path:
                    raise ValueError(f"sentence {self.name}: the heads of words {sorted(path)} form a cycle.")
                path.add(node)
                node = self.words[node - 1].head
            reaches_root.update(path)

    @property
    def raw_text(self) -> str:
        """The text the parse is of: its `# text`, else its words with their recorded spacing (`SpaceAfter=No`)."""
        if self.text:
            return self.text
        return "".join(word.text + (" " if word.space_after else "") for word in self.words).rstrip()

    @property
    def heads(self) -> list[int]:
        return [word.head for word in self.words]

    def to_json(self) -> str:
        # Fields read directly: `dataclasses.asdict` deep-copies every value and took most of the time here, which
        # the parse cache pays for every sentence.
        return json.dumps({"sentence_id": self.sentence_id, "text": self.text,
                           "words": [{name: getattr(word, name) for name in WORD_FIELDS} for word in self.words]},
                          ensure_ascii=False)

    @classmethod
    def from_json(cls, payload: str) -> AnnotatedSentence:
        data = json.loads(payload)
        words = [AnnotatedWord(**{**word, "factors": tuple(tuple(pair) for pair in word.get("factors", ()))})
                 for word in data["words"]]
        return cls(words=words, sentence_id=data["sentence_id"], text=data["text"])

    @classmethod
    def from_features(cls, words: Sequence[str], upos: Sequence[str], lemmas: Sequence[str],
                      deprels: Sequence[str], heads: Sequence[int], xpos: Sequence[str] | None = None,
                      sentence_id: str = "", feats: Sequence[str] | None = None, text: str | None = None
                      ) -> AnnotatedSentence:
        """Build from parallel per-word lists; lists of different lengths raise an error naming them. `text` is the
        sentence as written: each word's `space_after` is read from it, so that subwords are cut as from raw text
        (`man,` not `man ,`, as in training). Without it every word is followed by a space."""
        xpos = xpos if xpos is not None else ["_"] * len(words)
        feats = feats if feats is not None else ["_"] * len(words)
        lengths = {"words": len(words), "upos": len(upos), "lemmas": len(lemmas), "deprels": len(deprels),
                   "heads": len(heads), "xpos": len(xpos), "feats": len(feats)}
        if len(set(lengths.values())) != 1:
            name = sentence_id or repr(" ".join(words[:8]))
            raise ValueError(f"sentence {name}: features do not match its words: {lengths}.")
        spacing = [True] * len(words) if text is None else spaces_after(words, text, sentence_id)
        return cls(words=[AnnotatedWord(form, tag, extra_tag, lemma, relation, int(head), feats=morphology,
                                        space_after=space)
                          for form, tag, extra_tag, lemma, relation, head, morphology, space
                          in zip(words, upos, xpos, lemmas, deprels, heads, feats, spacing, strict=True)],
                   sentence_id=sentence_id, text=" ".join(words) if text is None else text)


def spaces_after(words: Sequence[str], text: str, sentence_id: str = "") -> list[bool]:
    """Whether whitespace follows each word in `text`, which spells the words in order; a word it does not spell
    there is an error naming it."""
    spaces, position = [], 0
    for index, word in enumerate(words, start=1):
        found = text.find(word, position)
        if found < 0 or text[position:found].strip():
            name = sentence_id or repr(text[:60])
            raise ValueError(f"sentence {name}: word {index} ({word!r}) is not where the text goes on "
                             f"({text[position:position + 20]!r}); the text must spell the words in order.")
        position = found + len(word)
        spaces.append(position == len(text) or text[position].isspace())
    return spaces


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



def multiword_spacing(words: list[AnnotatedWord], form: str, space_after: bool) -> list[AnnotatedWord]:
    """The words of one multi-word token with its spacing: they touch when they spell its form ("does" +
    "n't" = "doesn't"), else ("du" = "de" + "le") they are kept apart; the last takes the token's spacing."""
    touching = "".join(word.text for word in words) == form
    return [replace(word, space_after=space_after if index == len(words) - 1 else not touching)
            for index, word in enumerate(words)]


#: OpenNMT-py's separator of a token's factors (U+FFE8), in its factored text format `word￨value1￨value2`.
FACTOR_SEPARATOR = "￨"


def carries_inline_factors(source: str) -> bool:
    """Whether a source is in OpenNMT-py's factored format: most of its tokens carry the factor separator (a text
    may hold the character itself, U+FFE8, a halfwidth form, now and then)."""
    tokens = source.split()
    return 2 * sum(FACTOR_SEPARATOR in token.strip(FACTOR_SEPARATOR) for token in tokens) > len(tokens)
