"""Configuration of relevance-based linguistic features (Chakrabarty et al., "Improving Low-Resource NMT
through Relevance Based Linguistic Features Incorporation", COLING 2020): every source token is a tuple of
factors (its subword, and its word's lemma, subword tag, POS tag and dependency relation), each with its own
embedding matrix, combined into the encoder input by one of five methods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .configuration_srcfeat_transformer import (
    FACTOR_VOCABULARY_SIZE_ARGUMENTS,
    SrcFeatTransformerConfig,
    check_choice,
    check_positive_int,
    mapping_argument,
)
from .source_features import user_factor_feature

#: The linguistic factors a source token can carry, in the order of Table 1 (the subword itself comes first), and
#: the word's morphological features (CoNLL-U FEATS), which the paper does not use: opt in through source_factors.
LINGUISTIC_FACTORS = ("lemma", "subword_tag", "pos", "deprel", "feats")
#: The paper's factors, the default of `source_factors`.
PAPER_FACTORS = ("lemma", "subword_tag", "pos", "deprel")
#: Factor -> the tokenizer output that holds its ids.
FACTOR_FEATURE_NAMES = {"lemma": "lemma_ids", "subword_tag": "subword_tag_ids", "pos": "pos_ids",
                        "deprel": "deprel_ids", "feats": "feats_ids"}
#: Table 2: embedding widths of the subword and its factors in the paper's concat/linear/relevance models.
TABLE_2_FACTOR_WIDTHS = {"word": 250, "lemma": 250, "subword_tag": 6, "pos": 15, "deprel": 15}
#: Reference widths for the default split of d_model: Table 2's, and for FEATS (not in the paper) the width the
#: paper gives the other small tag sets (POS, relation).
REFERENCE_FACTOR_WIDTHS = {**TABLE_2_FACTOR_WIDTHS, "feats": 15}
COMBINE_METHODS = ("concat", "add", "linear", "self_relevance", "word_relevance")


def proportional_factor_widths(factors: Sequence[str], d_model: int) -> dict[str, int]:
    """Table 2's widths scaled to sum to `d_model`: each linguistic factor gets its rounded share (at least
    1), the subword the rest. With d_model 536 (= 250 + 250 + 6 + 15 + 15) this is Table 2 exactly."""
    # A user factor (not in the paper) gets the width the paper gives the small tag sets.
    reference = {name: REFERENCE_FACTOR_WIDTHS.get(name, 15) for name in ("word", *factors)}
    total = sum(reference.values())
    widths = {name: max(1, round(d_model * reference[name] / total)) for name in factors}
    return {"word": d_model - sum(widths.values()), **widths}


class RelevanceFeaturesConfig(SrcFeatTransformerConfig):
    r"""
    Configuration of [`RelevanceFeaturesForConditionalGeneration`]. Takes every argument of
    [`SrcFeatTransformerConfig`], plus:

    Args:
        relevance_combine (`str`, *optional*, defaults to `"self_relevance"`):
            How the factor embeddings e_1 (subword), ..., e_K become the encoder input:
            `"concat"`: [e_1 || ... || e_K] (Sennrich & Haddow 2016, Section 3.1);
            `"add"`: e_1 + ... + e_K, every factor embedded at d_model;
            `"linear"`: ReLU(W [e_1 || ... || e_K] + b);
            `"self_relevance"`: e'_k = sigmoid(W_k e_k + b_k) * e_k for every factor, subword included,
            then concatenated (Section 3.2.1);
            `"word_relevance"`: e'_k = sigmoid(W_k [e_1 || e_k] + b_k) * e_k for the linguistic factors,
            concatenated after the unchanged subword embedding e_1 (Section 3.2.2).
        source_factors (`list[str]`, *optional*, defaults to `["lemma", "subword_tag", "pos", "deprel"]`):
            Which linguistic factors the subword is combined with: any subset of those four and `"feats"` (the
            word's morphological features, CoNLL-U FEATS, from a tokenizer that has their vocabulary), in any
            order (Table 8 uses one at a time). The subword itself is always the first factor.
        factor_embedding_sizes (`dict[str, int]`, *optional*):
            Embedding width of `"word"` (the subword) and of each factor in `source_factors`. For `concat`,
            `self_relevance` and `word_relevance` the widths must sum to `d_model`; `linear` maps any sum to
            `d_model`; `add` embeds every factor at `d_model` and takes no widths. Default: Table 2's
            250/250/6/15/15 scaled to `d_model` (for 256: 120/119/3/7/7).
        num_lemmas (`int`, *optional*, defaults to 10000):
            Size of the lemma vocabulary; pass the tokenizer's `feature_vocabularies.sizes()`.
        num_subword_tags (`int`, *optional*, defaults to 7):
            Size of the subword-tag vocabulary (B/I/E/S plus the reserved pad/unk/special ids).
        num_pos_tags (`int`, *optional*, defaults to 20):
            Size of the POS vocabulary (the 17 UPOS tags plus the reserved ids).
        num_dependency_relations (`int`, *optional*, defaults to 64):
            Size of the dependency-relation vocabulary; pass the tokenizer's `feature_vocabularies.sizes()`.
        num_morph_features (`int`, *optional*, defaults to 64):
            Size of the FEATS vocabulary (used with the `"feats"` factor); from `feature_vocabularies.sizes()`.
        extra_factors (`dict[str, int]`, *optional*):
            User factors the tokenizer carries (name -> vocabulary size, `feature_vocabularies.sizes()`); any of
            them may be named in `source_factors` like the built-in ones (read from `factor_<name>_ids`).
        share_embeddings (`bool`, *optional*, defaults to `False`):
            As in the baseline, but off by default: the subword factor is narrower than the target embeddings
            except with `add`.
    """

    model_type = "relevance_features"

    def __init__(
        self,
        relevance_combine: str = "self_relevance",
        source_factors: Sequence[str] = PAPER_FACTORS,
        factor_embedding_sizes: Mapping[str, int] | None = None,
        num_lemmas: int = 10000,
        num_subword_tags: int = 7,
        num_pos_tags: int = 20,
        num_dependency_relations: int = 64,
        num_morph_features: int = 64,
        extra_factors: Mapping[str, int] | None = None,
        share_embeddings: bool = False,
        **kwargs,
    ):
        self.relevance_combine = relevance_combine
        self.source_factors = list(source_factors)
        self.factor_embedding_sizes = mapping_argument("factor_embedding_sizes", factor_embedding_sizes)
        self.num_lemmas = num_lemmas
        self.num_subword_tags = num_subword_tags
        self.num_pos_tags = num_pos_tags
        self.num_dependency_relations = num_dependency_relations
        self.num_morph_features = num_morph_features
        self.extra_factors = mapping_argument("extra_factors", extra_factors) or {}
        super().__init__(share_embeddings=share_embeddings, **kwargs)

    @property
    def factor_widths(self) -> dict[str, int]:
        """Embedding width of the subword (`"word"`) and of every used factor, subword first."""
        if self.relevance_combine == "add":
            return {name: self.d_model for name in ("word", *self.source_factors)}
        if self.factor_embedding_sizes is not None:
            return {name: self.factor_embedding_sizes[name] for name in ("word", *self.source_factors)}
        return proportional_factor_widths(self.source_factors, self.d_model)

    @property
    def source_features_read(self) -> tuple[str, ...]:
        return tuple(self.factor_feature_name(factor) for factor in self.source_factors)

    def factor_vocabulary_size(self, factor: str) -> int:
        if factor in self.extra_factors:
            return self.extra_factors[factor]
        return getattr(self, FACTOR_VOCABULARY_SIZE_ARGUMENTS[factor])

    @staticmethod
    def factor_feature_name(factor: str) -> str:
        """The tokenizer output holding a factor's ids."""
        return FACTOR_FEATURE_NAMES.get(factor) or user_factor_feature(factor)

    def check_arguments(self) -> None:
        super().check_arguments()
        check_choice("relevance_combine", self.relevance_combine, COMBINE_METHODS)
        known = [*LINGUISTIC_FACTORS, *self.extra_factors]
        unknown = [name for name in self.source_factors if name not in known]
        if unknown or len(set(self.source_factors)) != len(self.source_factors):
            raise ValueError(f"`source_factors` must be distinct names from {known} (user factors come from "
                             "`extra_factors`, the tokenizer's `feature_vocabularies.sizes()`), got "
                             f"{self.source_factors!r}.")
        for argument in FACTOR_VOCABULARY_SIZE_ARGUMENTS.values():
            check_positive_int(argument, getattr(self, argument))
        for name, size in self.extra_factors.items():
            check_positive_int(f"extra_factors[{name!r}]", size)
        self._check_factor_widths()

    def _check_factor_widths(self) -> None:
        sizes = self.factor_embedding_sizes
        if sizes is None:
            if self.factor_widths["word"] < 1:
                raise ValueError(f"`d_model` ({self.d_model}) is too small to give every factor of "
                                 f"{['word', *self.source_factors]} an embedding; set `factor_embedding_sizes`.")
            return
        if self.relevance_combine == "add":
            raise ValueError("`relevance_combine='add'` embeds every factor at d_model; leave "
                             f"`factor_embedding_sizes` unset (got {sizes}).")
        expected = {"word", *self.source_factors}
        if set(sizes) != expected:
            raise ValueError(f"`factor_embedding_sizes` must give a width for exactly {sorted(expected)}, got "
                             f"{sorted(sizes)}.")
        for name, width in sizes.items():
            check_positive_int(f"factor_embedding_sizes[{name!r}]", width)
        if self.relevance_combine != "linear" and sum(sizes.values()) != self.d_model:
            raise ValueError(
                f"`relevance_combine={self.relevance_combine!r}` concatenates the factor embeddings, so their widths "
                f"must sum to d_model ({self.d_model}); `factor_embedding_sizes` {sizes} sum to "
                f"{sum(sizes.values())}."
            )


__all__ = ["RelevanceFeaturesConfig"]
