"""Relevance-based linguistic features (Chakrabarty et al., COLING 2020): the source input representation is
built from one embedding per factor (subword, lemma, subword tag, POS, dependency relation), combined by
concatenation, addition, a linear layer, or after weighting each factor by a learned relevance mask.
Only the source embedding changes; the rest is the baseline.

The paper numbers no equations; the comments point to its sections. As in OpenNMT-py (the authors'
toolkit), the combined embedding is scaled by sqrt(d_model) and gets the positional encoding afterwards,
so the relevance masks act on the factor embeddings E_k s_ik themselves.
"""

from __future__ import annotations

import torch
from torch import nn

from .configuration_relevance_features import RelevanceFeaturesConfig
from .embeddings import SrcFeatSourceEmbedding
from .linear import Linear
from .modeling_srcfeat_transformer import (
    SrcFeatEncoder,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)
from .source_features import SourceFeatures

WORD = "word"


class FactoredSourceEmbedding(SrcFeatSourceEmbedding):
    """Dropout(sqrt(d) * combine(E_1 s_i1, ..., E_K s_iK) + PE(i)), the subword being factor 1."""

    @classmethod
    def token_embedding_width(cls, config: RelevanceFeaturesConfig) -> int:
        return config.factor_widths[WORD]

    def __init__(self, config: RelevanceFeaturesConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens)
        self.combine_method = config.relevance_combine
        self.factors = list(config.source_factors)
        self.vocabulary_sizes = {name: config.factor_vocabulary_size(name) for name in self.factors}
        widths = config.factor_widths
        # E_k: one embedding matrix per factor, of its own width (Section 3.1, Table 2).
        self.factor_embeddings = nn.ModuleDict({
            name: nn.Embedding(self.vocabulary_sizes[name], widths[name], padding_idx=0) for name in self.factors
        })
        if self.combine_method == "linear":
            self.linear = Linear(sum(widths.values()), config.d_model)
        elif self.combine_method == "self_relevance":
            # W_k in R^{d_k x d_k} for every factor, the subword included (Section 3.2.1).
            self.relevance = nn.ModuleDict({name: Linear(width, width) for name, width in widths.items()})
        elif self.combine_method == "word_relevance":
            # W_k in R^{d_k x (d_1 + d_k)} for the linguistic factors only (Section 3.2.2).
            self.relevance = nn.ModuleDict({name: Linear(widths[WORD] + widths[name], widths[name])
                                            for name in self.factors})

    def factor_ids(self, features: SourceFeatures) -> dict[str, torch.Tensor]:
        """The id tensor of every used factor, checked against the embedding tables."""
        return {name: features.require_ids(RelevanceFeaturesConfig.factor_feature_name(name),
                                           f"Relevance features (factor {name!r})",
                                           self.vocabulary_sizes[name], name)
                for name in self.factors}

    def factor_vectors(self, input_ids: torch.Tensor | None, features: SourceFeatures,
                       inputs_embeds: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """e_ik = E_k s_ik for the subword (`inputs_embeds` replaces its lookup) and every used factor."""
        if inputs_embeds is not None and inputs_embeds.shape[-1] != self.embed_tokens.embedding_dim:
            raise ValueError(f"`inputs_embeds` replace the subword factor, which is {self.embed_tokens.embedding_dim} "
                             f"wide here, but they are {inputs_embeds.shape[-1]} wide.")
        vectors = {WORD: self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds}
        for name, ids in self.factor_ids(features).items():
            vectors[name] = self.factor_embeddings[name](ids)
        return vectors

    def combine(self, vectors: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The combined embedding e'_i (width d_model) and the relevance masks (empty without relevance)."""
        names = [WORD, *self.factors]
        if self.combine_method == "concat":  # Section 3.1: e_i = ||_k e_ik
            return torch.cat([vectors[name] for name in names], dim=-1), {}
        if self.combine_method == "add":  # Section 4, "Add": e_i = sum_k e_ik
            return torch.stack([vectors[name] for name in names]).sum(0), {}
        if self.combine_method == "linear":  # Section 4, "Linear": e_i = ReLU(W (||_k e_ik))
            return torch.relu(self.linear(torch.cat([vectors[name] for name in names], dim=-1))), {}
        if self.combine_method == "self_relevance":
            # Section 3.2.1: mask_ik = sigmoid(W_k e_ik), e'_ik = mask_ik * e_ik, for every factor.
            masks = {name: torch.sigmoid(self.relevance[name](vectors[name])) for name in names}
        else:
            # Section 3.2.2: mask_ik = sigmoid(W_k (e_i1 || e_ik)) for k >= 2; e_i1 passes unchanged.
            masks = {name: torch.sigmoid(self.relevance[name](torch.cat([vectors[WORD], vectors[name]], dim=-1)))
                     for name in self.factors}
        weighted = [masks[name] * vectors[name] if name in masks else vectors[name] for name in names]
        return torch.cat(weighted, dim=-1), masks

    def relevance_masks(self, input_ids: torch.Tensor | None, features: SourceFeatures,
                        inputs_embeds: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Factor name -> its relevance mask [batch, seq, d_k] (for analysis, e.g. Tables 9-10)."""
        if self.combine_method not in ("self_relevance", "word_relevance"):
            raise ValueError(f"`relevance_combine={self.combine_method!r}` computes no relevance masks; only "
                             "self_relevance and word_relevance do.")
        return self.combine(self.factor_vectors(input_ids, features, inputs_embeds))[1]

    def forward(self, input_ids: torch.Tensor | None, features: SourceFeatures,
                attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        combined, _ = self.combine(self.factor_vectors(input_ids, features, inputs_embeds))
        # The baseline's Dropout(embedding + PE), with the scaled combination as the embedding.
        return super().forward(None, features, attention_mask, inputs_embeds=combined * self.embed_scale)


class RelevanceFeaturesEncoder(SrcFeatEncoder):
    source_embedding_class = FactoredSourceEmbedding


class RelevanceFeaturesModel(SrcFeatTransformerModel):
    config_class = RelevanceFeaturesConfig
    encoder_class = RelevanceFeaturesEncoder


class RelevanceFeaturesForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = RelevanceFeaturesConfig
    model_class = RelevanceFeaturesModel

    def relevance_masks(self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                        **features) -> dict[str, torch.Tensor]:
        """Relevance masks of the source factors, from the tokenizer's output: `model.relevance_masks(**batch)`.

        Returns factor name -> sigmoid mask [batch, seq, width] (`"word"` too with self_relevance). Keys the
        encoder does not read (`attention_mask`, `labels`, ...) are ignored.
        """
        source = SourceFeatures(**{name: features.get(name) for name in SourceFeatures.__dataclass_fields__})
        with torch.no_grad():
            return self.model.encoder.embed_source.relevance_masks(input_ids, source, inputs_embeds)


__all__ = ["RelevanceFeaturesForConditionalGeneration", "RelevanceFeaturesModel", "FactoredSourceEmbedding"]
