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
#: Distance of a pair with a token of no word (`</s>`): one more than the sentence's farthest word pair, or none.
SPECIAL_TOKEN_DISTANCES = ("farthest", "neutral")
#: Distance a sparsed element gets: the paper's k (Section 2.2), or one more than the sentence's farthest pair.
SPARSED_DISTANCES = ("k", "farthest")


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
        deps_san_variance (`float`, *optional*, defaults to 1.0):
            Variance sigma^2 of the Gaussian of Eq. (5), the quantity of the paper's grid search (Table 2b: 1
            best). Configs saved before it existed carry `deps_san_sigma` (a standard deviation); it is read as
            variance = sigma^2.
        deps_san_mode (`str`, *optional*, defaults to `"mult"`):
            `"mult"` multiplies the scaled dot-product scores by D^s element-wise (Eq. 4); `"add"` adds D^s.
        special_token_distance (`str`, *optional*, defaults to `"farthest"`):
            Distance of every pair involving a token that belongs to no word (`</s>`), which the parse does not
            give. `"farthest"` (the authors' implementation): one more than the farthest word pair of the sentence,
            so its scale is about 0 like every distant pair's (the authors take the batch's farthest pair; the
            sentence's keeps a translation independent of its batch mates). `"neutral"`: scale 1 (bias 0), the
            baseline's score, which leaves `</s>` at full size while Eq. (4) shrinks every word score to at most
            (2 pi sigma^2)^(-1/2) = 0.40.
        knowledge_sparse (`str`, *optional*, defaults to `"none"`):
            Training-only regularisation of Section 2.2: `"rs"` (RS-Sparse), `"wink"` (Wink-Sparse) or `"none"`.
        rs_sparse_probability (`float`, *optional*, defaults to 0.1):
            RS-Sparse: probability q that an element of the matrix is sparsed out.
        wink_sparse_window (`int`, *optional*, defaults to 6):
            The paper's k: Wink-Sparse keeps the elements within dependency distance k; with
            `sparsed_distance="k"` a sparsed element (RS or Wink) gets distance k.
        sparsed_distance (`str`, *optional*, defaults to `"k"`):
            The distance a sparsed element gets. `"k"`: the paper's text ("set each element of D^s to k"), read as
            the distance k (D^s itself is a density, k = 6 is no scale). `"farthest"`: one more than the farthest
            word pair of the sentence (the authors' code uses the batch's farthest pair including the `</s>` fill;
            the sentence's keeps a translation independent of its batch). At variance 1 both scales are ~1e-8.
    """

    model_type = "deps_san"

    def __init__(
        self,
        deps_san_layers: Sequence[int] | None = None,
        deps_san_heads: Sequence[int] | None = None,
        deps_san_variance: float = 1.0,
        deps_san_mode: str = "mult",
        special_token_distance: str | None = None,
        knowledge_sparse: str = "none",
        rs_sparse_probability: float = 0.1,
        wink_sparse_window: int = 6,
        sparsed_distance: str | None = None,
        **kwargs,
    ):
        # A config saved before these arguments existed (it names `deps_san_sigma`, a standard deviation) keeps
        # the behaviour it was trained with: special tokens neutral, sparsed elements at the farthest distance.
        legacy = "deps_san_sigma" in kwargs
        if legacy:
            sigma = kwargs.pop("deps_san_sigma")
            deps_san_variance = sigma**2 if isinstance(sigma, (int, float)) else sigma
        if special_token_distance is None:
            special_token_distance = "neutral" if legacy else "farthest"
        if sparsed_distance is None:
            sparsed_distance = "farthest" if legacy else "k"
        # Anything but a list or tuple is kept as given, for check_arguments to refuse by name.
        self.deps_san_layers = list(deps_san_layers) if isinstance(deps_san_layers, (list, tuple)) else deps_san_layers
        self.deps_san_heads = list(deps_san_heads) if isinstance(deps_san_heads, (list, tuple)) else deps_san_heads
        self.deps_san_variance = deps_san_variance
        self.deps_san_mode = deps_san_mode
        self.special_token_distance = special_token_distance
        self.knowledge_sparse = knowledge_sparse
        self.rs_sparse_probability = rs_sparse_probability
        self.wink_sparse_window = wink_sparse_window
        self.sparsed_distance = sparsed_distance
        super().__init__(**kwargs)

    @property
    def source_features_read(self) -> tuple[str, ...]:
        return ("dep_distance",)

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
        check_positive_number("deps_san_variance", self.deps_san_variance)
        check_choice("deps_san_mode", self.deps_san_mode, SCORE_MODES)
        check_choice("special_token_distance", self.special_token_distance, SPECIAL_TOKEN_DISTANCES)
        check_choice("sparsed_distance", self.sparsed_distance, SPARSED_DISTANCES)
        check_choice("knowledge_sparse", self.knowledge_sparse, KNOWLEDGE_SPARSE)
        check_probability("rs_sparse_probability", self.rs_sparse_probability)
        check_positive_int("wink_sparse_window", self.wink_sparse_window, allow_zero=True)



__all__ = ["DepsSanConfig"]
