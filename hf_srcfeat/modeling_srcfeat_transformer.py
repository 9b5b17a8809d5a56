"""The baseline Transformer encoder-decoder, written as the backbone every method of the zoo extends.

Extension points (each a small overridable piece, so a method's file holds only what its paper adds):

* source input representation: `SrcFeatEncoder.source_embedding_class` (see `embeddings.py`);
* per-layer encoder context: `SrcFeatEncoder.layer_contexts` returns one `context_class` per layer,
  carrying a `ScoreModification` (per-head scale/bias of the self-attention scores) and anything a method
  adds by subclassing `EncoderLayerContext` (e.g. feedback from an auxiliary encoder); a method's
  `layer_contexts` calls `super()` and fills in its own fields, so several methods can share one context;
* sublayers: `SrcFeatEncoderLayer.before_self_attention` / `self_attention_input` and
  `SrcFeatDecoderLayer.before_cross_attention` (e.g. cross-attention to a second memory);
* encoder outputs: `SrcFeatEncoder.output_class` / `build_output` add fields (stack per-layer tensors into
  one tensor so that beam search expands them); `SrcFeatDecoder.layer_contexts` reads them back.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMode
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    ModelOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)

from .attention import ScoreModification, SrcFeatAttention
from .configuration_srcfeat_transformer import SrcFeatTransformerConfig
from .damaged_files import named_weights_error
from .decoder_step import DecoderStep, LayerStep
from .decoding import beam_search, greedy_search, reason_not_supported, reason_settings_not_supported
from .dropout import Dropout
from .embeddings import SrcFeatSourceEmbedding, SrcFeatTargetEmbedding, given_tokens
from .feature_dropout import apply_feature_dropout, check_feature_dropout_read
from .generation_preparation import matching_preparation, record_loop, recording
from .label_smoothed_cross_entropy import label_smoothed_cross_entropy, projected_label_smoothed_cross_entropy
from .linear import Linear, onednn_applies, runs_more_than_forward
from .loading_saved import loading_saved
from .source_features import (
    SOURCE_FEATURE_NAMES,
    MissingFeatureDefaults,
    SourceFeatures,
    is_user_factor_feature,
)


@dataclass
class SrcFeatEncoderOutput(ModelOutput):
    """Encoder output. `last_hidden_state` must stay the first field (static caches size themselves from it).

    Methods subclass this to carry extra tensors to the decoder; every extra field must be a single tensor
    with the batch first, because `generate` beam-expands tensor fields only (tuples are left as they are).
    """

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class EncoderLayerContext:
    """What one encoder layer receives besides its input. Methods subclass it to add fields."""

    score_modification: ScoreModification | None = None


@dataclass
class DecoderLayerContext:
    """What one decoder layer receives besides its input and the encoder memory. Methods subclass it."""


class ResidualSublayer(nn.Module):
    """x + Dropout(f(x)), with LayerNorm on the sublayer input ("pre") or after the sum ("post")."""

    def __init__(self, config):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.layernorm_position == "pre"

    def forward(self, hidden_states: torch.Tensor, sublayer: Callable) -> tuple[torch.Tensor, object]:
        """`sublayer` maps the (normalised) input to an output tensor or to (output, extra); returns (x, extra)."""
        result = sublayer(self.layer_norm(hidden_states) if self.pre_norm else hidden_states)
        output, extra = result if isinstance(result, tuple) else (result, None)
        hidden_states = hidden_states + self.dropout(output)
        return (hidden_states if self.pre_norm else self.layer_norm(hidden_states)), extra


class FeedForward(nn.Module):
    """FFN(x) = W_2 Dropout(act(W_1 x + b_1)) + b_2."""

    def __init__(self, config, inner_dim: int):
        super().__init__()
        self.fc1 = Linear(config.d_model, inner_dim)
        self.fc2 = Linear(inner_dim, config.d_model)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = Dropout(config.activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(self.activation(self.fc1(hidden_states))))


class SrcFeatEncoderLayer(GradientCheckpointingLayer):
    """[extra sublayers] -> self-attention -> feed-forward, each a residual sublayer."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn = SrcFeatAttention(config, config.encoder_attention_heads, layer_idx=layer_idx)
        self.self_attn_sublayer = ResidualSublayer(config)
        self.ffn = FeedForward(config, config.encoder_ffn_dim)
        self.ffn_sublayer = ResidualSublayer(config)

    def before_self_attention(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                              context: EncoderLayerContext) -> torch.Tensor:
        """Hook for sublayers that run before self-attention (e.g. cross-attention to phrases). Identity here."""
        return hidden_states

    def self_attention_input(self, hidden_states: torch.Tensor, context: EncoderLayerContext) -> torch.Tensor:
        """Hook: what queries, keys and values are computed from; the residual still adds the layer input."""
        return hidden_states

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                context: EncoderLayerContext, output_attentions: bool = False):
        hidden_states = self.before_self_attention(hidden_states, attention_mask, context)
        hidden_states, attention_weights = self.self_attn_sublayer(
            hidden_states,
            lambda x: self.self_attn(
                self.self_attention_input(x, context),
                attention_mask=attention_mask,
                score_modification=context.score_modification,
                output_attentions=output_attentions,
            ),
        )
        hidden_states, _ = self.ffn_sublayer(hidden_states, self.ffn)
        return hidden_states, attention_weights


class SrcFeatDecoderLayer(GradientCheckpointingLayer):
    """self-attention -> [extra sublayers] -> cross-attention to the source -> feed-forward."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        heads = config.decoder_attention_heads
        self.self_attn = SrcFeatAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_sublayer = ResidualSublayer(config)
        self.encoder_attn = SrcFeatAttention(config, heads, layer_idx=layer_idx, is_cross_attention=True)
        self.encoder_attn_sublayer = ResidualSublayer(config)
        self.ffn = FeedForward(config, config.decoder_ffn_dim)
        self.ffn_sublayer = ResidualSublayer(config)

    def before_cross_attention(self, hidden_states: torch.Tensor, context: DecoderLayerContext,
                               past_key_values: Cache | None = None) -> torch.Tensor:
        """Hook for sublayers between self- and cross-attention (e.g. attention to phrases, which may cache what
        depends only on the encoder in `past_key_values`). Identity here."""
        return hidden_states

    def forward(self, hidden_states, self_attention_mask, encoder_hidden_states, cross_attention_mask,
                context: DecoderLayerContext, past_key_values: Cache | None = None,
                output_attentions: bool = False):
        hidden_states, self_weights = self.self_attn_sublayer(
            hidden_states,
            lambda x: self.self_attn(x, attention_mask=self_attention_mask, past_key_values=past_key_values,
                                     output_attentions=output_attentions),
        )
        hidden_states = self.before_cross_attention(hidden_states, context, past_key_values)
        hidden_states, cross_weights = self.encoder_attn_sublayer(
            hidden_states,
            lambda x: self.encoder_attn(x, key_value_states=encoder_hidden_states,
                                        attention_mask=cross_attention_mask, past_key_values=past_key_values,
                                        output_attentions=output_attentions),
        )
        hidden_states, _ = self.ffn_sublayer(hidden_states, self.ffn)
        return hidden_states, self_weights, cross_weights


def has_baseline_sublayers(layer: nn.Module) -> bool:
    """Whether decoder layer `layer` has exactly the baseline's attention, feed-forward and residual sublayers (what
    `hf_srcfeat.decoder_step.LayerStep` restates)."""
    sublayers = (layer.self_attn_sublayer, layer.encoder_attn_sublayer, layer.ffn_sublayer)
    return (type(layer.self_attn) is type(layer.encoder_attn) is SrcFeatAttention and type(layer.ffn) is FeedForward
            and all(type(sublayer) is ResidualSublayer and type(sublayer.layer_norm) is nn.LayerNorm
                    for sublayer in sublayers))


def _is_baseline_target_embedding(embedding: nn.Module) -> bool:
    """Whether `embedding` is exactly the baseline's target embedding over plain lookup tables (what
    `hf_srcfeat.decoder_step` restates)."""
    tables = [embedding.embed_tokens] + ([embedding.embed_positions] if hasattr(embedding, "embed_positions") else [])
    return (type(embedding) is SrcFeatTargetEmbedding
            and all(type(table) is nn.Embedding and table.max_norm is None for table in tables)
            and type(embedding.layernorm_embedding) in (nn.LayerNorm, type(None)))


def user_factor_arguments(arguments: dict) -> dict:
    """The user factors (`factor_<name>_ids`) among keyword arguments. Others are ignored: `generate` hands an
    encoder that takes keyword arguments every model argument (`labels` too)."""
    return {name: value for name, value in arguments.items() if is_user_factor_feature(name)}


class ForwardSignatureKept:
    """Gives each subclass's own `forward` its signature computed once, as `__signature__` (which `inspect.signature`
    returns as it is). Transformers' `generate` asks for the signatures of the model's, the encoder's and the
    decoder's `forward` about nine times per call, each computed anew otherwise: a good part of the set-up of a call
    that translates one sentence."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        forward = cls.__dict__.get("forward")
        if forward is not None and getattr(forward, "__signature__", None) is None:
            forward.__signature__ = inspect.signature(forward)


class SrcFeatEncoder(nn.Module, ForwardSignatureKept):
    """Transformer encoder. Subclasses swap the class attributes or override the hooks, not `forward`."""

    source_embedding_class: type[SrcFeatSourceEmbedding] = SrcFeatSourceEmbedding
    layer_class: type[SrcFeatEncoderLayer] = SrcFeatEncoderLayer
    context_class: type[EncoderLayerContext] = EncoderLayerContext
    output_class: type[SrcFeatEncoderOutput] = SrcFeatEncoderOutput

    def __init__(self, config, embed_tokens: nn.Embedding, num_layers: int | None = None):
        super().__init__()
        self.config = config
        self.embed_source = self.source_embedding_class(config, embed_tokens)
        num_layers = config.encoder_layers if num_layers is None else num_layers  # e.g. an auxiliary encoder
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(num_layers))
        self.layer_norm = nn.LayerNorm(config.d_model) if config.layernorm_position == "pre" else None

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embed_source.embed_tokens

    def layer_contexts(self, input_ids: torch.Tensor | None, embeddings: torch.Tensor, features: SourceFeatures,
                       attention_mask: torch.Tensor | None) -> list[EncoderLayerContext]:
        """One context per layer, from the source tokens, their embeddings and features (e.g. a score scale
        from `features.dep_distance`, or the layers of an auxiliary encoder run on `input_ids`).
        The baseline modifies nothing. Methods call `super()` and fill in their fields of `context_class`, so that
        methods compose (`modeling_composed.py`)."""
        return [self.context_class() for _ in self.layers]

    def build_output(self, last_hidden_state, hidden_states, attentions, contexts, features,
                     attention_mask) -> SrcFeatEncoderOutput:
        """Assemble the output; methods add their extra fields here (e.g. stacked per-layer tensors)."""
        return self.output_class(last_hidden_state=last_hidden_state, hidden_states=hidden_states,
                                 attentions=attentions)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pos_ids: torch.Tensor | None = None,
        lemma_ids: torch.Tensor | None = None,
        deprel_ids: torch.Tensor | None = None,
        subword_tag_ids: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        phrase_ids: torch.Tensor | None = None,
        dep_distance: torch.Tensor | None = None,
        feats_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,  # user factors, factor_<name>_ids (named kwargs: generate hands a wildcard encoder everything)
    ) -> SrcFeatEncoderOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Give exactly one of `input_ids` and `inputs_embeds` to the encoder.")
        check_token_ids("input_ids", input_ids, self.config.vocab_size)
        batch_size, seq_len = given_tokens(input_ids, inputs_embeds).shape[:2]
        if seq_len == 0:
            raise ValueError("The source sequence is empty (0 tokens); the encoder needs at least one token.")
        if attention_mask is not None and tuple(attention_mask.shape) != (batch_size, seq_len):
            raise ValueError(f"`attention_mask` has shape {tuple(attention_mask.shape)}, expected "
                             f"{(batch_size, seq_len)} like the source tokens.")
        features = SourceFeatures(pos_ids=pos_ids, lemma_ids=lemma_ids, deprel_ids=deprel_ids,
                                  subword_tag_ids=subword_tag_ids, word_ids=word_ids, phrase_ids=phrase_ids,
                                  dep_distance=dep_distance, feats_ids=feats_ids,
                                  user_factor_ids=user_factor_arguments(kwargs))
        features.check_shapes(batch_size, seq_len)
        if self.training and self.config.feature_dropout:
            features = apply_feature_dropout(features, self.config.feature_dropout)
        if not self.training:  # a source without a parse still translates, with a warning (MissingFeatureDefaults)
            device = given_tokens(input_ids, inputs_embeds).device
            features.defaults = MissingFeatureDefaults(batch_size, seq_len, device, attention_mask)

        hidden_states = self.embed_source(input_ids, features, attention_mask, inputs_embeds=inputs_embeds)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                         attention_mask=attention_mask)
        contexts = self.layer_contexts(input_ids, hidden_states, features, attention_mask)
        all_hidden_states: tuple[torch.Tensor, ...] | None
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions: tuple[torch.Tensor, ...] | None = () if output_attentions else None
        for layer, context in zip(self.layers, contexts, strict=True):
            hidden_states, weights = layer(hidden_states, mask, context, output_attentions=bool(output_attentions))
            if all_hidden_states is not None:  # a tuple exactly when output_hidden_states
                all_hidden_states += (hidden_states,)
            if all_attentions is not None:  # a tuple exactly when output_attentions
                all_attentions += (weights,)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return self.build_output(hidden_states, all_hidden_states, all_attentions, contexts, features,
                                 attention_mask)


class SrcFeatDecoder(nn.Module, ForwardSignatureKept):
    """Transformer decoder with an `EncoderDecoderCache` KV cache."""

    layer_class: type[SrcFeatDecoderLayer] = SrcFeatDecoderLayer

    def __init__(self, config, embed_tokens: nn.Embedding):
        super().__init__()
        self.config = config
        self.embed_target = SrcFeatTargetEmbedding(config, embed_tokens)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model) if config.layernorm_position == "pre" else None

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embed_target.embed_tokens

    def layer_contexts(self, encoder_outputs: SrcFeatEncoderOutput | None,
                       encoder_attention_mask: torch.Tensor | None) -> list[DecoderLayerContext]:
        """One context per layer, built from the encoder outputs; empty in the baseline."""
        return [DecoderLayerContext() for _ in self.layers]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: SrcFeatEncoderOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Give exactly one of `input_ids` and `inputs_embeds` to the decoder.")
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden_states = self.embed_target(input_ids, past_length, inputs_embeds=inputs_embeds)

        self_cache = (past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache)
                      else past_key_values)
        # The cache by position: Transformers renamed the argument (past_key_values -> cache) within 5.x.
        self_mask = create_causal_mask(self.config, hidden_states, attention_mask, self_cache)
        cross_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                               attention_mask=encoder_attention_mask,
                                               encoder_hidden_states=encoder_hidden_states)
        contexts = self.layer_contexts(encoder_outputs, encoder_attention_mask)
        all_hidden_states: tuple[torch.Tensor, ...] | None
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_self: tuple[torch.Tensor, ...] | None
        all_cross: tuple[torch.Tensor, ...] | None
        all_self, all_cross = ((), ()) if output_attentions else (None, None)
        for layer, context in zip(self.layers, contexts, strict=True):
            hidden_states, self_weights, cross_weights = layer(
                hidden_states, self_mask, encoder_hidden_states, cross_mask, context,
                past_key_values=past_key_values, output_attentions=bool(output_attentions),
            )
            if all_hidden_states is not None:  # a tuple exactly when output_hidden_states
                all_hidden_states += (hidden_states,)
            if all_self is not None and all_cross is not None:  # tuples exactly when output_attentions
                all_self += (self_weights,)
                all_cross += (cross_weights,)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, past_key_values=past_key_values if use_cache else None,
            hidden_states=all_hidden_states, attentions=all_self, cross_attentions=all_cross,
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: [start, y_1, ..., y_{n-1}], with -100 (ignored labels) as padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def check_inputs_are_tensors(*inputs: dict[str, Any]) -> None:
    """Refuse, naming it, a source input that is not a torch tensor (lists or NumPy arrays, a tokenizer called without
    return_tensors="pt"), which Transformers' generate would fail on far from the cause."""
    for given in inputs:
        for name, value in given.items():
            if ((name in ("inputs", "input_ids", "attention_mask") or name in SOURCE_FEATURE_NAMES
                 or is_user_factor_feature(name)) and value is not None and not isinstance(value, torch.Tensor)):
                raise TypeError(f"`{name}` is a {type(value).__name__}, not a torch tensor: encode with "
                                "return_tensors=\"pt\".")


def check_token_ids(name: str, ids: torch.Tensor | None, vocab_size: int) -> None:
    """Raise an error naming `name` unless it is an integer tensor of ids below `vocab_size` (-100 allowed in labels),
    instead of an index error inside the embedding."""
    if ids is None or torch.compiler.is_compiling():  # reads back to the host: eager only
        return
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"`{name}` is a {type(ids).__name__}, not a torch tensor: encode with "
                        "return_tensors=\"pt\".")
    if ids.dim() != 2:
        raise ValueError(f"`{name}` has shape {tuple(ids.shape)}; token ids are [sentences, tokens] (one sentence "
                         "is one row).")
    if ids.shape[0] == 0:
        raise ValueError(f"`{name}` holds no sentence (shape {tuple(ids.shape)}).")
    if not ids.numel():
        return
    if ids.dtype not in (torch.long, torch.int):
        raise TypeError(f"`{name}` has dtype {ids.dtype}; token ids are an integer tensor (torch.long).")
    out_of_range = (ids >= vocab_size) | ((ids < 0) & (ids != -100) if name == "labels" else ids < 0)
    if out_of_range.any():  # one read-back (it waits for the GPU); the range is read only for the message
        real = ids[ids != -100] if name == "labels" else ids
        raise ValueError(f"`{name}` holds ids from {int(real.min())} to {int(real.max())}, but the model has "
                         f"{vocab_size} token embeddings: the tokenizer does not match this model.")


def _check_labels_match(labels: torch.Tensor, decoder_outputs: torch.Tensor) -> None:
    """`labels` must give one label per decoder position of `decoder_outputs` `[batch, positions, ...]`."""
    if labels.shape != decoder_outputs.shape[:2]:
        raise ValueError(f"`labels` have shape {tuple(labels.shape)} but the decoder produced "
                         f"{tuple(decoder_outputs.shape[:2])} positions.")


def _per_token(total: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None) -> torch.Tensor:
    """A summed loss over the target tokens, divided by their number (the whole accumulated batch's where given)."""
    count = num_items_in_batch if num_items_in_batch is not None else (labels != -100).sum().clamp(min=1)
    if isinstance(count, torch.Tensor):
        count = count.to(total.device)
    return total / count


class SrcFeatTransformerPreTrainedModel(PreTrainedModel, ForwardSignatureKept):
    config_class: type[SrcFeatTransformerConfig] = SrcFeatTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True  # the layers are GradientCheckpointingLayers
    _supports_sdpa = True
    _no_split_modules = ["SrcFeatEncoderLayer", "SrcFeatDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]

    def __init__(self, config: SrcFeatTransformerConfig, *inputs, **kwargs):
        config.check_arguments()  # again: a setting changed after the config was made would build another model
        check_feature_dropout_read(config)
        super().__init__(config, *inputs, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`; a truncated or damaged weights file is an error naming it."""
        from safetensors import SafetensorError

        try:
            with loading_saved():
                return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as error:
            raise named_weights_error(pretrained_model_name_or_path, error) from None

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, then remove the weight files of an earlier save into the same folder
        that this save did not write: Transformers leaves a single `model.safetensors` beside new shards (and loads
        it instead of them) and an old shard index beside a new single file."""
        started = time.time_ns()
        result = super().save_pretrained(save_directory, *args, **kwargs)
        folder = Path(save_directory)
        if getattr(self.config, "custom_pipelines", None) and getattr(self, "_auto_class", None):
            self.save_pipeline_code(folder)
        index = folder / "model.safetensors.index.json"
        if index.exists() and index.stat().st_mtime_ns >= started:
            written = {index.name, *json.loads(index.read_text())["weight_map"].values()}
        elif (folder / "model.safetensors").exists():
            written = {"model.safetensors"}
        else:
            return result
        for stale in [*folder.glob("model*.safetensors"), index]:
            if stale.exists() and stale.name not in written:
                stale.unlink()
        return result

    def save_pipeline_code(self, folder: Path) -> None:
        """A published model, loaded with trust_remote_code and saved again, names the shipped translation pipeline
        in its config (`custom_pipelines`): its module and the modules it imports go with it, or the new folder
        would name a file it lacks. Found beside the model's code, else in the repository the model came from; not
        imported here, so that loading the model alone needs none of the pipeline's packages."""
        import shutil

        from transformers.dynamic_module_utils import get_cached_module_file, get_relative_import_files
        from transformers.utils import HF_MODULES_CACHE

        source = Path(inspect.getfile(type(self))).with_name("pipeline_translation.py")
        if not source.exists():
            source = Path(HF_MODULES_CACHE) / get_cached_module_file(str(self.name_or_path), source.name)
        for file in [source, *map(Path, get_relative_import_files(source))]:
            if not (folder / file.name).exists():
                shutil.copy(file, folder / file.name)

    def _init_weights(self, module: nn.Module) -> None:
        # Xavier-uniform linear layers and N(0, d^-1/2) embeddings, as in the original Transformer code
        # (tensor2tensor, fairseq); they train better than BERT's N(0, 0.02) at these sizes.
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.RNNBase):
            # PyTorch's own RNN initialisation, U(-1/sqrt(hidden), 1/sqrt(hidden)), for every weight and bias.
            bound = module.hidden_size**-0.5
            for parameter in module.parameters():
                init.uniform_(parameter, -bound, bound)
        elif hasattr(module, "initialize_parameters"):
            # A method's module that owns bare nn.Parameters initialises them itself (with transformers'
            # `initialization` functions, which leave weights loaded from a checkpoint alone).
            module.initialize_parameters()  # type: ignore[operator]  # nn.Module.__getattr__ is typed as Tensor
        elif isinstance(module, nn.Embedding):
            std = self.config.init_std or self.config.d_model**-0.5
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        else:
            super()._init_weights(module)


class SrcFeatTransformerModel(SrcFeatTransformerPreTrainedModel):
    """Encoder-decoder without the output projection. Methods set `encoder_class`/`decoder_class`."""

    encoder_class: type[SrcFeatEncoder] = SrcFeatEncoder
    decoder_class: type[SrcFeatDecoder] = SrcFeatDecoder

    def __init__(self, config: SrcFeatTransformerConfig):
        super().__init__(config)
        source_width = self.encoder_class.source_embedding_class.token_embedding_width(config)
        if config.share_embeddings:
            if source_width != config.d_model:
                raise ValueError(
                    f"`share_embeddings=True` needs source token embeddings as wide as the target's (d_model "
                    f"{config.d_model}), but this model's source token embeddings are {source_width} wide; "
                    "set share_embeddings=False."
                )
            self.shared = self._new_token_embedding(config.d_model)
            self.encoder = self.encoder_class(config, self.shared)
            self.decoder = self.decoder_class(config, self.shared)
        else:
            self.encoder = self.encoder_class(config, self._new_token_embedding(source_width))
            self.decoder = self.decoder_class(config, self._new_token_embedding(config.d_model))
        self._tied_weights_keys = self._embedding_ties()
        self.post_init()

    def _new_token_embedding(self, width: int) -> nn.Embedding:
        return nn.Embedding(self.config.vocab_size, width, padding_idx=self.config.pad_token_id)

    def _embedding_ties(self) -> dict[str, str]:
        if not self.config.share_embeddings:
            return {}
        return {"encoder.embed_source.embed_tokens.weight": "shared.weight",
                "decoder.embed_target.embed_tokens.weight": "shared.weight"}

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        # Transformers gates every tie by `tie_word_embeddings`; source/target sharing is a separate switch.
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return self._embedding_ties()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared if self.config.share_embeddings else self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        if self.config.share_embeddings:
            self.shared = value
            self.decoder.embed_target.embed_tokens = value
        self.encoder.embed_source.embed_tokens = value

    def get_encoder(self):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pos_ids: torch.Tensor | None = None,
        lemma_ids: torch.Tensor | None = None,
        deprel_ids: torch.Tensor | None = None,
        subword_tag_ids: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        phrase_ids: torch.Tensor | None = None,
        dep_distance: torch.Tensor | None = None,
        feats_ids: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: SrcFeatEncoderOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, pos_ids=pos_ids, lemma_ids=lemma_ids,
                deprel_ids=deprel_ids, subword_tag_ids=subword_tag_ids, word_ids=word_ids,
                phrase_ids=phrase_ids, dep_distance=dep_distance, feats_ids=feats_ids, inputs_embeds=inputs_embeds,
                **user_factor_arguments(kwargs),
                output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            )
        elif not isinstance(encoder_outputs, ModelOutput):
            encoder_outputs = self.encoder.output_class(*encoder_outputs)
        encoder_outputs = cast(SrcFeatEncoderOutput, encoder_outputs)  # a tuple was turned into one just above
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids, attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state, encoder_attention_mask=attention_mask,
            encoder_outputs=encoder_outputs, past_key_values=past_key_values, inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache if use_cache is not None else self.config.use_cache,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


#: The attribute names under which the models hold a table of the (shared source and target) vocabulary's tokens.
TOKEN_TABLE_NAMES = ("shared", "embed_tokens")


class SrcFeatTransformerForConditionalGeneration(SrcFeatTransformerPreTrainedModel, GenerationMixin):
    """Encoder-decoder with a (tied) output projection, label-smoothed loss and `generate`.

    Methods subclass it and set `model_class` to their `...Model`.
    """

    model_class: type[SrcFeatTransformerModel] = SrcFeatTransformerModel
    #: Whether `generate` decodes with `hf_srcfeat.decoding`'s loops where they apply (same outputs, less work).
    fast_decoding: bool = True

    def __init__(self, config: SrcFeatTransformerConfig):
        super().__init__(config)
        self.model = self.model_class(config)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        if getattr(config, "final_logits_bias", False):  # a buffer, as Marian and mBART checkpoints keep it
            self.register_buffer("final_logits_bias", torch.zeros(1, config.vocab_size))
        self._tied_weights_keys = self._lm_head_ties()
        self.post_init()

    def _lm_head_ties(self) -> dict[str, str]:
        if not self.config.tie_word_embeddings:
            return {}
        source = "model.shared.weight" if self.config.share_embeddings else \
            "model.decoder.embed_target.embed_tokens.weight"
        return {"lm_head.weight": source}

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return self._lm_head_ties()

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def _resize_token_embeddings(self, new_num_tokens: int | None, pad_to_multiple_of: int | None = None,
                                 mean_resizing: bool = True) -> nn.Embedding:
        # One vocabulary serves both sides, so every token table follows the new size: separate source and target
        # tables (share_embeddings=False), a method's own (a latent feature encoder's), the output projection and
        # the final logits bias; Transformers' resizing grows only the input table and the output projection.
        holders: dict[int, list[tuple[nn.Module, str]]] = {}
        tables: dict[int, nn.Embedding] = {}
        for module in self.modules():
            for name, child in module.named_children():
                if name in TOKEN_TABLE_NAMES and isinstance(child, nn.Embedding):
                    holders.setdefault(id(child), []).append((module, name))
                    tables[id(child)] = child
        for key, table in tables.items():
            resized = self._get_resized_embeddings(table, new_num_tokens, pad_to_multiple_of, mean_resizing)
            resized.requires_grad_(table.weight.requires_grad)
            new_num_tokens, pad_to_multiple_of = resized.num_embeddings, None  # every table as the first became
            for module, name in holders[key]:
                setattr(module, name, resized)
        source_table = cast(nn.Embedding, self.get_input_embeddings())
        size = source_table.num_embeddings
        if not self.config.tie_word_embeddings:
            resized_head = self._get_resized_lm_head(self.lm_head, size, mean_resizing=mean_resizing)
            self.lm_head.weight = resized_head.weight
        self.lm_head.out_features = size  # tied: `tie_weights` then gives it the resized target table
        old_bias: torch.Tensor | None = getattr(self, "final_logits_bias", None)
        if old_bias is not None:
            bias = old_bias.new_zeros(1, size)
            kept = min(size, old_bias.shape[1])
            bias[:, :kept] = old_bias[:, :kept]
            self.final_logits_bias = bias
        return source_table

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pos_ids: torch.Tensor | None = None,
        lemma_ids: torch.Tensor | None = None,
        deprel_ids: torch.Tensor | None = None,
        subword_tag_ids: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        phrase_ids: torch.Tensor | None = None,
        dep_distance: torch.Tensor | None = None,
        feats_ids: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: SrcFeatEncoderOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        skip_logits: bool = False,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.Tensor` of shape `(batch_size, target_length)`, *optional*):
            Target token ids; -100 marks positions ignored by the loss. When given without `decoder_input_ids`,
            the decoder inputs are the labels shifted right, and the label-smoothed cross-entropy is returned.
        num_items_in_batch (`int`, *optional*):
            Number of target tokens in the whole (gradient-accumulated) batch, passed by the Trainer so that the
            loss is normalised per token across accumulation steps.
        skip_logits (`bool`, *optional*, defaults to `False`):
            With `labels`, for a caller that reads only the loss (the Trainer's training steps): where the zoo's CPU
            kernels apply, the output projection and the loss are computed together, chunk by chunk, without the
            [tokens, vocabulary] logits, and `logits` is None (elsewhere the logits are returned as usual).

        The source features (`pos_ids` ... `dep_distance`, see `hf_srcfeat.source_features`) are accepted by
        every model of the zoo; the baseline ignores them.
        """
        # The source's ids are checked by the encoder, which `generate` calls without this forward.
        for name, ids in (("decoder_input_ids", decoder_input_ids), ("labels", labels)):
            check_token_ids(name, ids, self.config.vocab_size)
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        if labels is not None and use_cache is None:
            # A training step reads no cache: filling one copies every decoder layer's keys and values.
            use_cache = False
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, pos_ids=pos_ids, lemma_ids=lemma_ids,
            deprel_ids=deprel_ids, subword_tag_ids=subword_tag_ids, word_ids=word_ids, phrase_ids=phrase_ids,
            dep_distance=dep_distance, feats_ids=feats_ids, **user_factor_arguments(kwargs),
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
            past_key_values=past_key_values, inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
        )
        logits: torch.Tensor | None = None
        loss: torch.Tensor | None
        if labels is not None and skip_logits and self._loss_without_logits_applies(outputs.last_hidden_state):
            loss = self._label_smoothed_loss_without_logits(outputs.last_hidden_state, labels, num_items_in_batch)
        else:
            logits = self.output_logits(outputs.last_hidden_state)
            loss = self.label_smoothed_loss(logits, labels, num_items_in_batch) if labels is not None else None
        return Seq2SeqLMOutput(
            loss=loss, logits=logits, past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states, decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions, encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states, encoder_attentions=outputs.encoder_attentions,
        )

    def output_logits(self, decoder_hidden_states: torch.Tensor) -> torch.Tensor:
        """Next-token logits from the decoder's last hidden states (the output projection, and the logits bias that
        Marian and mBART checkpoints carry)."""
        logits = self.lm_head(decoder_hidden_states)
        if getattr(self.config, "final_logits_bias", False):
            logits = logits + self.final_logits_bias.to(logits.dtype)
        return logits

    def decoder_step_as_tensor_operations(self) -> DecoderStep | None:
        """What the zoo's decoding loops run for each step of one new token where `decoder_layer_step` restates
        every decoder layer (`hf_srcfeat.decoder_step`), or None: the loops step through the modules (another
        decoder layer or output, or what `DecoderStep.for_model` refuses)."""
        if type(self).output_logits is not SrcFeatTransformerForConditionalGeneration.output_logits:
            return None
        decoder = self.get_decoder()
        if (type(decoder.layer_norm) not in (nn.LayerNorm, type(None))
                or not _is_baseline_target_embedding(decoder.embed_target)
                or not all(self.decoder_layer_restated(layer) for layer in decoder.layers)):
            return None
        return DecoderStep.for_model(self, self.decoder_layer_step)

    #: What restates one decoder layer in `decoder_step_as_tensor_operations`.
    decoder_layer_step: type[LayerStep] = LayerStep

    def decoder_layer_restated(self, layer: nn.Module) -> bool:
        """Whether `decoder_layer_step` restates decoder layer `layer`: exactly the baseline's layer here."""
        return type(layer) is SrcFeatDecoderLayer and has_baseline_sublayers(layer)

    def label_smoothed_loss(self, logits: torch.Tensor, labels: torch.Tensor,
                            num_items_in_batch: int | torch.Tensor | None = None) -> torch.Tensor:
        """Cross-entropy with label smoothing (Szegedy et al. 2016; Vaswani et al. use 0.1), per target token."""
        _check_labels_match(labels, logits)
        total = label_smoothed_cross_entropy(logits.float(), labels.to(logits.device), self.config.label_smoothing)
        return _per_token(total, labels, num_items_in_batch)

    def _loss_without_logits_applies(self, decoder_hidden_states: torch.Tensor) -> bool:
        """Whether `_label_smoothed_loss_without_logits` gives this model's loss: the baseline's output logits and
        loss (no method or caller replaced them, on the class or the instance), an output projection without a
        bias whose call is its product (no hooks, no replaced `forward`), gradients recorded, and the zoo's CPU
        kernels for the projection."""
        base = SrcFeatTransformerForConditionalGeneration
        return (onednn_applies(decoder_hidden_states, self.lm_head.weight) and torch.is_grad_enabled()
                and getattr(self.output_logits, "__func__", None) is base.output_logits
                and getattr(self.label_smoothed_loss, "__func__", None) is base.label_smoothed_loss
                and type(self.lm_head) is Linear and self.lm_head.bias is None
                and not runs_more_than_forward(self.lm_head))

    def _label_smoothed_loss_without_logits(self, decoder_hidden_states: torch.Tensor, labels: torch.Tensor,
                                            num_items_in_batch: int | torch.Tensor | None = None) -> torch.Tensor:
        """`label_smoothed_loss(output_logits(decoder_hidden_states), labels, ...)`, the projection and the loss
        computed together without keeping the logits."""
        _check_labels_match(labels, decoder_hidden_states)
        bias = (self.final_logits_bias.reshape(-1)
                if getattr(self.config, "final_logits_bias", False) else None)
        total = projected_label_smoothed_cross_entropy(decoder_hidden_states, self.lm_head.weight, bias, labels,
                                                       self.config.label_smoothing)
        return _per_token(total, labels, num_items_in_batch)

    def generate(self, *args, fast_decoding: bool | None = None, **kwargs):
        """`GenerationMixin.generate`. Greedy and beam search run through `hf_srcfeat.decoding`'s loops, which give
        the same token ids with less work, whenever the settings allow (see `reason_not_supported` there);
        `fast_decoding=False` runs Transformers' own loops instead (the default is the model's `fast_decoding`). A
        later call with the same settings (its input tensors aside) and an unchanged generation config reuses the
        configuration, processors and stopping criteria the first one prepared for the zoo's loop
        (`hf_srcfeat.generation_preparation`). A `custom_generate` loop gets what Transformers' generate gives it
        (its cache included), as with `fast_decoding=False`."""
        check_inputs_are_tensors({"inputs": args[0]} if args else {}, kwargs)
        if kwargs.get("custom_generate") is not None:
            fast_decoding = False
        if fast_decoding is None:
            return self._generate_reusing_preparations(args, kwargs)
        default, self.fast_decoding = self.fast_decoding, fast_decoding
        try:
            return self._generate_reusing_preparations(args, kwargs)
        finally:
            self.fast_decoding = default

    def _generate_reusing_preparations(self, args: tuple, kwargs: dict):
        """`GenerationMixin.generate(*args, **kwargs)`, where the zoo's loops run without the preparation of the call
        that an earlier call with the same settings made (`hf_srcfeat.generation_preparation`)."""
        if not args and self.fast_decoding:
            preparation = matching_preparation(self, kwargs)
            if preparation is not None:
                return preparation.generate(self, kwargs)
        with recording(self, kwargs) if not args else contextlib.nullcontext():
            return super().generate(*args, **kwargs)  # type: ignore[misc]  # GenerationMixin's self protocol

    def _prepare_cache_for_generation(self, generation_config, model_kwargs: dict, generation_mode, *args,
                                      **kwargs) -> None:
        # The zoo's loops keep their own caches (`hf_srcfeat.decoding.DecoderState`): the one made here would never be
        # read, and making it copies the model config twice per call. Should the loop still fall back to
        # Transformers' (for what only the loop's processors and criteria show), the decoder makes the same dynamic
        # cache at its first step. Other modes (assisted generation) and chunked prefill, which needs a cache before
        # the first step, get theirs.
        if (self.fast_decoding and generation_mode in (GenerationMode.GREEDY_SEARCH, GenerationMode.BEAM_SEARCH)
                and generation_config.cache_implementation is None and model_kwargs.get("past_key_values") is None
                and getattr(generation_config, "prefill_chunk_size", None) is None
                and reason_settings_not_supported(generation_config, model_kwargs) is None):
            return
        super()._prepare_cache_for_generation(  # type: ignore[misc]
            generation_config, model_kwargs, generation_mode, *args, **kwargs)

    def _sample(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                streamer=None, **model_kwargs):
        if self.fast_decoding and reason_not_supported(input_ids, logits_processor, stopping_criteria,
                                                       generation_config, model_kwargs, synced_gpus,
                                                       streamer) is None:
            record_loop(self, "_sample", generation_config, logits_processor, stopping_criteria, model_kwargs)
            return greedy_search(self, input_ids, logits_processor, stopping_criteria, generation_config,
                                 **model_kwargs)
        return super()._sample(input_ids, logits_processor, stopping_criteria, generation_config,  # type: ignore[misc]
                               synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)

    def _beam_search(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                     **model_kwargs):
        if self.fast_decoding and reason_not_supported(input_ids, logits_processor, stopping_criteria,
                                                       generation_config, model_kwargs, synced_gpus) is None:
            record_loop(self, "_beam_search", generation_config, logits_processor, stopping_criteria, model_kwargs)
            return beam_search(self, input_ids, logits_processor, stopping_criteria, generation_config,
                               **model_kwargs)
        return super()._beam_search(input_ids, logits_processor, stopping_criteria,  # type: ignore[misc]
                                    generation_config, synced_gpus=synced_gpus, **model_kwargs)

    def _validate_model_kwargs(self, model_kwargs: dict) -> None:
        # User factors (factor_<name>_ids) are keyword arguments the signature cannot list: the encoder reads them.
        super()._validate_model_kwargs({  # type: ignore[misc]  # GenerationMixin's self type is its own protocol
            key: value for key, value in model_kwargs.items() if not is_user_factor_feature(key)})

    def _maybe_prepare_encoder_kwargs_for_generation(self, inputs_tensor, model_kwargs, model_input_name,
                                                     generation_config):
        # Transformers 5.x hook that runs the encoder once before decoding. The source features are only
        # needed there: dropping them afterwards avoids beam-expanding [B*beams, S, S] tensors every step.
        model_kwargs = super()._maybe_prepare_encoder_kwargs_for_generation(
            inputs_tensor, model_kwargs, model_input_name, generation_config
        )
        for name in [*SOURCE_FEATURE_NAMES, *(key for key in model_kwargs if is_user_factor_feature(key))]:
            model_kwargs.pop(name, None)
        return model_kwargs


__all__ = [
    "SrcFeatTransformerPreTrainedModel",
    "SrcFeatTransformerModel",
    "SrcFeatTransformerForConditionalGeneration",
    "SrcFeatEncoder",
    "SrcFeatDecoder",
    "SrcFeatEncoderLayer",
    "SrcFeatDecoderLayer",
    "SrcFeatEncoderOutput",
    "EncoderLayerContext",
    "DecoderLayerContext",
]
