"""Source phrase representations (Xu et al. 2020): segmentation (footnote 2, Algorithm 1 phrases), attentive
phrase pooling (Eq. 2-5), attentive combination (Eq. 7-8), transparent attention (Eq. 6) and the new layer
orders, pinned on a tiny model over real sentences; then the model end to end."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_srcfeat import PhraseRepConfig, PhraseRepForConditionalGeneration
from hf_srcfeat.modeling_phrase_rep import PhraseLayout, ngram_phrase_index
from hf_srcfeat.parse_phrases import phrase_token_limit
from hf_srcfeat.source_features import SourceFeatures

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text
from .helpers import random_model


@pytest.fixture
def phrase_config(feature_tokenizer):
    def make(variant: str = "max_attn_ta", **overrides) -> PhraseRepConfig:
        arguments = dict(vocab_size=len(feature_tokenizer), d_model=16, encoder_layers=2, decoder_layers=3,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                         decoder_ffn_dim=32, dropout=0.0)
        arguments.update(overrides)
        return PhraseRepConfig.from_variant(variant, **arguments)

    return make


@pytest.fixture(scope="module")
def parsed_batch(feature_tokenizer, test_sentences):
    """Three real sentences of different lengths (11, 31 and 18 tokens), right-padded."""
    batch = feature_tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    return batch


def test_ngram_phrases_have_max_min_8_seq_over_6_3_tokens_and_a_shorter_last_phrase():
    # length counts </s>; seq does not (the rule parse mode uses): 24 tokens are seq 23 -> 3 tokens per phrase
    for length, phrase_length in [(5, 3), (20, 3), (24, 3), (25, 4), (37, 6), (49, 8), (60, 8), (100, 8)]:
        mask = torch.ones(1, length, dtype=torch.long)
        index = ngram_phrase_index(mask)[0].tolist()
        assert index == [position // phrase_length for position in range(length)], length
    # Padding (either side) belongs to no phrase and does not shift the phrases.
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    assert ngram_phrase_index(mask).tolist() == [[-1, -1, 0, 0, 0, 1], [0, 0, 0, 1, -1, -1]]


def test_the_layout_scatters_each_token_into_its_phrase_s_slot_and_leaves_the_rest_out():
    phrase_index = torch.tensor([[0, 0, 1, 1, 1, -1], [0, 1, 1, 2, -1, -1]])
    layout = PhraseLayout.from_phrase_index(phrase_index)
    assert layout.phrase_mask.tolist() == [[True, True, False], [True, True, True]]
    values = torch.tensor([[1., 2., 3., 4., 5., 100.], [6., 7., 8., 9., 100., 100.]])
    assert layout.sum(values).tolist() == [[3., 12., 0.], [6., 15., 9.]]
    assert layout.max(values).tolist() == [[2., 5., 0.], [6., 8., 9.]]
    assert layout.sum(values[..., None].expand(2, 6, 4)).shape == (2, 3, 4)
    assert layout.sum(values).is_contiguous() and layout.max(values).is_contiguous()  # phrase rows, no copy
    spread = layout.spread(torch.tensor([[10., 20., 30.], [40., 50., 60.]]))
    assert spread[layout.token_mask].tolist() == [10., 10., 20., 20., 20., 40., 50., 50., 60.]


def test_the_layout_sums_half_precision_rows_in_float32_forward_and_backward():
    # Every row addition (the sum, and the spread's backward) runs in float32: no rounding between a phrase's tokens,
    # and a kind of index_add torch.compile fuses instead of leaving to ATen's slow bfloat16 CUDA kernel. The recorded
    # dtypes are the check: on the CPU, ATen's bfloat16 index_add happens to round as the float32 sum does.
    torch.manual_seed(0)
    index = ngram_phrase_index(torch.ones(2, 40, dtype=torch.long))
    layout = PhraseLayout.from_phrase_index(index)
    values = (torch.randn(2, 40, 8) * 100).bfloat16().requires_grad_()
    phrase_values = torch.randn(2, layout.num_phrases, 8).bfloat16().requires_grad_()
    with _RecordedIndexAdds() as recorded:
        summed = layout.sum(values)
        spread = layout.spread(phrase_values)
        torch.autograd.backward([summed, spread], [torch.ones_like(summed), torch.randn_like(spread)])
    assert recorded.dtypes == [torch.float32, torch.float32]
    assert summed.dtype == spread.dtype == phrase_values.grad.dtype == torch.bfloat16
    assert torch.equal(summed, layout.sum(values.detach().float()).bfloat16())


class _RecordedIndexAdds(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.index_add, torch.ops.aten.index_add_):
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def test_a_layout_with_slots_bounded_by_the_shapes_holds_the_same_phrases_and_empty_extra_slots():
    # What a compiled model uses (no read-back of the phrase count): S slots for parse phrases, ceil(S / 3) for
    # n-grams (at least 3 tokens each).
    torch.manual_seed(0)
    for trial in range(30):
        seq_len = int(torch.randint(2, 70, ()))
        lengths = torch.randint(1, seq_len + 1, (3,))
        positions = torch.arange(seq_len)
        mask = (positions < lengths[:, None]) if trial % 2 else (positions >= seq_len - lengths[:, None])
        index = ngram_phrase_index(mask.long())
        compact = PhraseLayout.from_phrase_index(index)
        values = torch.randn(3, seq_len, 5)
        for bound in (seq_len, -(-seq_len // 3)):
            bounded = PhraseLayout.from_phrase_index(index, num_phrases=bound)
            phrases = compact.num_phrases
            assert torch.equal(bounded.phrase_mask[:, :phrases], compact.phrase_mask)
            assert not bounded.phrase_mask[:, phrases:].any()
            assert torch.equal(bounded.max(values)[:, :phrases], compact.max(values))
            torch.testing.assert_close(bounded.sum(values)[:, :phrases], compact.sum(values))
    # A phrase at the bound (more phrases than the shapes allow: malformed input) stays out of the next sentence.
    bounded = PhraseLayout.from_phrase_index(torch.tensor([[0, 1, 2, -1], [0, 0, 1, -1]]), num_phrases=2)
    values = torch.tensor([[1., 2., 50., 100.], [3., 4., 5., 100.]])
    assert bounded.sum(values).tolist() == [[1., 2.], [7., 5.]]
    assert bounded.max(values).tolist() == [[1., 2.], [4., 5.]]


def test_parse_phrases_come_from_the_tokenizer_and_leave_special_tokens_out(phrase_config, parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config("max_attn_ta_parse"))
    features = SourceFeatures(phrase_ids=parsed_batch["phrase_ids"])
    index = model.get_encoder().phrase_index(features, parsed_batch["attention_mask"], None)
    assert torch.equal(index, parsed_batch["phrase_ids"])
    eos = int(parsed_batch["attention_mask"][0].sum()) - 1
    assert index[0, eos] == -1
    with pytest.warns(UserWarning, match="no parse"):  # at inference: the feature's default
        model.get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])
    with pytest.raises(ValueError, match="parse phrases needs `phrase_ids`"):  # in training: an error
        model.train().get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])


def _token_vectors(batch, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    vectors = torch.randn(*batch["input_ids"].shape, 16)
    return vectors.masked_fill(batch["attention_mask"][..., None] == 0, 1e4)  # padding must not leak in


@pytest.mark.parametrize("glance", ["mean", "max"])
def test_glance_pooling_reads_only_the_phrase_s_real_tokens(phrase_config, parsed_batch, glance):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config(glance))
    pooling = model.get_encoder().layers[0].phrase_pooling
    vectors = _token_vectors(parsed_batch)
    index = ngram_phrase_index(parsed_batch["attention_mask"])
    phrases, weights = pooling(vectors, PhraseLayout.from_phrase_index(index))
    assert weights is None
    for sentence in range(3):
        for phrase in range(int(index[sentence].max()) + 1):
            members = vectors[sentence, index[sentence] == phrase]
            expected = members.mean(0) if glance == "mean" else members.amax(0)
            torch.testing.assert_close(phrases[sentence, phrase], expected)
        assert (phrases[sentence, int(index[sentence].max()) + 1:] == 0).all(), "padding phrases are zero"


def test_attentive_pooling_weights_tokens_by_eq_3_and_sums_them_by_eq_5(phrase_config, parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config("max_attn"))
    pooling = model.get_encoder().layers[0].phrase_pooling
    vectors = _token_vectors(parsed_batch)
    index = ngram_phrase_index(parsed_batch["attention_mask"])
    layout = PhraseLayout.from_phrase_index(index)
    phrases, weights = pooling(vectors, layout)
    real_weights = layout.sum(weights)[layout.phrase_mask]
    torch.testing.assert_close(real_weights, torch.ones_like(real_weights))  # Eq. (4) within each phrase
    assert (weights[~layout.token_mask] == 0).all()
    for sentence in range(3):
        for phrase in range(int(index[sentence].max()) + 1):
            members = vectors[sentence, index[sentence] == phrase]
            summary = members.amax(0).expand_as(members)
            hidden = torch.sigmoid(torch.cat([members, summary], -1) @ pooling.hidden.weight.T + pooling.hidden.bias)
            scores = (hidden @ pooling.score.weight.T + pooling.score.bias).squeeze(-1)  # Eq. (3)
            probabilities = scores.softmax(0)  # Eq. (4)
            torch.testing.assert_close(weights[sentence, index[sentence] == phrase], probabilities)
            torch.testing.assert_close(phrases[sentence, phrase], probabilities @ members)  # Eq. (5)


def test_attentive_combination_is_a_2_layer_network_over_input_and_phrase_attention(phrase_config, parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config())
    combination = model.get_encoder().layers[0].phrase_combination
    torch.manual_seed(0)
    vectors, phrases = torch.randn(3, 5, 16), torch.randn(3, 4, 16)
    phrase_mask = torch.tensor([[True] * 4, [True, True, False, False], [True, True, True, False]])
    combined, weights = combination(vectors, phrases, phrase_mask, output_attentions=True)
    assert (weights[~phrase_mask[:, None, None, :].expand_as(weights)] == 0).all(), "padding phrases unattended"
    attended, _ = combination.attention(vectors, key_value_states=phrases,
                                        attention_mask=phrase_mask[:, None, None, :])  # Eq. (7)
    hidden = torch.sigmoid(torch.cat([vectors, attended], -1) @ combination.hidden.weight.T + combination.hidden.bias)
    torch.testing.assert_close(combined, hidden @ combination.output.weight.T + combination.output.bias)  # Eq. (8)


def test_encoder_returns_the_phrases_of_every_layer_input_and_of_its_output(phrase_config, parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config())
    encoder = model.get_encoder()
    outputs = encoder(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"],
                      output_hidden_states=True)
    layout = PhraseLayout.from_phrase_index(ngram_phrase_index(parsed_batch["attention_mask"]))
    assert outputs.phrase_representations.shape == (3, 3, layout.phrase_mask.shape[1], 16)  # [B, L + 1, P, D]
    assert torch.equal(outputs.phrase_mask, layout.phrase_mask)
    poolings = [layer.phrase_pooling for layer in encoder.layers] + [encoder.output_phrase_pooling]
    for level, (pooling, states) in enumerate(zip(poolings, outputs.hidden_states, strict=True)):
        torch.testing.assert_close(outputs.phrase_representations[:, level], pooling(states, layout)[0])


def test_transparent_attention_weights_sum_to_1_and_mix_the_encoder_levels(phrase_config, parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config())
    decoder = model.get_decoder()
    with torch.no_grad():
        decoder.transparent_attention.logits.normal_()
    weights = decoder.transparent_attention.weights()
    assert weights.shape == (3, 3)  # decoder layers x (encoder layers + 1)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))
    encoder_outputs = model.get_encoder()(input_ids=parsed_batch["input_ids"],
                                          attention_mask=parsed_batch["attention_mask"])
    contexts = decoder.layer_contexts(encoder_outputs, parsed_batch["attention_mask"])
    for layer, context in enumerate(contexts):
        expected = sum(weights[layer, level] * encoder_outputs.phrase_representations[:, level] for level in range(3))
        torch.testing.assert_close(context.phrases, expected)  # Eq. (6)


def test_without_transparent_attention_every_decoder_layer_reads_the_last_encoder_level(phrase_config,
                                                                                           parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config("max_attn"))
    assert model.get_decoder().transparent_attention is None
    encoder_outputs = model.get_encoder()(input_ids=parsed_batch["input_ids"],
                                          attention_mask=parsed_batch["attention_mask"])
    for context in model.get_decoder().layer_contexts(encoder_outputs, parsed_batch["attention_mask"]):
        assert torch.equal(context.phrases, encoder_outputs.phrase_representations[:, -1])


def test_layers_attend_to_phrases_in_the_paper_s_order(phrase_config, parsed_batch):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config())
    calls = []
    encoder_layer, decoder_layer = model.get_encoder().layers[0], model.get_decoder().layers[0]
    watched = {"encoder phrases": encoder_layer.phrase_combination, "encoder self": encoder_layer.self_attn,
               "encoder ffn": encoder_layer.ffn, "decoder self": decoder_layer.self_attn,
               "decoder phrases": decoder_layer.phrase_combination, "decoder tokens": decoder_layer.encoder_attn,
               "decoder ffn": decoder_layer.ffn}
    for name, module in watched.items():
        module.register_forward_pre_hook(lambda module, args, name=name: calls.append(name))
    model(**parsed_batch, labels=parsed_batch["input_ids"][:, :4])
    assert calls == ["encoder phrases", "encoder self", "encoder ffn",
                     "decoder self", "decoder phrases", "decoder tokens", "decoder ffn"]


def test_a_parse_phrase_model_generates_the_same_alone_and_in_a_padded_batch(phrase_config, feature_tokenizer,
                                                                            test_sentences):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config("max_attn_ta_parse"))
    batch = feature_tokenizer(test_sentences[:4], padding=True, return_tensors="pt")
    together = model.generate(**batch, num_beams=4, max_new_tokens=8)
    assert torch.equal(together, model.generate(**batch, num_beams=4, max_new_tokens=8, use_cache=False))
    for index, sentence in enumerate(test_sentences[:4]):
        alone = model.generate(**feature_tokenizer(sentence, return_tensors="pt"), num_beams=4, max_new_tokens=8)
        assert feature_tokenizer.decode(alone[0], skip_special_tokens=True) == \
            feature_tokenizer.decode(together[index], skip_special_tokens=True)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_decoding_projects_each_layer_s_phrase_keys_once_per_generation(phrase_config, feature_tokenizer,
                                                                        test_sentences, num_beams):
    model = random_model(PhraseRepForConditionalGeneration, phrase_config("max_attn_ta"))
    batch = feature_tokenizer(test_sentences[:2], padding=True, return_tensors="pt")
    projections = []
    for layer in model.model.decoder.layers:
        layer.phrase_combination.attention.k_proj.register_forward_hook(
            lambda module, inputs, output: projections.append(module))
    steps = model.generate(**batch, num_beams=num_beams, min_new_tokens=6, max_new_tokens=6).shape[1] - 1
    assert steps == 6 and len(projections) == len(model.model.decoder.layers), "cached: once per layer"
    projections.clear()
    model.generate(**batch, num_beams=num_beams, min_new_tokens=6, max_new_tokens=6, use_cache=False)
    assert len(projections) == steps * len(model.model.decoder.layers), "uncached: every step"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"phrase_segmentation": "chunks"}, "phrase_segmentation"),
    ({"phrase_glance": "sum"}, "phrase_glance"),
    ({"phrase_attentive": "yes"}, "phrase_attentive"),
    ({"phrase_pooling_dim": 0}, "phrase_pooling_dim"),
    ({"phrase_combination_dim": -1}, "phrase_combination_dim"),
])
def test_invalid_arguments_raise_errors_naming_them(phrase_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        phrase_config(**overrides)


def test_ngram_and_parse_phrases_count_seq_the_same_way(parsed_batch):
    """One rule for footnote 2: seq is the sentence's subword tokens without </s> in both segmentations."""
    ngram = ngram_phrase_index(parsed_batch["attention_mask"])
    for row in range(ngram.shape[0]):
        word_tokens = int((parsed_batch["word_ids"][row] >= 0).sum())
        assert word_tokens == int(parsed_batch["attention_mask"][row].sum()) - 1
        first_phrase_length = int((ngram[row] == 0).sum())
        assert first_phrase_length == phrase_token_limit(word_tokens)


def test_a_config_saved_with_one_hidden_width_keeps_it_for_both_networks():
    legacy = PhraseRepConfig(d_model=64, phrase_hidden_dim=None)
    assert (legacy.phrase_pooling_size, legacy.phrase_combination_size) == (64, 64)
    assert "phrase_hidden_dim" not in legacy.to_dict()
    assert (PhraseRepConfig(d_model=64).phrase_pooling_size, PhraseRepConfig(d_model=64).phrase_combination_size) \
        == (12 * 64, 3 * 64)


def test_table_2_rows_are_variants():
    assert PhraseRepConfig.from_variant("mean").phrase_glance == "mean"
    row = PhraseRepConfig.from_variant("max_attn_ta_parse")
    assert (row.phrase_glance, row.phrase_attentive, row.transparent_attention, row.phrase_segmentation) == \
        ("max", True, True, "parse")
    with pytest.raises(ValueError, match="variant"):
        PhraseRepConfig.from_variant("max_ta")


class TestPhraseRepEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, feature_tokenizer, train_pairs):
        # The pipeline end to end, not the paper's widths (pinned by the parameter counts): at this tiny size and
        # step count the 12x-wide scoring networks only slow the first steps down.
        config = tiny_method_config(PhraseRepConfig, feature_tokenizer, phrase_pooling_dim=64, phrase_combination_dim=64)
        return train_from_raw_text(PhraseRepForConditionalGeneration, config, feature_tokenizer, train_pairs)
