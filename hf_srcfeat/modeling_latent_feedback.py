"""Latent feature feedback (Li, Li & Zhang, Neurocomputing 2021): a latent feature encoder (LFE), a plain
Transformer encoder over the same vocabulary (reading the NMT source embeddings when trained jointly, its own
when pre-trained), reads the source; NMT encoder layer i
then computes its self-attention from x' = x + ctx^i (Eq. 3-4), ctx^i being the mean of the LFE layers above
i (Eq. 5), while its residual connection still adds x. The feed-forward sublayer and the decoder are the
baseline's. The LFE can be pre-trained as a denoising autoencoder (`hf-srcfeat-pretrain-dae`); no noise is
ever applied here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from transformers import AutoModelForSeq2SeqLM
from transformers.masking_utils import create_bidirectional_mask

from .closed_gates import ClosedGates
from .configuration_latent_feedback import LatentFeedbackConfig
from .modeling_srcfeat_transformer import (
    EncoderLayerContext,
    SrcFeatEncoder,
    SrcFeatEncoderLayer,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)
from .source_features import SourceFeatures


def top_down_feedback(lfe_states: list[torch.Tensor], num_layers: int) -> list[torch.Tensor | None]:
    """Eq. (5): ctx^i = mean(s^{i+1}, ..., s^J) for NMT layer i (1-based) of `num_layers`; the top layer I gets
    none (zero). `lfe_states` are s^1 ... s^J."""
    feedback: list[torch.Tensor | None] = []
    for layer in range(1, num_layers + 1):
        above = lfe_states[layer:]
        feedback.append(torch.stack(above).mean(0) if above and layer < num_layers else None)
    return feedback


#: The autoencoder settings an LFE must share to start from its encoder.
LFE_MATCHING_SETTINGS = ("vocab_size", "d_model", "layernorm_position", "encoder_attention_heads", "encoder_ffn_dim")


def autoencoder_mismatches(autoencoder, config, layers: bool = True) -> list[tuple[str, object, object]]:
    """(setting, the autoencoder's, this model's) for each setting in which a pre-trained autoencoder's config
    differs from what the LFE of `config` needs, its encoder's layer count included with `layers`."""
    mismatches = [(name, getattr(autoencoder, name, None), getattr(config, name)) for name in LFE_MATCHING_SETTINGS
                  if getattr(autoencoder, name, None) != getattr(config, name)]
    if layers and getattr(autoencoder, "encoder_layers", None) != config.latent_encoder_layers:
        mismatches.append(("encoder_layers", getattr(autoencoder, "encoder_layers", None),
                           config.latent_encoder_layers))
    return mismatches


def is_hub_id(name: str) -> bool:
    """Whether `name` is a Hub repository id of the form org/name (else it can only be a local folder)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return name.count("/") == 1


@dataclass
class FeedbackContext(EncoderLayerContext):
    feedback: torch.Tensor | None = None  # ctx^i, or None for no feedback (zero)


class LatentFeedbackEncoderLayer(SrcFeatEncoderLayer):
    """The rectified self-attention of Eq. (4): queries, keys and values from x + ctx, the residual from x."""

    def self_attention_input(self, hidden_states: torch.Tensor, context: FeedbackContext) -> torch.Tensor:
        return hidden_states if context.feedback is None else hidden_states + context.feedback  # Eq. (3)


class LatentFeedbackEncoder(SrcFeatEncoder):
    layer_class = LatentFeedbackEncoderLayer
    context_class = FeedbackContext

    def __init__(self, config: LatentFeedbackConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens)
        if config.share_lfe_parameters:
            self.lfe = None  # the encoder itself, run once without feedback
        else:
            if config.lfe_has_own_embeddings:  # Section 3: a pre-trained LFE keeps its own word embeddings
                lfe_embeddings = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
            else:  # joint training: one source embedding for both encoders (Table 1's parameter counts)
                lfe_embeddings = embed_tokens
            self.lfe = SrcFeatEncoder(config, lfe_embeddings, num_layers=config.latent_encoder_layers)
        # grafted: feedback enters as g ctx (x + g ctx instead of x + ctx), g from 0 per layer
        self.feedback_gates = ClosedGates(len(config.layers_with_feedback)) if config.graft_gates else None
        self.lfe_frozen = config.lfe_mode == "frozen"
        if self.lfe_frozen and self.lfe is not None:
            self.lfe.requires_grad_(False)

    def train(self, mode: bool = True) -> LatentFeedbackEncoder:
        super().train(mode)
        if self.lfe_frozen and self.lfe is not None:
            self.lfe.eval()  # a fixed feature extractor: no dropout either
        return self

    def latent_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[torch.Tensor]:
        """s^1 ... s^J, normalised like the NMT layer inputs they are added to (Section 2.2: "both of them are
        normalized by LN"): with pre-LayerNorm, each passes through the LFE's final LayerNorm."""
        encoder = self if self.lfe is None else self.lfe
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.lfe_frozen):
            hidden_states = encoder.embed_source(input_ids, SourceFeatures(), attention_mask)
            mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                             attention_mask=attention_mask)
            states = []
            for layer in encoder.layers:  # a plain Transformer pass: no feedback into the LFE itself
                hidden_states, _ = layer(hidden_states, mask, FeedbackContext())
                states.append(hidden_states if encoder.layer_norm is None else encoder.layer_norm(hidden_states))
        return states

    def layer_contexts(self, input_ids: torch.Tensor | None, embeddings: torch.Tensor, features: SourceFeatures,
                       attention_mask: torch.Tensor | None) -> list[FeedbackContext]:
        if input_ids is None:
            raise ValueError("Latent feature feedback needs `input_ids`: the latent feature encoder embeds the "
                             "source tokens itself, so `inputs_embeds` alone is not enough.")
        contexts = cast(list[FeedbackContext],  # built from this encoder's context_class
                        super().layer_contexts(input_ids, embeddings, features, attention_mask))
        feedback = top_down_feedback(self.latent_states(input_ids, attention_mask), len(self.layers))
        for index, layer in enumerate(self.config.layers_with_feedback):
            contexts[layer].feedback = feedback[layer]
            if self.feedback_gates is not None and feedback[layer] is not None:
                contexts[layer].feedback = self.feedback_gates.values[index].to(embeddings.dtype) * feedback[layer]
        return contexts


def lfe_embedding_ties(config: LatentFeedbackConfig) -> dict[str, str]:
    """A joint-trained separate LFE reads the NMT source embeddings: its embedding weight is tied to them."""
    if config.share_lfe_parameters or config.lfe_has_own_embeddings:
        return {}
    source = "shared.weight" if config.share_embeddings else "encoder.embed_source.embed_tokens.weight"
    return {"encoder.lfe.embed_source.embed_tokens.weight": source}


class LatentFeedbackModel(SrcFeatTransformerModel):
    config_class = LatentFeedbackConfig
    encoder_class = LatentFeedbackEncoder

    def _embedding_ties(self) -> dict[str, str]:
        return {**super()._embedding_ties(), **lfe_embedding_ties(cast(LatentFeedbackConfig, self.config))}


class LatentFeedbackForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = LatentFeedbackConfig
    model_class = LatentFeedbackModel

    def load_pretrained_parts(self) -> None:
        """Initialise the LFE from the encoder of the denoising autoencoder named by `config.lfe_pretrained_from`:
        its token embeddings, layers and final LayerNorm (with `share_lfe_parameters`, the NMT encoder's, so the
        source embeddings too). Nothing to do for a joint-trained LFE."""
        source = self.config.lfe_pretrained_from
        if not source:
            return
        if not os.path.isdir(source) and not is_hub_id(source):
            raise ValueError(f"lfe_pretrained_from={source!r}: no such folder (nor a Hub id org/name); point it at "
                             "the denoising autoencoder trained by hf-srcfeat-pretrain-dae.")
        autoencoder = AutoModelForSeq2SeqLM.from_pretrained(source)
        if autoencoder.config.model_type != "srcfeat_transformer":
            raise ValueError(f"lfe_pretrained_from={source!r} is a {autoencoder.config.model_type} model, not the "
                             "denoising autoencoder hf-srcfeat-pretrain-dae trains.")
        # Its embeddings are rows of its own subword vocabulary: another tokenizer's ids would read other rows.
        theirs, ours = (getattr(config, "tokenizer_fingerprint", None) for config in (autoencoder.config, self.config))
        if theirs and ours and theirs != ours:
            raise ValueError(f"lfe_pretrained_from={source!r} was trained with another tokenizer than this model's "
                             "(their fingerprints differ): pre-train it with this run's tokenizer "
                             "(hf-srcfeat-pretrain-dae --tokenizer_name_or_path <this run's output_dir or tokenizer>).")
        self.load_lfe_from(autoencoder.get_encoder())

    def load_lfe_from(self, pretrained_encoder: SrcFeatEncoder) -> None:
        encoder = self.get_encoder()
        target = encoder if encoder.lfe is None else encoder.lfe
        mismatches = autoencoder_mismatches(pretrained_encoder.config, self.config, layers=False)
        if mismatches:
            name, theirs, ours = mismatches[0]
            raise ValueError(f"The pre-trained autoencoder has {name}={theirs!r}, this model {ours!r}: the LFE must "
                             "match the translation model.")
        if len(pretrained_encoder.layers) != len(target.layers):
            raise ValueError(f"The pre-trained autoencoder has {len(pretrained_encoder.layers)} encoder layers, the "
                             f"LFE {len(target.layers)}; set `lfe_layers` to match.")
        with torch.no_grad():
            target.layers.load_state_dict(pretrained_encoder.layers.state_dict())
            if target.layer_norm is not None and pretrained_encoder.layer_norm is not None:
                target.layer_norm.load_state_dict(pretrained_encoder.layer_norm.state_dict())
            # The LFE's own embeddings, or the NMT source embeddings it reads (shared parameters, Table 8), with
            # whatever else the pre-trained input representation holds (learned positions, embedding LayerNorm).
            target.embed_tokens.weight.copy_(pretrained_encoder.embed_tokens.weight)
            target.embed_source.load_state_dict({name: value for name, value in
                                                 pretrained_encoder.embed_source.state_dict().items()
                                                 if not name.startswith("embed_tokens.")}, strict=False)


__all__ = ["LatentFeedbackForConditionalGeneration", "LatentFeedbackModel", "top_down_feedback"]
