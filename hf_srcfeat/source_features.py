"""The source-feature contract between the feature-aware tokenizer and the models.

Every model of the zoo accepts these tensors by name (explicitly, so that `generate` forwards them to the
encoder and `Seq2SeqTrainer` does not drop them as unused columns); each method reads the ones it needs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import torch

from .feature_vocabulary import PAD_ID, UNK_ID

#: Names of the per-token feature tensors, all [batch, seq] except `dep_distance` [batch, seq, seq].
SOURCE_FEATURE_NAMES: tuple[str, ...] = (
    "pos_ids",  # POS tag id (UPOS, or XPOS with pos_tagset="xpos") of the word the token belongs to
    "lemma_ids",  # lemma id of that word
    "deprel_ids",  # dependency relation of that word to its head
    "subword_tag_ids",  # B/I/E/S position of the token inside its word (Sennrich & Haddow 2016)
    "word_ids",  # index of the word the token belongs to
    "phrase_ids",  # index of the parse phrase the token belongs to
    "dep_distance",  # edges on the dependency-tree path between the words of two tokens
    "feats_ids",  # morphological features (CoNLL-U FEATS, e.g. "Number=Plur") of that word
)

PAIRWISE_FEATURE_NAMES: frozenset[str] = frozenset({"dep_distance"})

#: Features that come from tagging and parsing; the others (subword tags, word indices) need only the annotator's
#: word segmentation, so raw text for a model that reads none of these is segmented, not parsed.
PARSED_FEATURE_NAMES: frozenset[str] = frozenset(
    {"pos_ids", "lemma_ids", "deprel_ids", "phrase_ids", "dep_distance", "feats_ids"})

#: Features that hold positions (which word, which phrase), not labels.
POSITION_FEATURE_NAMES: tuple[str, ...] = ("word_ids", "phrase_ids")

#: A dependency distance that is not known (no parse, or a link dropped in training): neither a word pair (>= 0) nor
#: a special token (-1); Deps-SAN scores it neutrally.
UNKNOWN_DISTANCE = -2


def user_factor_feature(name: str) -> str:
    """The tokenizer output (and model argument) holding the ids of user factor `name`: `factor_<name>_ids`."""
    return f"factor_{name}_ids"


def is_user_factor_feature(argument: str) -> bool:
    return argument.startswith("factor_") and argument.endswith("_ids") and len(argument) > len("factor__ids")


def user_factor_name(feature: str) -> str:
    """The name of the user factor a `factor_<name>_ids` feature holds (`user_factor_feature`'s inverse)."""
    return feature.removeprefix("factor_").removesuffix("_ids")


def user_factors_read(config) -> list[str] | None:
    """The user factors a model of `config` reads, by name; None when its config does not say (it then reads every
    feature it is given)."""
    features = getattr(config, "source_features_read", None)
    if features is None:
        return None
    return [user_factor_name(feature) for feature in features if is_user_factor_feature(feature)]


@dataclass
class SourceFeatures:
    """Source-side linguistic features aligned to subword tokens; any of them may be absent (None)."""

    pos_ids: torch.Tensor | None = None
    lemma_ids: torch.Tensor | None = None
    deprel_ids: torch.Tensor | None = None
    subword_tag_ids: torch.Tensor | None = None
    word_ids: torch.Tensor | None = None
    phrase_ids: torch.Tensor | None = None
    dep_distance: torch.Tensor | None = None
    feats_ids: torch.Tensor | None = None
    #: ids of the user factors, by tokenizer output name (`factor_<name>_ids`)
    user_factor_ids: dict[str, torch.Tensor] | None = None
    #: set by the encoder at inference: what a feature that was not given becomes (`require`), instead of an error
    defaults: MissingFeatureDefaults | None = None

    def check_shapes(self, batch_size: int, seq_len: int) -> None:
        """Raise a ValueError naming the feature whose shape does not match the tokens [batch, seq]."""
        named = [(field.name, getattr(self, field.name)) for field in fields(self)
                 if field.name not in ("user_factor_ids", "defaults")]
        named += list((self.user_factor_ids or {}).items())
        for name, value in named:
            if value is None:
                continue
            if value.is_floating_point() and name not in PAIRWISE_FEATURE_NAMES:
                raise TypeError(f"`{name}` has dtype {value.dtype}; it holds ids or indices, an integer tensor "
                                "(torch.long), as the tokenizer returns it.")
            expected = (batch_size, seq_len, seq_len) if name in PAIRWISE_FEATURE_NAMES else (batch_size, seq_len)
            if tuple(value.shape) != expected:
                raise ValueError(
                    f"`{name}` has shape {tuple(value.shape)} but the source tokens need {expected} "
                    "(features must be aligned to the subword tokens, padded like `input_ids`)."
                )
            # A word index is the word's in its whole sentence (a left-truncated one's kept words start further in),
            # a phrase index one of the kept tokens' (at most one a token); -1 is none. Beyond them, the phrase
            # layout would index out of range inside torch.
            if name in POSITION_FEATURE_NAMES and value.numel() and not torch.compiler.is_compiling():
                beyond = value.min() < -1 or (name == "phrase_ids" and value.max() >= seq_len)
                if beyond:
                    limit = f"0 to {seq_len - 1}" if name == "phrase_ids" else "0 or more"
                    raise ValueError(f"`{name}` holds indices from {int(value.min())} to {int(value.max())}, but a "
                                     f"sentence of {seq_len} tokens has indices {limit} (-1: none).")

    def require(self, name: str, method: str) -> torch.Tensor:
        """Return feature `name`. When it was not given: at inference (`defaults` set) its default, with a warning,
        so a model translates without a parse; in training a ValueError saying which method needs it and where it
        comes from."""
        value = (self.user_factor_ids or {}).get(name) if is_user_factor_feature(name) else getattr(self, name)
        if value is None and self.defaults is not None:
            value = self.defaults.feature(name, method)
            if is_user_factor_feature(name):
                self.user_factor_ids = {**(self.user_factor_ids or {}), name: value}
            else:
                setattr(self, name, value)
        if value is None:
            # The Trainer's default remove_unused_columns=True drops the tree the collator builds the distances from.
            tree = " With Seq2SeqTrainer and SourceFeatureCollator over encodings stored with their tree " \
                "(return_dep_distance=False), set remove_unused_columns=False: the Trainer otherwise drops the " \
                "tree column `word_heads` before the collator sees it." if name == "dep_distance" else ""
            raise ValueError(
                f"{method} needs `{name}`, but it was not given. Encode the source with "
                "hf_srcfeat.SourceFeatureTokenizer, which computes it from the parse, and pass it to the model." + tree
            )
        return value

    def require_ids(self, name: str, method: str, table_size: int, what: str) -> torch.Tensor:
        """Feature `name` (see `require`), checked to index an embedding table of `table_size` `what` rows, so a
        tokenizer whose feature vocabularies do not match the model fails here, not inside torch."""
        values = self.require(name, method)
        # The range check reads values back to the host: eager mode only, so a compiled model runs without a sync.
        if not torch.compiler.is_compiling() and values.numel() and (values.min() < 0 or values.max() >= table_size):
            raise ValueError(
                f"`{name}` holds ids from {int(values.min())} to {int(values.max())}, but the model has {table_size} "
                f"{what} embeddings: the tokenizer's feature vocabularies do not match this model (build the config "
                "with `**tokenizer.feature_vocabularies.sizes()`)."
            )
        return values


@dataclass
class MissingFeatureDefaults:
    """What a feature becomes when the source comes without it at inference (no parse: no annotator for the
    language, a parser that failed, or `source_features=False`), as OpenNMT-py's `src_feats_defaults`: every token's
    label is `<unk>` (padding stays `<pad>`), every dependency link unknown (`UNKNOWN_DISTANCE`), every token its
    own word and phrase. A model trained with feature dropout has seen such inputs at its words (feature dropout
    leaves the end token's special label and links, which get these defaults here too: the published results
    without a parse were measured so)."""

    batch_size: int
    seq_len: int
    device: torch.device
    attention_mask: torch.Tensor | None = None

    def feature(self, name: str, method: str) -> torch.Tensor:
        warnings.warn(f"{method} reads `{name}`, which the input does not have (no parse?): every token gets the "
                      "feature's default (unknown). Translation quality depends on the parse; see the guide "
                      "'Feature dropout and translating without a parse' in the documentation.", UserWarning, stacklevel=3)
        shape = (self.batch_size, self.seq_len)
        if name in PAIRWISE_FEATURE_NAMES:
            return torch.full((*shape, self.seq_len), UNKNOWN_DISTANCE, dtype=torch.long, device=self.device)
        if name in POSITION_FEATURE_NAMES:
            return torch.arange(self.seq_len, device=self.device).expand(shape)
        labels = torch.full(shape, UNK_ID, dtype=torch.long, device=self.device)
        if self.attention_mask is not None:
            labels = labels.masked_fill(self.attention_mask == 0, PAD_ID)
        return labels
