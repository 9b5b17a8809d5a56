"""Deps-SAN (Peng et al.): the encoder self-attention scores of chosen layers and heads are scaled by a
Gaussian of the dependency-tree distance between the tokens' words. Everything else is the baseline.

Tokens that belong to no word (special tokens, padding; `dep_distance` -1) keep their baseline score: scale
1 in `mult` mode, bias 0 in `add` mode. Padding stays masked after the modification, so it never gains mass.
"""

from __future__ import annotations

import math

import torch

from .attention import ScoreModification
from .configuration_deps_san import DepsSanConfig
from .modeling_srcfeat_transformer import (
    EncoderLayerContext,
    SrcFeatEncoder,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)
from .source_features import SourceFeatures


def dependency_scaled_matrix(dep_distance: torch.Tensor, sigma: float, neutral: float) -> torch.Tensor:
    """Eq. (5): D^s_ij = (2 pi sigma^2)^(-1/2) exp(-d_ij^2 / (2 sigma^2)); `neutral` where d_ij < 0 (no word)."""
    distance = dep_distance.float()
    scale = torch.exp(-distance.square() / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2)
    return torch.where(distance < 0, torch.full_like(scale, neutral), scale)


def knowledge_sparse(dep_distance: torch.Tensor, mode: str, probability: float, window: int) -> torch.Tensor:
    """Section 2.2, as the authors' implementation does it: a sparsed element's distance becomes the largest
    distance in its sentence, so it gets the smallest scale. RS-Sparse sparses each element with probability
    q; Wink-Sparse sparses every element farther than k. Elements of no word (-1) are left alone."""
    largest = dep_distance.amax(dim=(-2, -1), keepdim=True).expand_as(dep_distance)
    is_word_pair = dep_distance >= 0
    if mode == "rs":
        sparsed = torch.rand(dep_distance.shape, device=dep_distance.device) < probability
    elif mode == "wink":
        sparsed = dep_distance > window
    else:
        return dep_distance
    return torch.where(sparsed & is_word_pair, largest, dep_distance)


class DepsSanEncoder(SrcFeatEncoder):
    """The baseline encoder with dependency-scaled self-attention in `config.scaled_layers`."""

    def layer_contexts(self, input_ids: torch.Tensor | None, embeddings: torch.Tensor, features: SourceFeatures,
                       attention_mask: torch.Tensor | None) -> list[EncoderLayerContext]:
        contexts = super().layer_contexts(input_ids, embeddings, features, attention_mask)
        config = self.config
        distance = features.require("dep_distance", "Deps-SAN")
        if self.training and config.knowledge_sparse != "none":  # sparsing regularises training only
            distance = knowledge_sparse(distance, config.knowledge_sparse, config.rs_sparse_probability,
                                        config.wink_sparse_window)
        neutral = 1.0 if config.deps_san_mode == "mult" else 0.0
        matrix = dependency_scaled_matrix(distance, config.deps_san_sigma, neutral).to(embeddings.dtype)
        # Eq. (4) (or its additive variant) on the chosen heads; the [B, H, S, S] layout keeps every sentence's
        # matrix on its own heads.
        modification = ScoreModification.on_heads(matrix, config.encoder_attention_heads, config.deps_san_heads,
                                                   config.deps_san_mode)
        for layer in config.scaled_layers:
            contexts[layer].score_modification = modification
        return contexts


class DepsSanModel(SrcFeatTransformerModel):
    config_class = DepsSanConfig
    encoder_class = DepsSanEncoder


class DepsSanForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = DepsSanConfig
    model_class = DepsSanModel


__all__ = ["DepsSanForConditionalGeneration", "DepsSanModel", "dependency_scaled_matrix", "knowledge_sparse"]
