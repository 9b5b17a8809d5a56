"""Configuration of source phrase representations (Xu et al., "Learning Source Phrase Representations for
Neural Machine Translation", ACL 2020): every encoder layer pools its input into phrase vectors and attends
to them before self-attention; every decoder layer attends to the source phrases before the source tokens."""

from __future__ import annotations

from .configuration_srcfeat_transformer import SrcFeatTransformerConfig, check_choice, check_positive_int

PHRASE_SEGMENTATIONS = ("ngram", "parse")
PHRASE_GLANCES = ("mean", "max")
#: Table 2's rows as (phrase_glance, phrase_attentive, transparent_attention, phrase_segmentation).
PHRASE_VARIANTS = {
    "mean": ("mean", False, False, "ngram"),
    "max": ("max", False, False, "ngram"),
    "max_attn": ("max", True, False, "ngram"),
    "max_attn_ta": ("max", True, True, "ngram"),
    "max_attn_ta_parse": ("max", True, True, "parse"),
}


class PhraseRepConfig(SrcFeatTransformerConfig):
    r"""
    Configuration of [`PhraseRepForConditionalGeneration`]. Takes every argument of [`SrcFeatTransformerConfig`],
    plus (the defaults are Table 2's "+Max+Attn+TA", the paper's main model "+PR"):

    Args:
        phrase_segmentation (`str`, *optional*, defaults to `"ngram"`):
            `"ngram"`: consecutive phrases of ntok = max(min(8, seq / 6), 3) tokens of each sentence (footnote
            2), the last one shorter; `"parse"`: the parse phrases of the tokenizer's `phrase_ids` (Algorithm 1,
            "+Parsing Phrase"; special tokens belong to no phrase). In both, seq is the sentence's number of
            subword tokens without `</s>` (n-gram phrases still cover `</s>`, in the last phrase).
        phrase_glance (`str`, *optional*, defaults to `"max"`):
            F_glance of Eq. (2) over a phrase's tokens: `"mean"` or `"max"` (max-over-time pooling).
        phrase_attentive (`bool`, *optional*, defaults to `True`):
            Weight the tokens by Eq. (3)-(5) ("+Attn"); without it the phrase vector is F_glance itself.
        transparent_attention (`bool`, *optional*, defaults to `True`):
            Eq. (6): decoder layer j reads sum_i softmax(w^j)_i R^i over the phrases of the embeddings and of
            every encoder layer ("+TA"); without it every decoder layer reads the last encoder layer's phrases.
        phrase_pooling_dim (`int`, *optional*):
            Hidden width of the scoring network of Eq. (3) (W_1); default `12 * d_model`.
        phrase_combination_dim (`int`, *optional*):
            Hidden width of the combination network of Eq. (8) (W_3); default `3 * d_model`.

    The paper does not state these widths; the defaults are the ones that reproduce Table 2's parameter counts
    at Transformer-base size (tested within 3%): "+Max" adds only Eq. (7)-(8) sublayers, 12 of them, and its
    +40.9M give W_3 a width of 3 d (+40.96M); "+Max+Attn+TA" adds 7 scoring networks of Eq. (3) (6 encoder
    layer inputs and the encoder output), and its further +44.0M give W_1 a width of 12 d (+44.1M). Table 2's
    times (+Attn costs 0.14x more training time) suggest a smaller W_1; the counts are what the paper states.
    Configs saved with `phrase_hidden_dim` (one width for both, default `d_model`) keep it.
    """

    model_type = "phrase_rep"

    def __init__(
        self,
        phrase_segmentation: str = "ngram",
        phrase_glance: str = "max",
        phrase_attentive: bool = True,
        transparent_attention: bool = True,
        phrase_pooling_dim: int | None = None,
        phrase_combination_dim: int | None = None,
        **kwargs,
    ):
        if "phrase_hidden_dim" in kwargs:  # a config saved before the two widths: one width, default d_model
            legacy_width = kwargs.pop("phrase_hidden_dim") or kwargs.get("d_model", 512)
            phrase_pooling_dim = phrase_pooling_dim or legacy_width
            phrase_combination_dim = phrase_combination_dim or legacy_width
        self.phrase_segmentation = phrase_segmentation
        self.phrase_glance = phrase_glance
        self.phrase_attentive = phrase_attentive
        self.transparent_attention = transparent_attention
        self.phrase_pooling_dim = phrase_pooling_dim
        self.phrase_combination_dim = phrase_combination_dim
        super().__init__(**kwargs)

    @classmethod
    def from_variant(cls, variant: str, **kwargs) -> PhraseRepConfig:
        """A config for a row of Table 2: `"mean"`, `"max"`, `"max_attn"`, `"max_attn_ta"`, `"max_attn_ta_parse"`;
        `kwargs` may override any argument."""
        check_choice("variant", variant, tuple(PHRASE_VARIANTS))
        glance, attentive, transparent, segmentation = PHRASE_VARIANTS[variant]
        row = dict(phrase_glance=glance, phrase_attentive=attentive, transparent_attention=transparent,
                   phrase_segmentation=segmentation)
        return cls(**{**row, **kwargs})

    @property
    def phrase_pooling_size(self) -> int:
        """Width of W_1 (Eq. 3)."""
        return self.phrase_pooling_dim or 12 * self.d_model

    @property
    def phrase_combination_size(self) -> int:
        """Width of W_3 (Eq. 8)."""
        return self.phrase_combination_dim or 3 * self.d_model

    @property
    def source_features_read(self) -> tuple[str, ...]:
        """Parse phrases read `phrase_ids`; n-gram phrases are cut from the subwords alone."""
        return ("phrase_ids",) if self.phrase_segmentation == "parse" else ()

    def check_arguments(self) -> None:
        super().check_arguments()
        check_choice("phrase_segmentation", self.phrase_segmentation, PHRASE_SEGMENTATIONS)
        check_choice("phrase_glance", self.phrase_glance, PHRASE_GLANCES)
        for name in ("phrase_attentive", "transparent_attention"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}.")
        for name in ("phrase_pooling_dim", "phrase_combination_dim"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))


__all__ = ["PhraseRepConfig"]
