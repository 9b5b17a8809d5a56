"""Deps-SAN (Peng et al.): the encoder self-attention scores of chosen layers and heads are scaled by a
Gaussian of the dependency-tree distance between the tokens' words. Everything else is the baseline.

Tokens that belong to no word (`</s>`; `dep_distance` -1) have no tree distance. By default (the authors'
implementation) every pair involving one is one step farther than the sentence's farthest word pair, so its
scale is about 0 like any distant pair's; `special_token_distance="neutral"` keeps their baseline score (scale
1, bias 0) instead. Padding stays masked after the modification, so it never gains mass.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import ScoreModification
from .closed_gates import ClosedGates
from .configuration_deps_san import DepsSanConfig
from .modeling_srcfeat_transformer import (
    EncoderLayerContext,
    SrcFeatEncoder,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)
from .source_features import SourceFeatures


def dependency_scaled_matrix(dep_distance: torch.Tensor, variance: float, neutral: float) -> torch.Tensor:
    """Eq. (5): D^s_ij = (2 pi sigma^2)^(-1/2) exp(-d_ij^2 / (2 sigma^2)); `neutral` where d_ij < 0 (no word)."""
    distance = dep_distance.float()
    scale = torch.exp(-distance.square() / (2 * variance)) / math.sqrt(2 * math.pi * variance)
    return torch.where(distance < 0, torch.full_like(scale, neutral), scale)


def farthest_word_distance(dep_distance: torch.Tensor) -> torch.Tensor:
    """The largest distance between two words of each sentence, [B, 1, 1] (tokens of no word are -1)."""
    return dep_distance.amax(dim=(-2, -1), keepdim=True)


def place_special_tokens_farthest(dep_distance: torch.Tensor) -> torch.Tensor:
    """Pairs with a token of no word (-1) get one more than the sentence's farthest word pair; links hidden by
    feature dropout (`UNKNOWN_DISTANCE`) stay unknown, and are scored neutrally."""
    return torch.where(dep_distance == -1, farthest_word_distance(dep_distance) + 1, dep_distance)


def knowledge_sparse(dep_distance: torch.Tensor, mode: str, probability: float, k: int,
                     sparsed_distance: str = "k") -> torch.Tensor:
    """Section 2.2. RS-Sparse sparses each word pair with probability q, Wink-Sparse every word pair farther
    than k. A sparsed pair gets distance k (the paper's text) or, with `sparsed_distance="farthest"`, one more
    than the sentence's farthest word pair. Pairs with a token of no word (-1) are left alone."""
    if mode == "rs":
        sparsed = torch.rand(dep_distance.shape, device=dep_distance.device) < probability
    elif mode == "wink":
        sparsed = dep_distance > k
    else:
        return dep_distance
    if sparsed_distance == "k":
        value = torch.full_like(dep_distance, k)
    else:
        value = (farthest_word_distance(dep_distance) + 1).expand_as(dep_distance)
    return torch.where(sparsed & (dep_distance >= 0), value, dep_distance)


class DepsSanEncoder(SrcFeatEncoder):
    """The baseline encoder with dependency-scaled self-attention in `config.scaled_layers`."""

    def __init__(self, config: DepsSanConfig, embed_tokens: nn.Embedding, *args, **kwargs):
        super().__init__(config, embed_tokens, *args, **kwargs)
        if config.graft_gates:  # grafted: the scaled scores are 1 + g (D^s - 1) (mult) or g D^s (add), g from 0
            self.deps_san_gates = ClosedGates(len(config.scaled_layers))

    def layer_contexts(self, input_ids: torch.Tensor | None, embeddings: torch.Tensor, features: SourceFeatures,
                       attention_mask: torch.Tensor | None) -> list[EncoderLayerContext]:
        contexts = super().layer_contexts(input_ids, embeddings, features, attention_mask)
        config = self.config
        distance = features.require("dep_distance", "Deps-SAN")
        if self.training and config.knowledge_sparse != "none":  # sparsing regularises training only
            distance = knowledge_sparse(distance, config.knowledge_sparse, config.rs_sparse_probability,
                                        config.wink_sparse_window, config.sparsed_distance)
        if config.special_token_distance == "farthest":
            distance = place_special_tokens_farthest(distance)
        neutral = 1.0 if config.deps_san_mode == "mult" else 0.0
        matrix = dependency_scaled_matrix(distance, config.deps_san_variance, neutral).to(embeddings.dtype)
        # Eq. (4) (or its additive variant) on the chosen heads; the [B, H, S, S] layout keeps every sentence's
        # matrix on its own heads.
        if not config.graft_gates:
            modification = ScoreModification.on_heads(matrix, config.encoder_attention_heads, config.deps_san_heads,
                                                       config.deps_san_mode)
            for layer in config.scaled_layers:
                contexts[layer].score_modification = modification
            return contexts
        identity = torch.ones_like(matrix) if config.deps_san_mode == "mult" else torch.zeros_like(matrix)
        for index, layer in enumerate(config.scaled_layers):
            gated = self.deps_san_gates.mix(index, identity, matrix)
            contexts[layer].score_modification = ScoreModification.on_heads(
                gated, config.encoder_attention_heads, config.deps_san_heads, config.deps_san_mode)
        return contexts


class DepsSanModel(SrcFeatTransformerModel):
    config_class = DepsSanConfig
    encoder_class = DepsSanEncoder


class DepsSanForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = DepsSanConfig
    model_class = DepsSanModel


__all__ = ["DepsSanForConditionalGeneration", "DepsSanModel", "dependency_scaled_matrix", "knowledge_sparse",
           "place_special_tokens_farthest"]
