"""Feature dropout: in training, a word's source features are hidden at random, so that a model learns not to
depend on every tag and link being there and right (parsers err on about a fifth of the heads, and a parse may be
missing). `config.feature_dropout` maps a feature (the tokenizer's output name: `pos_ids`, `lemma_ids`,
`deprel_ids`, `feats_ids`, `factor_<name>_ids`, or `dep_distance`) to the probability that a word loses it:

- an id feature becomes `<unk>` on every subword of the word (padding and special tokens keep theirs);
- `dep_distance`: every link of the word (its row and column) becomes `UNKNOWN_DISTANCE`, which Deps-SAN scores
  neutrally (scale 1, bias 0: the baseline's score), unlike special tokens, which sit beyond the farthest word.

Each word is drawn once per step, for all its subwords; evaluation and generation never drop anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from .feature_vocabulary import SPECIAL_ID, UNK_ID
from .loading_saved import refuse_or_warn_when_loading
from .source_features import (
    POSITION_FEATURE_NAMES,
    SOURCE_FEATURE_NAMES,
    UNKNOWN_DISTANCE,
    SourceFeatures,
    is_user_factor_feature,
)

__all__ = ["UNKNOWN_DISTANCE", "apply_feature_dropout", "check_feature_dropout"]
#: Positions, not labels, are never dropped.
NOT_DROPPABLE = POSITION_FEATURE_NAMES


def check_feature_dropout(rates) -> None:
    """Raise a ValueError naming a bad entry of `feature_dropout`."""
    if not isinstance(rates, dict):
        raise ValueError(f"`feature_dropout` must be a dict feature name -> probability, got {rates!r}.")
    for name, rate in rates.items():
        known = name in SOURCE_FEATURE_NAMES and name not in NOT_DROPPABLE
        if not (known or is_user_factor_feature(name)):
            droppable = [feature for feature in SOURCE_FEATURE_NAMES if feature not in NOT_DROPPABLE]
            raise ValueError(f"`feature_dropout` names {name!r}; droppable features are {droppable} and "
                             "factor_<name>_ids.")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"`feature_dropout[{name!r}]` must be a probability in [0, 1], got {rate!r}.")


def check_feature_dropout_read(config) -> None:
    """Refuse, naming them, `feature_dropout` entries for features the config's model does not read: recorded as
    trained with, nothing would be dropped. Checked where a model is built, not by the config: a composed model's
    components share one `feature_dropout`, each reading only some of its features."""
    unread = sorted(set(config.feature_dropout) - set(config.source_features_read))
    if unread:
        read = ", ".join(config.source_features_read) or "no source feature"
        refuse_or_warn_when_loading(f"`feature_dropout` names {', '.join(unread)}, which the model of a "
                                    f"{type(config).__name__} does not read (it reads {read}): nothing would be "
                                    "dropped.")


def dropped_words(word_ids: torch.Tensor, rate: float) -> torch.Tensor:
    """[B, S] True where the token's word is dropped (one draw per word, shared by its subwords)."""
    tokens = int(word_ids.shape[1])
    is_word = word_ids >= 0
    # Counted from each row's first kept word (a left-truncated sentence starts further in), its words number at most
    # its tokens: one draw each.
    first = torch.where(is_word, word_ids, torch.iinfo(word_ids.dtype).max).amin(dim=1, keepdim=True)
    relative = torch.where(is_word, word_ids - first, -1)
    draws = torch.rand(word_ids.shape[0], tokens + 1, device=word_ids.device) < rate
    return draws.gather(1, relative + 1) & is_word


def apply_feature_dropout(features: SourceFeatures, rates: dict[str, float]) -> SourceFeatures:
    """`features` with the words' features hidden at the configured rates (training only: the caller decides)."""
    if features.word_ids is None:
        raise ValueError("feature dropout needs `word_ids` (from SourceFeatureTokenizer) to drop whole words.")
    changed: dict[str, Any] = {}  # the dropped fields' new values, passed to `replace`
    user = dict(features.user_factor_ids or {})
    for name, rate in rates.items():
        if not rate:
            continue
        value = user.get(name) if is_user_factor_feature(name) else getattr(features, name)
        if value is None:
            continue
        dropped = dropped_words(features.word_ids, rate)
        if name == "dep_distance":
            links = dropped[:, :, None] | dropped[:, None, :]
            value = torch.where(links & (value >= 0), torch.full_like(value, UNKNOWN_DISTANCE), value)
        else:
            value = torch.where(dropped & (value > SPECIAL_ID), torch.full_like(value, UNK_ID), value)
        if is_user_factor_feature(name):
            user[name] = value
        else:
            changed[name] = value
    return replace(features, **changed, user_factor_ids=user or features.user_factor_ids)
