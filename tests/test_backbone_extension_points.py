"""The backbone's extension points, each exercised by a miniature method built the way the zoo's methods are.

* score modification: per-head scale/bias of encoder self-attention scores, batch x head layout;
* extra decoder sublayer reading a stacked extra encoder output, beam-expanded by generate;
* auxiliary encoder whose per-layer outputs feed the main encoder's layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from hf_srcfeat import (
    DecoderLayerContext,
    EncoderLayerContext,
    ScoreModification,
    SrcFeatAttention,
    SrcFeatDecoder,
    SrcFeatDecoderLayer,
    SrcFeatEncoder,
    SrcFeatEncoderLayer,
    SrcFeatEncoderOutput,
    SrcFeatTransformerForConditionalGeneration,
    SrcFeatTransformerModel,
)

from .helpers import masked_softmax, random_model, train_briefly, unmodified_scores

# ---------------------------------------------------------------- score modification (Deps-SAN style)
SCALED_HEADS = [1, 3]


class DistanceScaledEncoder(SrcFeatEncoder):
    """Layer 0 scales (or biases) heads 1 and 3 by a per-sentence matrix given as `dep_distance`."""

    mode = "mult"

    def layer_contexts(self, input_ids, embeddings, features, attention_mask):
        contexts = super().layer_contexts(input_ids, embeddings, features, attention_mask)
        values = features.dep_distance.float()
        contexts[0].score_modification = ScoreModification.on_heads(
            values, self.config.encoder_attention_heads, SCALED_HEADS, self.mode)
        return contexts


class DistanceBiasedEncoder(DistanceScaledEncoder):
    mode = "add"


def model_with_encoder(encoder_class, config):
    model_class = type("Model", (SrcFeatTransformerModel,), {"encoder_class": encoder_class})
    lm_class = type("ForCG", (SrcFeatTransformerForConditionalGeneration,), {"model_class": model_class})
    return random_model(lm_class, config)


@pytest.mark.parametrize(("encoder_class", "combine"), [
    (DistanceScaledEncoder, lambda scores, values: scores * values),
    (DistanceBiasedEncoder, lambda scores, values: scores + values),
])
def test_score_modification_changes_exactly_the_chosen_heads_of_each_sentence(
    tiny_config, subword_tokenizer, test_sentences, encoder_class, combine
):
    model = model_with_encoder(encoder_class, tiny_config())
    batch = subword_tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    batch_size, length = batch["input_ids"].shape
    torch.manual_seed(1)
    # A different matrix for every sentence, so a batch/head mix-up cannot go unnoticed.
    batch["dep_distance"] = torch.randint(0, 6, (batch_size, length, length))
    scores, attentions = unmodified_scores(model, batch)

    values, mask = batch["dep_distance"].float(), batch["attention_mask"]
    for head in range(4):
        expected = combine(scores[0][:, head], values) if head in SCALED_HEADS else scores[0][:, head]
        torch.testing.assert_close(attentions[0][:, head], masked_softmax(expected, mask))
        # Layer 1 is not modified.
        torch.testing.assert_close(attentions[1][:, head], masked_softmax(scores[1][:, head], mask))
    # Padding receives no attention mass.
    assert (attentions[0] * (mask[:, None, None, :] == 0)).sum() == 0


def test_additive_score_bias_gives_the_same_output_with_sdpa_and_eager(tiny_config, subword_tokenizer,
                                                                        test_sentences):
    batch = subword_tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    length = batch["input_ids"].shape[1]
    batch["dep_distance"] = torch.randint(0, 6, (3, length, length))
    outputs = {}
    for implementation in ("eager", "sdpa"):
        config = tiny_config()
        config._attn_implementation = implementation
        outputs[implementation] = model_with_encoder(DistanceBiasedEncoder, config).get_encoder()(**batch)
    torch.testing.assert_close(outputs["eager"].last_hidden_state, outputs["sdpa"].last_hidden_state,
                               atol=1e-4, rtol=1e-4)


def test_on_heads_rejects_unknown_modes_and_wrong_shapes():
    with pytest.raises(ValueError, match="mode"):
        ScoreModification.on_heads(torch.ones(1, 2, 2), 4, None, "divide")
    with pytest.raises(ValueError, match="batch, query, key"):
        ScoreModification.on_heads(torch.ones(2, 2), 4, None, "mult")


# ---------------------------------------------------------------- extra sublayer + stacked encoder output
@dataclass
class SummaryEncoderOutput(SrcFeatEncoderOutput):
    summary: torch.FloatTensor | None = None  # [B, 2, D]: mean and max of the real source states
    summary_mask: torch.LongTensor | None = None  # [B, 2]


class SummaryEncoder(SrcFeatEncoder):
    output_class = SummaryEncoderOutput

    def build_output(self, last_hidden_state, hidden_states, attentions, contexts, features, attention_mask):
        mask = attention_mask[..., None].bool()
        mean = (last_hidden_state * mask).sum(1) / mask.sum(1)
        maximum = last_hidden_state.masked_fill(~mask, float("-inf")).amax(1)
        summary = torch.stack([mean, maximum], dim=1)
        return self.output_class(last_hidden_state=last_hidden_state, hidden_states=hidden_states,
                                 attentions=attentions, summary=summary,
                                 summary_mask=torch.ones(summary.shape[:2], dtype=torch.long))


@dataclass
class SummaryContext(DecoderLayerContext):
    summary: torch.Tensor | None = None


class SummaryDecoderLayer(SrcFeatDecoderLayer):
    """self-attention -> attention to the summary memory -> cross-attention -> FFN."""

    seen_batch_sizes: list[tuple[int, int]] = []

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.summary_attn = SrcFeatAttention(config, config.decoder_attention_heads)
        self.summary_sublayer = type(self.encoder_attn_sublayer)(config)

    def before_cross_attention(self, hidden_states, context, past_key_values=None):
        self.seen_batch_sizes.append((hidden_states.shape[0], context.summary.shape[0]))
        hidden_states, _ = self.summary_sublayer(
            hidden_states, lambda x: self.summary_attn(x, key_value_states=context.summary))
        return hidden_states


class SummaryDecoder(SrcFeatDecoder):
    layer_class = SummaryDecoderLayer

    def layer_contexts(self, encoder_outputs, encoder_attention_mask):
        return [SummaryContext(summary=encoder_outputs.summary) for _ in self.layers]


class SummaryModel(SrcFeatTransformerModel):
    encoder_class = SummaryEncoder
    decoder_class = SummaryDecoder


class SummaryForConditionalGeneration(SrcFeatTransformerForConditionalGeneration):
    model_class = SummaryModel


@pytest.fixture(scope="module")
def trained_summary_model(tiny_config_module, subword_tokenizer, train_pairs):
    torch.manual_seed(0)
    model = SummaryForConditionalGeneration(tiny_config_module)
    train_briefly(model, subword_tokenizer, train_pairs, steps=150)
    model.generation_config.max_new_tokens = 20
    return model


@pytest.fixture(scope="module")
def tiny_config_module(subword_tokenizer):
    from hf_srcfeat import SrcFeatTransformerConfig

    return SrcFeatTransformerConfig(
        vocab_size=len(subword_tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
    )


@pytest.mark.slow
def test_extra_encoder_outputs_are_beam_expanded_and_padded_batch_equals_single(
    trained_summary_model, subword_tokenizer, test_sentences
):
    model = trained_summary_model
    batch = subword_tokenizer(test_sentences[:5], padding=True, return_tensors="pt")
    SummaryDecoderLayer.seen_batch_sizes.clear()
    together = model.generate(**batch, num_beams=4)
    # The summary reached every decoder layer with the rows decoded: one per sentence at the first step (every beam
    # starts from the same prompt), then the beam-expanded batch, from which finished sentences leave with their beams.
    layers = model.config.decoder_layers
    assert SummaryDecoderLayer.seen_batch_sizes[:layers] == [(5, 5)] * layers
    assert SummaryDecoderLayer.seen_batch_sizes[layers:2 * layers] == [(20, 20)] * layers
    assert all(rows == summary_rows and rows % 4 == 0
               for rows, summary_rows in SummaryDecoderLayer.seen_batch_sizes[layers:])
    for index, sentence in enumerate(test_sentences[:5]):
        alone = model.generate(**subword_tokenizer([sentence], return_tensors="pt"), num_beams=4)
        assert subword_tokenizer.decode(alone[0], skip_special_tokens=True) == \
            subword_tokenizer.decode(together[index], skip_special_tokens=True)
    uncached = model.generate(**batch, num_beams=4, use_cache=False)
    assert torch.equal(together, uncached)


# ---------------------------------------------------------------- auxiliary encoder feeding encoder layers
@dataclass
class FeedbackContext(EncoderLayerContext):
    feedback: torch.Tensor | None = None


class FeedbackEncoderLayer(SrcFeatEncoderLayer):
    def self_attention_input(self, hidden_states, context):
        return hidden_states + context.feedback


class FeedbackEncoder(SrcFeatEncoder):
    """Layer i attends over x + (output of auxiliary layer i); the residual still adds x."""

    layer_class = FeedbackEncoderLayer

    def __init__(self, config, embed_tokens):
        super().__init__(config, embed_tokens)
        self.auxiliary = SrcFeatEncoder(config, nn.Embedding(config.vocab_size, config.d_model))

    def layer_contexts(self, input_ids, embeddings, features, attention_mask):
        auxiliary = self.auxiliary(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return [FeedbackContext(feedback=states) for states in auxiliary.hidden_states[1:]]


def test_auxiliary_encoder_layers_feed_the_matching_encoder_layers(tiny_config, subword_tokenizer,
                                                                    test_sentences):
    model = model_with_encoder(FeedbackEncoder, tiny_config())
    encoder = model.get_encoder()
    batch = subword_tokenizer(test_sentences[:2], padding=True, return_tensors="pt")
    seen = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
             for layer in encoder.layers]
    layer_inputs = []
    hooks += [layer.register_forward_pre_hook(lambda m, args: layer_inputs.append(args[0]))
              for layer in encoder.layers]
    encoder(**batch)
    for hook in hooks:
        hook.remove()
    auxiliary = encoder.auxiliary(**batch, output_hidden_states=True).hidden_states
    for index in range(len(encoder.layers)):
        torch.testing.assert_close(seen[index], layer_inputs[index] + auxiliary[index + 1])

    labels = subword_tokenizer(text_target=test_sentences[2:4], padding=True, return_tensors="pt")["input_ids"]
    model.train()
    model(**batch, labels=labels).loss.backward()
    assert encoder.auxiliary.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
