"""Source phrase representations (Xu et al., ACL 2020). What this adds to the baseline:

* a segmentation of each source sentence into phrases (n-gram or parse), batched as a `PhraseLayout`
  (each token's phrase: pooling is a per-token computation scattered into phrase slots);
* attentive phrase pooling (Eq. 2-5) of every encoder layer's input, and of the encoder output;
* an attentive combination sublayer (Eq. 7-8) that attends to phrase vectors: first in every encoder layer
  (phrases -> self-attention -> FFN), and between self- and cross-attention in every decoder layer;
* transparent attention (Eq. 6): decoder layer j reads a softmax-weighted sum of the phrase vectors of the
  embedding layer and of every encoder layer.

The per-layer phrase vectors travel from encoder to decoder as one tensor [batch, layers + 1, phrases, d_model]
with a phrase mask [batch, phrases], so `generate` expands them for beam search like the encoder states.
When generating, each decoder layer's phrase keys/values are computed once, like the source's: they live in the
cross-attention cache, in the slots after the decoder layers' own (`decoder_layers + layer_idx`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicLayer, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask

from .attention import SrcFeatAttention
from .closed_gates import ClosedGates
from .configuration_phrase_rep import PhraseRepConfig
from .decoder_step import LayerStep, layer_norm_function
from .linear import Linear, inference_product, products_of_concatenated_inputs
from .modeling_srcfeat_transformer import (
    DecoderLayerContext,
    EncoderLayerContext,
    ResidualSublayer,
    SrcFeatDecoder,
    SrcFeatDecoderLayer,
    SrcFeatEncoder,
    SrcFeatEncoderLayer,
    SrcFeatEncoderOutput,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
    has_baseline_sublayers,
)
from .source_features import SourceFeatures

# PyTorch marks `index_reduce` as beta, once per process; it is the row-wise maximum the layout needs (below), 3x
# faster than `scatter_reduce` through an expanded index, and its results and gradients are pinned by the tests.
warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta", category=UserWarning)


def ngram_phrase_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Footnote 2: phrase of every token when each sentence is cut into phrases of ntok = max(min(8, seq / 6), 3)
    consecutive tokens; -1 for padding. seq counts the sentence's tokens without its final `</s>`, as parse
    mode does (`</s>` still joins the last phrase). Padding-side independent. The rule is
    `parse_phrases.phrase_token_limit`, applied to every sentence of the batch in one tensor operation."""
    real = attention_mask.bool()
    positions = real.long().cumsum(-1) - 1
    words_length = real.sum(-1, keepdim=True) - 1  # without </s>
    phrase_length = (words_length // 6).clamp(min=3, max=8)
    return torch.where(real, positions // phrase_length, torch.full_like(positions, -1))


def _accumulation_dtype(values: torch.Tensor) -> torch.dtype:
    """float32 for half-precision values, which would lose their sums' low bits; otherwise the values' own."""
    return torch.float32 if values.dtype in (torch.float16, torch.bfloat16) else values.dtype


@dataclass
class PhraseLayout:
    """Which phrase each token belongs to. The phrases partition a sentence's real tokens, so pooling is a
    per-token computation followed by a scatter into phrase slots: linear in the number of tokens, with no
    [phrases, tokens-per-phrase] padding. Phrase p of sentence b is slot `p` of `num_phrases`. Pooling and spreading
    move whole rows of the flattened tensors (`index_add`, `index_select`, and on the CPU `index_reduce`): there 3-4x
    faster, forward and backward, than scattering or gathering element by element through an expanded index.
    Half-precision rows are summed in float32, in `sum` and in `spread`'s backward: a phrase's tokens then add up
    without rounding at every step, and torch.compile lowers a float32 `index_add` into its own fused kernels, while
    it leaves a bfloat16 one to ATen's CUDA kernel, whose atomic additions took a tenth of a phrase-representation
    training step at Transformer-base size on an H200."""

    token_mask: torch.Tensor  # [B, S]: the token belongs to a phrase
    phrase_sizes: torch.Tensor  # [B, P]: how many tokens each slot's phrase holds (0: no phrase)
    slot_rows: torch.Tensor  # [B * S]: the token's row among the B x P phrase rows, or row B x P if in no phrase
    phrase_rows: torch.Tensor  # [B * S]: the row among the B x P phrases each token reads (an arbitrary one if none)

    @classmethod
    def from_phrase_index(cls, phrase_index: torch.Tensor, num_phrases: int | None = None) -> PhraseLayout:
        """`phrase_index[b, s]`: the phrase of token s (0, 1, ...), or -1 for a token in no phrase. `num_phrases`:
        the slots; by default as many as the batch's phrases (a read back to the host), while a compiled model
        passes a bound from the shapes alone (S for parse phrases, ceil(S / 3) for n-grams) to keep one graph; a
        token whose phrase is at or beyond that bound belongs to no phrase, never to a row of another sentence."""
        if num_phrases is None:
            num_phrases = max(int(phrase_index.max()) + 1, 1)
        batch_size = phrase_index.shape[0]
        token_mask = (phrase_index >= 0) & (phrase_index < num_phrases)
        first_rows = torch.arange(batch_size, device=phrase_index.device)[:, None] * num_phrases
        slot_rows = torch.where(token_mask, phrase_index + first_rows, batch_size * num_phrases).reshape(-1)
        sizes = torch.zeros(batch_size * num_phrases + 1, dtype=torch.long, device=phrase_index.device)
        sizes.index_add_(0, slot_rows, token_mask.reshape(-1).long())
        return cls(token_mask=token_mask, phrase_sizes=sizes[:-1].view(batch_size, num_phrases), slot_rows=slot_rows,
                   phrase_rows=(torch.where(token_mask, phrase_index, num_phrases - 1) + first_rows).reshape(-1))

    @property
    def num_phrases(self) -> int:
        return self.phrase_sizes.shape[1]

    @property
    def phrase_mask(self) -> torch.Tensor:
        """[B, P]: the slot holds a phrase."""
        return self.phrase_sizes > 0

    def _slots(self, rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """[B * P + 1, ...] rows back to [B, P, ...], the no-phrase row dropped: a contiguous view, so the phrase
        vectors flatten back into rows without a copy."""
        return rows[:-1].view(values.shape[0], self.num_phrases, *values.shape[2:])

    def _empty_slot_rows(self, values: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        return values.new_zeros(values.shape[0] * self.num_phrases + 1, *values.shape[2:], dtype=dtype)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """[B, S, ...] per token -> [B, P, ...] summed over each phrase's tokens (0 for an empty slot)."""
        flat = values.flatten(0, 1).to(_accumulation_dtype(values))
        rows = self._empty_slot_rows(values, flat.dtype).index_add(0, self.slot_rows, flat)
        return self._slots(rows.to(values.dtype), values)

    def max(self, values: torch.Tensor) -> torch.Tensor:
        """[B, S, ...] per token -> [B, P, ...] maximum over each phrase's tokens (0 for an empty slot)."""
        flat = values.flatten(0, 1)
        if values.device.type == "cpu":
            rows = self._empty_slot_rows(values).index_reduce(0, self.slot_rows, flat, "amax", include_self=False)
        else:  # CUDA's index_reduce is refused under torch.use_deterministic_algorithms; scatter_reduce's amax is not
            index = self.slot_rows.view(-1, *(1,) * (flat.dim() - 1)).expand_as(flat)
            rows = self._empty_slot_rows(values).scatter_reduce(0, index, flat, "amax", include_self=False)
        return self._slots(rows, values)

    def spread(self, phrase_values: torch.Tensor) -> torch.Tensor:
        """[B, P, ...] per phrase -> [B, S, ...]: each token gets its phrase's value (arbitrary outside phrases)."""
        flat = phrase_values.flatten(0, 1).to(_accumulation_dtype(phrase_values))  # its backward sums rows
        rows = flat.index_select(0, self.phrase_rows).to(phrase_values.dtype)
        return rows.view(*self.token_mask.shape, *phrase_values.shape[2:])


class AttentivePhrasePooling(nn.Module):
    """R_phrase = sum_i p_i R_ti (Eq. 2-5), or F_glance alone without "+Attn"."""

    def __init__(self, config: PhraseRepConfig):
        super().__init__()
        self.glance = config.phrase_glance
        self.attentive = config.phrase_attentive
        if self.attentive:
            self.hidden = Linear(2 * config.d_model, config.phrase_pooling_size)  # W_1, b_1
            self.score = Linear(config.phrase_pooling_size, 1)  # W_2, b_2

    def forward(self, hidden_states: torch.Tensor, layout: PhraseLayout
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Phrase vectors [B, P, D] and each token's weight p_i in its phrase [B, S] (0 outside phrases; None
        without "+Attn")."""
        if self.glance == "mean":  # Eq. (2), element-wise mean over the phrase's real tokens
            summary = layout.sum(hidden_states) / layout.phrase_sizes.clamp(min=1)[..., None]
        else:  # Eq. (2), max-over-time pooling over the phrase's real tokens
            summary = layout.max(hidden_states)
        if not self.attentive:
            return summary, None
        hidden = self._glance_conditioned(hidden_states, summary, layout)
        # The widest activations of the model (12 d_model per token by default): in inference they are overwritten
        # in place, saving a second tensor's allocation and a pass through memory.
        hidden = torch.sigmoid(hidden) if torch.is_grad_enabled() else hidden.sigmoid_()
        scores = self.score(hidden)  # Eq. (3)
        scores = scores.squeeze(-1).float()
        # Eq. (4), a softmax within each phrase; the shift by the phrase's maximum only keeps exp finite
        shift = layout.spread(layout.max(scores.detach()))
        exponentials = torch.exp(scores - shift) * layout.token_mask
        weights = exponentials / layout.spread(layout.sum(exponentials)).clamp(min=torch.finfo(scores.dtype).tiny)
        weights = weights.to(hidden_states.dtype)
        return layout.sum(weights[..., None] * hidden_states), weights  # Eq. (5)

    def _glance_conditioned(self, hidden_states: torch.Tensor, summary: torch.Tensor, layout: PhraseLayout
                            ) -> torch.Tensor:
        """W_1 [R_ti | R_all] + b_1 of Eq. (3) for every token: W_1's columns over the glance R_all multiply it once
        per phrase, and each token adds its phrase's product, rather than the glance spread to every token and
        multiplied there (a third of the pooling's products for phrases of three tokens)."""
        products = products_of_concatenated_inputs(self.hidden, [hidden_states, summary])
        if products is None:  # the layer's call is more than its product: call it on the concatenation
            return self.hidden(torch.cat([hidden_states, layout.spread(summary)], -1))
        token_products, phrase_products = products
        if torch.is_grad_enabled():
            return token_products + layout.spread(phrase_products)
        return token_products.add_(layout.spread(phrase_products))  # a fresh product: written over in inference


class AttentiveCombination(nn.Module):
    """out = W_4 sigmoid(W_3 [x | Attn_MH(x, R_phrase)] + b_3) + b_4 (Eq. 7-8); the residual connection and
    layer normalisation around it are the caller's `ResidualSublayer`."""

    def __init__(self, config: PhraseRepConfig, num_heads: int, cache_slot: int | None = None):
        super().__init__()
        self.config = config
        # cache_slot: where a decoder layer keeps its phrase keys/values in the cross-attention cache.
        self.attention = SrcFeatAttention(config, num_heads, is_cross_attention=True, layer_idx=cache_slot)
        self.hidden = Linear(2 * config.d_model, config.phrase_combination_size)  # W_3, b_3
        self.output = Linear(config.phrase_combination_size, config.d_model)  # W_4, b_4

    def forward(self, hidden_states: torch.Tensor, phrases: torch.Tensor, phrase_mask: torch.Tensor,
                past_key_values: EncoderDecoderCache | None = None, output_attentions: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                         attention_mask=phrase_mask.long(), encoder_hidden_states=phrases)
        attended, weights = self.attention(hidden_states, key_value_states=phrases, attention_mask=mask,
                                           past_key_values=past_key_values,
                                           output_attentions=output_attentions)  # Eq. (7)
        combined = self.output(torch.sigmoid(self.hidden(torch.cat([hidden_states, attended], -1))))  # Eq. (8)
        return combined, weights


@dataclass
class PhraseEncoderLayerContext(EncoderLayerContext):
    """The segmentation (shared by all layers) and, once the layer ran, the phrase vectors of its input."""

    layout: PhraseLayout | None = None
    phrases: torch.Tensor | None = None


@dataclass
class PhraseRepEncoderOutput(SrcFeatEncoderOutput):
    """Adds the phrase vectors of the embedding layer, of every encoder layer's input and of the encoder output,
    stacked as [batch, encoder_layers + 1, phrases, d_model], and which phrases are real [batch, phrases]."""

    phrase_representations: torch.Tensor | None = None
    phrase_mask: torch.Tensor | None = None


class PhraseRepEncoderLayer(SrcFeatEncoderLayer):
    """cross-attention to the phrases of the layer input -> self-attention -> feed-forward."""

    def __init__(self, config: PhraseRepConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.phrase_pooling = AttentivePhrasePooling(config)
        self.phrase_combination = AttentiveCombination(config, config.encoder_attention_heads)
        self.phrase_sublayer = ResidualSublayer(config)
        self.phrase_gate = ClosedGates(1) if config.graft_gates else None

    def before_self_attention(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                              context: PhraseEncoderLayerContext) -> torch.Tensor:
        layout = context.layout
        assert layout is not None  # set by the encoder's layer_contexts for every layer

        def attend_to_phrases(layer_input: torch.Tensor) -> torch.Tensor:
            context.phrases, _ = self.phrase_pooling(layer_input, layout)
            return self.phrase_combination(layer_input, context.phrases, layout.phrase_mask)[0]

        output = self.phrase_sublayer(hidden_states, attend_to_phrases)[0]
        return output if self.phrase_gate is None else self.phrase_gate.mix(0, hidden_states, output)


class PhraseRepEncoder(SrcFeatEncoder):
    layer_class = PhraseRepEncoderLayer
    context_class = PhraseEncoderLayerContext
    output_class = PhraseRepEncoderOutput

    def __init__(self, config: PhraseRepConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens)
        self.output_phrase_pooling = AttentivePhrasePooling(config)  # R^L, from the encoder output

    def phrase_index(self, features: SourceFeatures, attention_mask: torch.Tensor | None,
                     embeddings: torch.Tensor) -> torch.Tensor:
        if self.config.phrase_segmentation == "parse":
            phrase_ids = features.require("phrase_ids", "Phrase representations with parse phrases")
            if attention_mask is not None:
                phrase_ids = phrase_ids.masked_fill(attention_mask == 0, -1)
            return phrase_ids
        if attention_mask is None:
            attention_mask = torch.ones(embeddings.shape[:2], dtype=torch.long, device=embeddings.device)
        return ngram_phrase_index(attention_mask)

    def layer_contexts(self, input_ids, embeddings, features, attention_mask) -> list[PhraseEncoderLayerContext]:
        phrase_index = self.phrase_index(features, attention_mask, embeddings)
        num_phrases = None
        if torch.compiler.is_compiling():
            # Slots bounded by the shapes alone keep one graph (a sentence has at most one parse phrase per token,
            # and n-gram phrases hold at least 3 tokens); eager mode sizes them by the batch's phrases.
            seq_len = phrase_index.shape[1]
            num_phrases = seq_len if self.config.phrase_segmentation == "parse" else -(-seq_len // 3)
        layout = PhraseLayout.from_phrase_index(phrase_index, num_phrases)
        contexts = cast(list[PhraseEncoderLayerContext],  # built from this encoder's context_class
                        super().layer_contexts(input_ids, embeddings, features, attention_mask))
        for context in contexts:
            context.layout = layout
        return contexts

    def build_output(self, last_hidden_state, hidden_states, attentions, contexts, features,
                     attention_mask) -> PhraseRepEncoderOutput:
        layout = contexts[0].layout
        final_phrases, _ = self.output_phrase_pooling(last_hidden_state, layout)
        stacked = torch.stack([context.phrases for context in contexts] + [final_phrases], dim=1)
        return self.output_class(last_hidden_state=last_hidden_state, hidden_states=hidden_states,
                                 attentions=attentions, phrase_representations=stacked,
                                 phrase_mask=layout.phrase_mask)


@dataclass
class PhraseDecoderLayerContext(DecoderLayerContext):
    phrases: torch.Tensor | None = None  # R_d^j [B, P, D]
    phrase_mask: torch.Tensor | None = None  # [B, P]


class PhraseRepDecoderLayer(SrcFeatDecoderLayer):
    """self-attention -> cross-attention to source phrases -> cross-attention to source tokens -> FFN."""

    def __init__(self, config: PhraseRepConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.phrase_cache_slot = config.decoder_layers + layer_idx
        self.phrase_combination = AttentiveCombination(config, config.decoder_attention_heads,
                                                       cache_slot=self.phrase_cache_slot)
        self.phrase_sublayer = ResidualSublayer(config)
        self.phrase_gate = ClosedGates(1) if config.graft_gates else None

    def before_cross_attention(self, hidden_states: torch.Tensor, context: PhraseDecoderLayerContext,
                               past_key_values: Cache | None = None) -> torch.Tensor:
        cache = past_key_values if isinstance(past_key_values, EncoderDecoderCache) else None
        if cache is not None:
            reserve_cache_layers(cache.cross_attention_cache, self.phrase_cache_slot + 1)
        output = self.phrase_sublayer(
            hidden_states, lambda x: self.phrase_combination(x, context.phrases, context.phrase_mask, cache)[0])[0]
        return output if self.phrase_gate is None else self.phrase_gate.mix(0, hidden_states, output)


def reserve_cache_layers(cache: Cache, count: int) -> None:
    """A cache built from the config holds one layer per decoder layer; the phrase slots come after them."""
    while len(cache.layers) < count:
        cache.layers.append(DynamicLayer())


class TransparentAttention(nn.Module):
    """Eq. (6): w^j = softmax over the encoder's L + 1 phrase layers, one learned vector per decoder layer."""

    def __init__(self, config: PhraseRepConfig):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(config.decoder_layers, config.encoder_layers + 1))

    def initialize_parameters(self) -> None:
        init.zeros_(self.logits)  # equal weights at the start

    def weights(self) -> torch.Tensor:
        return self.logits.softmax(-1)

    def forward(self, phrase_representations: torch.Tensor) -> torch.Tensor:
        """[B, L + 1, P, D] -> [decoder_layers, B, P, D]: R_d^j = sum_i w_i^j R_e^i."""
        return torch.einsum("jl,blpd->jbpd", self.weights().to(phrase_representations.dtype),
                            phrase_representations)


class PhraseRepDecoder(SrcFeatDecoder):
    layer_class = PhraseRepDecoderLayer

    def __init__(self, config: PhraseRepConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens)
        self.transparent_attention = TransparentAttention(config) if config.transparent_attention else None

    def layer_contexts(self, encoder_outputs: PhraseRepEncoderOutput | None,
                       encoder_attention_mask: torch.Tensor | None) -> list[PhraseDecoderLayerContext]:
        representations = getattr(encoder_outputs, "phrase_representations", None)
        if encoder_outputs is None or representations is None:
            raise ValueError("The phrase-representation decoder needs the encoder's `phrase_representations`; "
                             "pass the full encoder output (`encoder_outputs=model.get_encoder()(...)`).")
        mask = encoder_outputs.phrase_mask
        if self.transparent_attention is not None:
            per_layer = list(self.transparent_attention(representations))
        else:
            per_layer = [representations[:, -1]] * len(self.layers)  # the last encoder layer's phrases
        return [PhraseDecoderLayerContext(phrases=phrases, phrase_mask=mask) for phrases in per_layer]


class PhraseLayerStep(LayerStep):
    """`PhraseRepDecoderLayer`'s step as tensor operations (`hf_srcfeat.decoder_step`): the baseline's, with the
    attentive combination over the layer's phrase vectors (Eq. 7-8) before cross-attention."""

    @classmethod
    def products(cls, layer: PhraseRepDecoderLayer) -> list[nn.Module]:
        attention = layer.phrase_combination.attention
        return super().products(layer) + [attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj,
                                          layer.phrase_combination.hidden, layer.phrase_combination.output]

    def __init__(self, layer: PhraseRepDecoderLayer, rows: int):
        super().__init__(layer, rows)
        combination = layer.phrase_combination
        self.config = combination.config
        self.phrase_slot = layer.phrase_cache_slot
        self.phrase_attention = combination.attention
        self.phrase_query = inference_product(combination.attention.q_proj, rows)
        self.phrase_output = inference_product(combination.attention.out_proj, rows)
        self.phrase_scaling = combination.attention.scaling
        self.combination_hidden = inference_product(combination.hidden, rows)  # W_3, b_3
        self.combination_output = inference_product(combination.output, rows)  # W_4, b_4
        self.phrase_norm = layer_norm_function(layer.phrase_sublayer.layer_norm)
        self.phrase_gate = layer.phrase_gate
        # The attention mask of the phrase mask it was made from: the same until rows leave the batch.
        self.phrase_attention_mask: tuple[torch.Tensor | None, Any] = (None, None)

    def attention_mask(self, phrase_mask: torch.Tensor, hidden_states: torch.Tensor,
                       phrases: torch.Tensor) -> torch.Tensor | None:
        """The mask `AttentiveCombination` builds from `phrase_mask` for one query position."""
        made_from, mask = self.phrase_attention_mask
        if made_from is not phrase_mask:
            mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states[:, None],
                                             attention_mask=phrase_mask.long(), encoder_hidden_states=phrases)
            self.phrase_attention_mask = phrase_mask, mask
        return mask if isinstance(mask, torch.Tensor) else None

    def before_cross_attention(self, hidden_states: torch.Tensor, state) -> torch.Tensor:
        context = cast(PhraseDecoderLayerContext, state.contexts[self.index])
        phrases, phrase_mask = context.phrases, context.phrase_mask
        assert phrases is not None and phrase_mask is not None  # the decoder's layer_contexts sets both
        keys, values = self.memory_keys_and_values(state, self.phrase_slot, self.phrase_attention, phrases)
        mask = self.attention_mask(phrase_mask, hidden_states, phrases)

        def attentive_combination(inputs: torch.Tensor) -> torch.Tensor:
            attended = self.attend(inputs, self.phrase_query, self.phrase_output, keys, values, mask,
                                   self.phrase_scaling)  # Eq. (7)
            return self.combination_output(torch.sigmoid(self.combination_hidden(
                torch.cat([inputs, attended], -1))))  # Eq. (8)

        output = self.residual(hidden_states, self.phrase_norm, attentive_combination)
        return output if self.phrase_gate is None else self.phrase_gate.mix(0, hidden_states, output)


class PhraseRepModel(SrcFeatTransformerModel):
    config_class = PhraseRepConfig
    encoder_class = PhraseRepEncoder
    decoder_class = PhraseRepDecoder


class PhraseRepForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    config_class = PhraseRepConfig
    model_class = PhraseRepModel
    decoder_layer_step = PhraseLayerStep

    def decoder_layer_restated(self, layer: nn.Module) -> bool:
        """Whether `PhraseLayerStep` restates `layer`: exactly this method's decoder layer, with the baseline's
        sublayers and its own attentive combination."""
        if type(layer) is not PhraseRepDecoderLayer or not has_baseline_sublayers(layer):
            return False
        combination, sublayer = layer.phrase_combination, layer.phrase_sublayer
        return (type(combination) is AttentiveCombination and type(combination.attention) is SrcFeatAttention
                and type(sublayer) is ResidualSublayer and type(sublayer.layer_norm) is nn.LayerNorm
                and type(layer.phrase_gate) in (ClosedGates, type(None)))


__all__ = ["PhraseRepForConditionalGeneration", "PhraseRepModel", "PhraseLayout", "ngram_phrase_index"]
