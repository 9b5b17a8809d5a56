"""Configuration of Deps-SAN (Peng et al., "Boosting Neural Machine Translation with Dependency-Scaled
Self-Attention Network"): the baseline plus where and how the dependency-scaled matrix is applied."""

from __future__ import annotations

from collections.abc import Sequence

from .attention import SCORE_MODES
from .configuration_srcfeat_transformer import (
    SrcFeatTransformerConfig,
    check_choice,
    check_indices,
    check_positive_int,
    check_positive_number,
    check_probability,
)

KNOWLEDGE_SPARSE = ("none", "rs", "wink")


class DepsSanConfig(SrcFeatTransformerConfig):
    r"""
    Configuration of [`DepsSanForConditionalGeneration`]. Takes every argument of
    [`SrcFeatTransformerConfig`], plus:

    Args:
        deps_san_layers (`list[int]`, *optional*):
            0-based encoder layers whose self-attention is dependency-scaled. Default: the lower half,
            `range(max(1, encoder_layers // 2))`, i.e. layers 1-3 of 6 as in Table 2a of the paper.
        deps_san_heads (`list[int]`, *optional*):
            0-based heads of those layers that are scaled; default all heads.
        deps_san_sigma (`float`, *optional*, defaults to 1.0):
            Standard deviation sigma of the Gaussian of Eq. (5) (the paper's grid search found 1 best, Table 2b).
        deps_san_mode (`str`, *optional*, defaults to `"mult"`):
            `"mult"` multiplies the scaled dot-product scores by D^s element-wise (Eq. 4); `"add"` adds D^s.
        knowledge_sparse (`str`, *optional*, defaults to `"none"`):
            Training-only regularisation of Section 2.2: `"rs"` (RS-Sparse), `"wink"` (Wink-Sparse) or `"none"`.
        rs_sparse_probability (`float`, *optional*, defaults to 0.1):
            RS-Sparse: probability q that an element of the matrix is sparsed out.
        wink_sparse_window (`int`, *optional*, defaults to 6):
            Wink-Sparse: positions within this dependency distance k keep their scale.
    """

    model_type = "deps_san"

    def __init__(
        self,
        deps_san_layers: Sequence[int] | None = None,
        deps_san_heads: Sequence[int] | None = None,
        deps_san_sigma: float = 1.0,
        deps_san_mode: str = "mult",
        knowledge_sparse: str = "none",
        rs_sparse_probability: float = 0.1,
        wink_sparse_window: int = 6,
        **kwargs,
    ):
        # Anything but a list or tuple is kept as given, for check_arguments to refuse by name.
        self.deps_san_layers = list(deps_san_layers) if isinstance(deps_san_layers, (list, tuple)) else deps_san_layers
        self.deps_san_heads = list(deps_san_heads) if isinstance(deps_san_heads, (list, tuple)) else deps_san_heads
        self.deps_san_sigma = deps_san_sigma
        self.deps_san_mode = deps_san_mode
        self.knowledge_sparse = knowledge_sparse
        self.rs_sparse_probability = rs_sparse_probability
        self.wink_sparse_window = wink_sparse_window
        super().__init__(**kwargs)

    @property
    def scaled_layers(self) -> list[int]:
        """The encoder layers that use Deps-SAN."""
        if self.deps_san_layers is not None:
            return list(self.deps_san_layers)
        return list(range(max(1, self.encoder_layers // 2)))

    def check_arguments(self) -> None:
        super().check_arguments()
        if self.deps_san_layers is not None:
            check_indices("deps_san_layers", self.deps_san_layers, self.encoder_layers, "encoder_layers")
        if self.deps_san_heads is not None:
            check_indices("deps_san_heads", self.deps_san_heads, self.encoder_attention_heads,
                          "encoder_attention_heads")
        check_positive_number("deps_san_sigma", self.deps_san_sigma)
        check_choice("deps_san_mode", self.deps_san_mode, SCORE_MODES)
        check_choice("knowledge_sparse", self.knowledge_sparse, KNOWLEDGE_SPARSE)
        check_probability("rs_sparse_probability", self.rs_sparse_probability)
        check_positive_int("wink_sparse_window", self.wink_sparse_window, allow_zero=True)


__all__ = ["DepsSanConfig"]
