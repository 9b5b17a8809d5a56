"""The source-feature contract between the feature-aware tokenizer and the models.

Every model of the zoo accepts these tensors by name (explicitly, so that `generate` forwards them to the
encoder and `Seq2SeqTrainer` does not drop them as unused columns); each method reads the ones it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

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


def user_factor_feature(name: str) -> str:
    """The tokenizer output (and model argument) holding the ids of user factor `name`: `factor_<name>_ids`."""
    return f"factor_{name}_ids"


def is_user_factor_feature(argument: str) -> bool:
    return argument.startswith("factor_") and argument.endswith("_ids") and len(argument) > len("factor__ids")


@dataclass
class SourceFeatures:
    """Source-side linguistic features aligned to subword tokens; any of them may be absent (None)."""

    pos_ids: torch.LongTensor | None = None
    lemma_ids: torch.LongTensor | None = None
    deprel_ids: torch.LongTensor | None = None
    subword_tag_ids: torch.LongTensor | None = None
    word_ids: torch.LongTensor | None = None
    phrase_ids: torch.LongTensor | None = None
    dep_distance: torch.Tensor | None = None
    feats_ids: torch.LongTensor | None = None
    #: ids of the user factors, by tokenizer output name (`factor_<name>_ids`)
    user_factor_ids: dict[str, torch.LongTensor] | None = None

    def check_shapes(self, batch_size: int, seq_len: int) -> None:
        """Raise a ValueError naming the feature whose shape does not match the tokens [batch, seq]."""
        named = [(field.name, getattr(self, field.name)) for field in fields(self) if field.name != "user_factor_ids"]
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

    def require(self, name: str, method: str) -> torch.Tensor:
        """Return feature `name`, or raise a ValueError saying which method needs it and where it comes from."""
        value = (self.user_factor_ids or {}).get(name) if is_user_factor_feature(name) else getattr(self, name)
        if value is None:
            raise ValueError(
                f"{method} needs `{name}`, but it was not given. Encode the source with "
                "hf_srcfeat.SourceFeatureTokenizer, which computes it from the parse, and pass it to the model."
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
