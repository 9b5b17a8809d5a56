"""Configuration of the diverse input representation (Chen et al., "Towards More Diverse Input Representation
for Neural Machine Translation", TASLP 2020): the source word vectors are projected into groups, one per
feature type (global, recurrence, local, syntactic), each with its own input function."""

from __future__ import annotations

from collections.abc import Mapping

from .configuration_srcfeat_transformer import (
    SrcFeatTransformerConfig,
    check_choice,
    check_positive_int,
    mapping_argument,
)

#: The input functions of Sections II-A and III-A..C, in the concatenation order of Fig. 2.
FEATURE_GROUPS = ("global", "recurrence", "local", "syntactic")
#: Table I, as heads of the 8 of Transformer-base (64 dimensions each).
DIVERSE_VARIANTS = {
    "rec_diverse": {"global": 6, "recurrence": 2},
    "loc_diverse": {"global": 6, "local": 2},
    "syn_diverse": {"global": 5, "syntactic": 3},
    "fusing_diverse": {"global": 2, "recurrence": 2, "local": 2, "syntactic": 2},
}
TABLE_I_HEADS = 8
RECURRENT_CELLS = ("gru", "lstm", "rnn")


def variant_group_widths(variant: str, d_model: int, heads: int) -> dict[str, int]:
    """Table I's groups for `heads` heads of d_model / heads dimensions: each feature group keeps its share
    of Table I's 8 heads (rounded, at least 1), the global group takes the remaining heads."""
    head_size = d_model // heads
    shares = {name: max(1, round(count * heads / TABLE_I_HEADS))
              for name, count in DIVERSE_VARIANTS[variant].items() if name != "global"}
    return {"global": (heads - sum(shares.values())) * head_size,
            **{name: count * head_size for name, count in shares.items()}}


class DiverseInputConfig(SrcFeatTransformerConfig):
    r"""
    Configuration of [`DiverseInputForConditionalGeneration`]. Takes every argument of
    [`SrcFeatTransformerConfig`], plus:

    Args:
        diverse_variant (`str`, *optional*, defaults to `"fusing_diverse"`):
            One of Table I's models: `"rec_diverse"`, `"loc_diverse"`, `"syn_diverse"`, `"fusing_diverse"`. Its
            groups keep their number of heads (2, 2, 3, and 2+2+2 of 8 heads) scaled to
            `encoder_attention_heads`; the global group has the rest. Ignored when `feature_group_widths` is set.
        feature_group_widths (`dict[str, int]`, *optional*):
            Explicit groups: name (`"global"`, `"recurrence"`, `"local"`, `"syntactic"`) -> width, in
            concatenation order. Every width must be a multiple of the head size (d_model /
            encoder_attention_heads) and the widths must sum to d_model (Eq. 5).
        recurrent_cell (`str`, *optional*, defaults to `"gru"`):
            Cell of the bidirectional RNN of the recurrence group (Eq. 8): `"gru"`, `"lstm"` or `"rnn"` (tanh).
            Each direction has the group's width; the paper does not name the cell.
        local_kernel_width (`int`, *optional*, defaults to 5):
            Width m of the convolution of the local group (Eq. 10); odd, so that it is centred on each token.
        num_pos_tags (`int`, *optional*, defaults to 20):
            Size of the POS vocabulary of the syntactic group (Eq. 12); pass the tokenizer's
            `feature_vocabularies.sizes()`.
    """

    model_type = "diverse_input"

    def __init__(
        self,
        diverse_variant: str = "fusing_diverse",
        feature_group_widths: Mapping[str, int] | None = None,
        recurrent_cell: str = "gru",
        local_kernel_width: int = 5,
        num_pos_tags: int = 20,
        **kwargs,
    ):
        self.diverse_variant = diverse_variant
        self.feature_group_widths = mapping_argument("feature_group_widths", feature_group_widths)
        self.recurrent_cell = recurrent_cell
        self.local_kernel_width = local_kernel_width
        self.num_pos_tags = num_pos_tags
        super().__init__(**kwargs)

    @property
    def group_widths(self) -> dict[str, int]:
        """Feature group -> width, in concatenation order."""
        if self.feature_group_widths is not None:
            return dict(self.feature_group_widths)
        return variant_group_widths(self.diverse_variant, self.d_model, self.encoder_attention_heads)

    @property
    def source_features_read(self) -> tuple[str, ...]:
        """The syntactic group reads POS tags (Eq. 12); the other groups read subwords only."""
        return ("pos_ids",) if "syntactic" in self.group_widths else ()

    def check_arguments(self) -> None:
        super().check_arguments()
        check_choice("diverse_variant", self.diverse_variant, tuple(DIVERSE_VARIANTS))
        check_choice("recurrent_cell", self.recurrent_cell, RECURRENT_CELLS)
        check_positive_int("local_kernel_width", self.local_kernel_width)
        if self.local_kernel_width % 2 == 0:
            raise ValueError(f"`local_kernel_width` must be odd (centred on the token), got {self.local_kernel_width}.")
        check_positive_int("num_pos_tags", self.num_pos_tags)
        head_size = self.d_model // self.encoder_attention_heads
        widths = self.group_widths
        if self.feature_group_widths is None and widths["global"] < 1:
            raise ValueError(
                f"{self.diverse_variant} needs more than {self.encoder_attention_heads} encoder heads: its feature "
                f"groups take {sum(widths.values()) - widths['global']} of d_model {self.d_model} and leave none "
                "for the global group; set `feature_group_widths`.")
        unknown = [name for name in widths if name not in FEATURE_GROUPS]
        if unknown or not widths:
            raise ValueError(f"`feature_group_widths` names groups from {list(FEATURE_GROUPS)}, got {list(widths)}.")
        for name, width in widths.items():
            check_positive_int(f"feature_group_widths[{name!r}]", width)
            if width % head_size:
                raise ValueError(
                    f"`feature_group_widths`: the {name} group is {width} wide, not a multiple of the head size "
                    f"{head_size} (d_model {self.d_model} / {self.encoder_attention_heads} heads).")
        if sum(widths.values()) != self.d_model:
            raise ValueError(f"the feature groups {widths} are {sum(widths.values())} wide in total; they must sum "
                             f"to d_model ({self.d_model}).")


__all__ = ["DiverseInputConfig"]
