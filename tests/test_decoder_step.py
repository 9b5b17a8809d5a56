"""`hf_srcfeat.decoder_step`: the decoding loops' steps as tensor operations, for decoders whose layers it restates
(the baseline's, phrase representations'). Each step must give the layer modules' logits (and the first step their caches) bit for bit, so the
loops' translations stay Transformers' (tests/test_decoding.py, and every method's end-to-end class)."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from hf_srcfeat import SrcFeatTransformerForConditionalGeneration
from hf_srcfeat.decoder_step import DecoderStep
from hf_srcfeat.decoding import DecoderState
from hf_srcfeat.linear import prepared_inference_weights

from .helpers import pre_norm_model


@pytest.fixture(scope="module")
def sources(multi30k_dir) -> list[str]:
    from hf_srcfeat.data.multi30k import load_multi30k

    return list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=12)["source"])


def cached_keys_and_values(state: DecoderState) -> list[torch.Tensor]:
    """What the state's caches hold after the first step: each layer's self-attention keys and values of position 0
    and its cross-attention keys and values."""
    rows = state.rows
    self_attention = [buffer[:rows, :1] for layer in state.self_attention_layers
                      for buffer in (layer.key_buffer, layer.value_buffer)]
    return self_attention + [tensor for layer in state.cache.cross_attention_cache.layers
                             for tensor in (layer.keys, layer.values)]


def empty_caches(state: DecoderState) -> None:
    """The state's caches as before the first step."""
    for layer in state.self_attention_layers:
        layer.is_initialized, layer.length = False, 0
    state.cache.cross_attention_cache, state.cache.is_updated = DynamicCache(), {}


def phrase_model(trained_baseline, feature_tokenizer):
    """Phrase representations grafted onto the trained baseline, its gates half open and its new biases drawn: the
    attention to the phrases changes every decoder layer's output."""
    from hf_srcfeat.closed_gates import ClosedGates
    from hf_srcfeat.pretrained_checkpoints import graft

    model = graft(trained_baseline[0], "phrase_rep", **feature_tokenizer.feature_vocabularies.sizes()).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for gates in (module for module in model.modules() if isinstance(module, ClosedGates)):
            gates.values.fill_(0.5)
        for layer in model.get_decoder().layers:
            for linear in layer.phrase_combination.modules():
                if isinstance(linear, torch.nn.Linear) and linear.bias is not None:
                    linear.bias.normal_(std=0.1)
    return model


def wide_last_layer_phrase_model(feature_tokenizer):
    """An untrained 512-wide phrase-representation model without transparent attention ("max_attn"): every decoder
    layer reads the last encoder layer's phrases, a non-contiguous slice of the encoder output, whose products at
    this width round otherwise than those of a contiguous copy."""
    from hf_srcfeat.configuration_phrase_rep import PhraseRepConfig
    from hf_srcfeat.modeling_phrase_rep import PhraseRepForConditionalGeneration

    config = PhraseRepConfig.from_variant(
        "max_attn", vocab_size=len(feature_tokenizer), d_model=512, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=512, decoder_ffn_dim=512,
        phrase_pooling_dim=64, phrase_combination_dim=64, pad_token_id=feature_tokenizer.pad_token_id,
        bos_token_id=feature_tokenizer.bos_token_id, eos_token_id=feature_tokenizer.eos_token_id,
        decoder_start_token_id=feature_tokenizer.bos_token_id, **feature_tokenizer.feature_vocabularies.sizes())
    torch.manual_seed(0)
    model = PhraseRepForConditionalGeneration(config).eval()
    with torch.no_grad():
        for linear in model.modules():
            if isinstance(linear, torch.nn.Linear) and linear.bias is not None:
                linear.bias.normal_(std=0.1)
    return model


@pytest.mark.parametrize("prepared_weights", [True, False])
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_kind", ["post", "pre", "phrases", "last_layer_phrases"])
def test_each_step_gives_the_layer_modules_logits_bit_for_bit(trained_baseline, subword_tokenizer, feature_tokenizer,
                                                             sources, monkeypatch, prepared_weights, num_beams,
                                                             model_kind):
    # At every step, the modules' step and the decoder step run on the same state (the decoder step writes the same
    # cache position again; at the first step, into emptied caches): equal logits, and after the first step equal
    # caches, while sentences leave the batch, with the products reading prepared weights (as translation does) or
    # the weights as stored.
    if model_kind.endswith("phrases"):  # a method whose decoder layers attend to more than the baseline's
        model = (phrase_model(trained_baseline, feature_tokenizer) if model_kind == "phrases"
                 else wide_last_layer_phrase_model(feature_tokenizer))
        # Two sentences: few enough phrases that the products of the weights as stored take PyTorch's kernels
        batch = feature_tokenizer(sources if model_kind == "phrases" else sources[:2], padding=True,
                                  return_tensors="pt")
    else:
        model = trained_baseline[0] if model_kind == "post" else pre_norm_model(subword_tokenizer)
        batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    module_step = DecoderState.step
    compared, first_steps, rows_seen = [], [], set()

    def both_steps(state, input_ids):
        decoder_step, state.decoder_step = state.decoder_step, None
        length = state.self_attention.get_seq_length()
        logits = module_step(state, input_ids)
        state.decoder_step = decoder_step
        if decoder_step is None:
            return logits
        if length:
            for layer in state.self_attention_layers:
                layer.length = length
            compared.append(torch.equal(module_step(state, input_ids), logits))
            rows_seen.add(input_ids.shape[0])
        else:
            module_caches = cached_keys_and_values(state)
            empty_caches(state)
            first_steps.append(torch.equal(module_step(state, input_ids), logits) and all(
                torch.equal(ours, theirs) for ours, theirs in
                zip(cached_keys_and_values(state), module_caches, strict=True)))
        return logits

    with prepared_inference_weights(model) if prepared_weights else torch.no_grad():
        expected = model.generate(**batch, num_beams=num_beams, do_sample=False, max_new_tokens=20,
                                  fast_decoding=False)
        monkeypatch.setattr(DecoderState, "step", both_steps)
        translations = model.generate(**batch, num_beams=num_beams, do_sample=False, max_new_tokens=20)

    assert torch.equal(translations, expected)
    assert len(compared) >= 10 and all(compared)
    assert first_steps == [True]
    if model_kind in ("post", "phrases"):  # the trained model's sentences finished at different steps and left
        assert len(rows_seen) > 2


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_bfloat16_model_gets_transformers_translations(trained_baseline, subword_tokenizer, sources, norm):
    # The position table and the logits bias cast to the model's dtype as the modules cast them.
    import copy

    model = copy.deepcopy(trained_baseline[0]) if norm == "post" else pre_norm_model(subword_tokenizer)
    model = model.to(torch.bfloat16)
    assert model.decoder_step_as_tensor_operations() is not None
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    for num_beams in (1, 4):
        ours = model.generate(**batch, num_beams=num_beams, do_sample=False, max_new_tokens=16)
        theirs = model.generate(**batch, num_beams=num_beams, do_sample=False, max_new_tokens=16, fast_decoding=False)
        assert torch.equal(ours, theirs), num_beams


def test_the_loops_take_every_step_as_tensor_operations(trained_baseline, subword_tokenizer, sources,
                                                              monkeypatch):
    model = trained_baseline[0]
    calls: list[int] = []
    decoder_step_call = DecoderStep.__call__

    def counted(self, state, input_ids):
        calls.append(input_ids.shape[0])
        return decoder_step_call(self, state, input_ids)

    monkeypatch.setattr(DecoderStep, "__call__", counted)
    batch = subword_tokenizer(sources[:1], return_tensors="pt")
    output = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12)
    assert calls == [1] * (output.shape[1] - 1)  # every step, for the one sentence


def test_later_calls_in_a_prepared_block_reuse_the_looked_up_steps_until_a_weight_or_module_changes(
        trained_baseline, subword_tokenizer, sources):
    import copy

    from hf_srcfeat import linear

    model = copy.deepcopy(trained_baseline[0])
    batch = subword_tokenizer(sources[:1], return_tensors="pt")
    made: list[object] = []
    layer_step_init = model.decoder_layer_step.__init__

    def counted(self, layer, rows):
        made.append(self)
        layer_step_init(self, layer, rows)

    def translate(fast_decoding: bool = True) -> torch.Tensor:
        return model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12, fast_decoding=fast_decoding)

    decoder_layers = model.config.decoder_layers
    with pytest.MonkeyPatch.context() as patch, prepared_inference_weights(model):
        patch.setattr(model.decoder_layer_step, "__init__", counted)
        first = translate()
        translate()  # the first call's first step made the cross-attention projections' stacked copy: looked up anew
        made.clear()
        assert torch.equal(translate(), first) and made == []  # reused
        with torch.no_grad():
            model.get_decoder().layers[-1].ffn.fc2.weight.mul_(1.5)  # a change PyTorch counts
        assert torch.equal(translate(), translate(fast_decoding=False))
        assert len(made) == decoder_layers
        made.clear()
        model.get_decoder().layers[0].ffn.activation = torch.nn.GELU().eval()  # another module in the decoder
        assert torch.equal(translate(), translate(fast_decoding=False))
        assert len(made) == decoder_layers
        made.clear()
        patch.setattr(linear, "PREPARED_INFERENCE_WEIGHTS", False)  # the products read the weights as stored
        assert torch.equal(translate(), translate(fast_decoding=False))
        assert len(made) == decoder_layers  # looked up anew, not the steps made from the copies
        patch.setattr(linear, "PREPARED_INFERENCE_WEIGHTS", True)
        # Beam search over several sentences packs the weights anew: steps made from the one-row copies go.
        model.generate(**subword_tokenizer(sources[:4], padding=True, return_tensors="pt"), num_beams=4,
                       do_sample=False, max_new_tokens=12)
        with torch.no_grad():  # as the loops read it
            assert sorted(rows for _, rows in linear.inference_memo(model.lm_head)) == [4, 16]
    with torch.no_grad():
        assert linear.inference_memo(model.lm_head) is None  # kept only within the block


@pytest.mark.parametrize("method, arguments, applies", [
    ("srcfeat_transformer", {}, True),
    ("relevance_features", {}, True),
    ("deps_san", {}, True),
    ("diverse_input", {"diverse_variant": "fusing_diverse"}, True),
    ("latent_feedback", {}, True),
    ("srcfeat_composed", {"components": ["relevance_features", "deps_san"]}, True),
    ("phrase_rep", {}, True),  # its decoder layers attend to phrases too: restated by its own layer step
])
def test_the_decoder_step_runs_for_every_method_whose_decoder_layers_it_restates(trained_baseline, feature_tokenizer,
                                                                         method, arguments, applies):
    from hf_srcfeat.pretrained_checkpoints import graft

    model = trained_baseline[0]
    if method != "srcfeat_transformer":
        model = graft(model, method, **feature_tokenizer.feature_vocabularies.sizes(), **arguments).eval()
    assert (model.decoder_step_as_tensor_operations() is not None) is applies


def test_the_modules_step_runs_where_the_decoder_step_would_skip_what_they_do(tiny_config):
    # Training mode, dropout left on in an evaluated model, another attention implementation, a hook (on a layer,
    # on the final layer norm, on the target embedding, on every module), Accelerate's device placement, a layer
    # compiled in place, int8, a target embedding table that is not a plain lookup.
    from hf_srcfeat.quantization import quantize_linear_layers

    def model(**overrides):
        torch.manual_seed(0)
        return SrcFeatTransformerForConditionalGeneration(tiny_config(**overrides)).eval()

    assert model().decoder_step_as_tensor_operations() is not None
    assert model().train().decoder_step_as_tensor_operations() is None
    monte_carlo = model()
    monte_carlo.get_decoder().layers[0].ffn_sublayer.dropout.train()
    assert monte_carlo.decoder_step_as_tensor_operations() is None
    eager = model()
    eager.set_attn_implementation("eager")
    assert eager.decoder_step_as_tensor_operations() is None
    hooked = model()
    hooked.get_decoder().layers[1].ffn.fc1.register_forward_hook(lambda module, inputs, output: output * 2)
    assert hooked.decoder_step_as_tensor_operations() is None
    final_norm_hooked = model(layernorm_position="pre")
    final_norm_hooked.get_decoder().layer_norm.register_forward_pre_hook(lambda module, inputs: None)
    assert final_norm_hooked.decoder_step_as_tensor_operations() is None
    embedding_hooked = model()
    embedding_hooked.get_decoder().embed_tokens.register_forward_hook(lambda module, inputs, output: output * 2)
    assert embedding_hooked.decoder_step_as_tensor_operations() is None
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, inputs, output: None)
    try:
        assert model().decoder_step_as_tensor_operations() is None
    finally:
        handle.remove()
    placed = model()
    placed.get_decoder().layers[0]._hf_hook = object()  # what accelerate.hooks.add_hook_to_module sets
    assert placed.decoder_step_as_tensor_operations() is None
    compiled = model()
    compiled.get_decoder().layers[0].compile()
    assert compiled.decoder_step_as_tensor_operations() is None
    assert quantize_linear_layers(model()).decoder_step_as_tensor_operations() is None
    renormed = model()
    renormed.get_decoder().embed_tokens.max_norm = 1.0  # the lookup rescales rows in place
    assert renormed.decoder_step_as_tensor_operations() is None


def test_hooks_on_attention_projections_run_when_translating_with_prepared_weights(tiny_config, subword_tokenizer,
                                                                                    sources):
    # Within prepared weights an attention multiplies its projections' weights stacked, which would skip a hook on
    # one of them: such layers are called one by one instead.
    torch.manual_seed(0)
    model = SrcFeatTransformerForConditionalGeneration(tiny_config()).eval()
    hooked = {"encoder keys": model.get_encoder().layers[0].self_attn.k_proj,
              "cross-attention values": model.get_decoder().layers[1].encoder_attn.v_proj}
    seen = []
    for name, layer in hooked.items():
        layer.register_forward_hook(lambda module, inputs, output, name=name: seen.append(name))
    batch = subword_tokenizer(sources[:2], padding=True, return_tensors="pt")
    with prepared_inference_weights(model):
        model.generate(**batch, max_new_tokens=3)
    assert set(seen) == set(hooked)
