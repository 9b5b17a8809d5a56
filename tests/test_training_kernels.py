"""The zoo's own kernels: the backbone's linear layers multiply through oneDNN in CPU float32 training too, and read
prepared copies of their weights in inference (`hf_srcfeat.linear`); the label-smoothed loss writes its gradient in
one pass, or is computed with the output projection without the logits (`hf_srcfeat.label_smoothed_cross_entropy`).
All must give what PyTorch's own operations give."""

from __future__ import annotations

import copy
import sys

import pytest
import torch

from hf_srcfeat import label_smoothed_cross_entropy as loss_module
from hf_srcfeat import linear
from hf_srcfeat.label_smoothed_cross_entropy import (
    label_smoothed_cross_entropy,
    projected_label_smoothed_cross_entropy,
)
from hf_srcfeat.trainer import SrcFeatSeq2SeqTrainer


@pytest.fixture(scope="module")
def pairs_batch(subword_tokenizer, multi30k_dir):
    """32 real validation pairs, padded together, with -100 on the padded label positions."""
    from hf_srcfeat.data.multi30k import load_multi30k

    pairs = load_multi30k("val", data_dir=multi30k_dir, limit=32)
    batch = subword_tokenizer(list(pairs["source"]), text_target=list(pairs["target"]), padding=True,
                              return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == subword_tokenizer.pad_token_id, -100)
    return batch


def loss_and_gradients(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {name: parameter.grad.clone() for name, parameter in model.named_parameters()
                           if parameter.grad is not None}


def test_a_training_step_through_onednn_gives_the_gradients_of_pytorchs_kernels(trained_baseline, pairs_batch,
                                                                                monkeypatch):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    model = copy.deepcopy(trained_baseline[0]).eval()  # eval: no dropout, so both passes compute the same function
    products = []
    original = linear.OneDNNLinearFunction.forward
    monkeypatch.setattr(linear.OneDNNLinearFunction, "forward",
                        staticmethod(lambda *args: products.append(1) or original(*args)))
    loss, gradients = loss_and_gradients(model, pairs_batch)
    assert products, "no linear layer took the oneDNN training path"
    monkeypatch.setattr(linear, "ONEDNN_MIN_ROWS", sys.maxsize)  # PyTorch's own kernels
    products.clear()
    expected_loss, expected_gradients = loss_and_gradients(model, pairs_batch)
    assert not products
    assert torch.allclose(loss, expected_loss, rtol=1e-5)
    assert gradients.keys() == expected_gradients.keys()
    largest = max(gradient.abs().max() for gradient in expected_gradients.values())
    for name, gradient in gradients.items():
        # Relative to each tensor's own size, except for gradients that are zero but for rounding (the keys' bias)
        scale = torch.maximum(expected_gradients[name].abs().max(), 1e-3 * largest)
        assert (gradient - expected_gradients[name]).abs().max() <= 1e-4 * scale, name


def test_the_linear_layer_leaves_autocast_other_dtypes_and_frozen_inputs_to_pytorch():
    layer = linear.Linear(64, 32)
    rows = torch.randn(40, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(rows).dtype == torch.bfloat16
    assert layer.double()(rows.double()).grad_fn.name() == "AddmmBackward0"
    layer = linear.Linear(64, 32).float()
    assert layer(rows).grad_fn.name() == "OneDNNLinearFunctionBackward"
    layer.requires_grad_(False)
    assert layer(rows).grad_fn is None


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(256,), (1, 1, 256), (3, 256), (4, 7, 256)])
def test_inference_products_from_prepared_weights_are_nn_linears(shape, bias):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    torch.manual_seed(0)
    layer = linear.Linear(256, 96, bias=bias)
    inputs = torch.randn(shape)
    with torch.no_grad(), linear.prepared_inference_weights(layer):
        outputs = layer(inputs)
        expected = torch.nn.functional.linear(inputs, layer.weight, layer.bias)
        prepared = linear._PREPARED_WEIGHTS[layer]
        assert (prepared.transposed is not None) == (inputs.numel() == 256)  # one row: the transposed copy
        assert (prepared.packed is not None) == (inputs.numel() > 256)  # several: oneDNN's packed copy
    assert outputs.shape == expected.shape == (*shape[:-1], 96)
    assert torch.allclose(outputs, expected, atol=1e-5, rtol=1e-5)
    assert layer not in linear._PREPARED_WEIGHTS  # freed when the block ends


def test_outside_a_prepared_block_inference_reads_the_weights_as_stored():
    layer = linear.Linear(64, 32)
    with torch.no_grad():
        layer(torch.randn(1, 64))
        layer(torch.randn(40, 64))
    assert layer not in linear._PREPARED_WEIGHTS


def test_a_layer_keeps_one_prepared_copy_and_single_rows_read_the_packed_one_once_it_exists():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    torch.manual_seed(0)
    layer, row, rows = linear.Linear(64, 32), torch.randn(1, 64), torch.randn(5, 64)
    with torch.no_grad(), linear.prepared_inference_weights(layer):
        layer(row)
        assert linear._PREPARED_WEIGHTS[layer].transposed is not None
        layer(rows)
        prepared = linear._PREPARED_WEIGHTS[layer]
        assert prepared.packed is not None and prepared.transposed is None
        assert torch.allclose(layer(row), torch.nn.functional.linear(row, layer.weight, layer.bias), atol=1e-5)
        assert linear._PREPARED_WEIGHTS[layer].transposed is None


def test_prepared_weights_follow_every_change_of_the_weight_that_pytorch_counts():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    torch.manual_seed(0)
    layer, row, rows = linear.Linear(64, 32), torch.randn(1, 64), torch.randn(5, 64)

    def matches_nn_linear() -> bool:
        with torch.no_grad():
            return all(torch.allclose(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-5)
                       for x in (row, rows))

    with linear.prepared_inference_weights(layer):
        assert matches_nn_linear()
        with torch.no_grad():
            layer.weight.mul_(2)  # an in-place update, as a (non-fused) optimizer step makes
        assert matches_nn_linear()
        layer.load_state_dict(linear.Linear(64, 32).state_dict())
        assert matches_nn_linear()
        layer.weight = torch.nn.Parameter(torch.randn(32, 64))  # a new tensor
        assert matches_nn_linear()
        address, version = layer.weight.data_ptr(), layer.weight._version
        layer.weight = None
        layer.weight = torch.nn.Parameter(torch.randn(32, 64))  # may take the freed weight's address and version
        assert matches_nn_linear(), (address == layer.weight.data_ptr(), version == layer.weight._version)
        # Copying and saving never meet the copies; training takes its own kernels
        assert set(copy.deepcopy(layer).state_dict()) == {"weight", "bias"}
        assert layer(torch.randn(40, 64)).grad_fn.name() == "OneDNNLinearFunctionBackward"


def test_nested_blocks_free_the_copies_when_the_last_one_ends():
    model = torch.nn.Sequential(linear.Linear(64, 32), linear.Linear(32, 8))
    other = linear.Linear(64, 32)
    with torch.no_grad(), linear.prepared_inference_weights(model), linear.prepared_inference_weights(other):
        with linear.prepared_inference_weights(model):
            model(torch.randn(3, 64))
        assert all(layer in linear._PREPARED_WEIGHTS for layer in model)
        other(torch.randn(3, 64))
    assert not any(layer in linear._PREPARED_WEIGHTS for layer in [*model, other])


def test_without_prepared_weights_inference_takes_the_training_kernels(monkeypatch):
    monkeypatch.setattr(linear, "PREPARED_INFERENCE_WEIGHTS", False)
    layer = linear.Linear(64, 32)
    with torch.no_grad(), linear.prepared_inference_weights(layer):
        layer(torch.randn(40, 64))
        assert linear._PREPARED_WEIGHTS[layer].packed is None


@pytest.mark.parametrize("rows", [5, 40])
def test_a_frozen_weight_still_trains_its_bias(rows):
    torch.manual_seed(0)
    layer = linear.Linear(64, 32)
    layer.weight.requires_grad_(False)
    with linear.prepared_inference_weights(layer):
        layer(torch.randn(rows, 64)).sum().backward()
    assert layer.bias.grad is not None and torch.allclose(layer.bias.grad, torch.full((32,), float(rows)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [3, 40])
def test_products_of_concatenated_inputs_are_the_layers_on_the_concatenation_with_its_gradients(rows, dtype):
    """Block by block (oneDNN for float32 with enough rows, PyTorch's kernels otherwise), the products, summed where
    one part is shared by several rows, are the layer's on the spread concatenation, as are all gradients."""
    torch.manual_seed(0)
    layer = linear.Linear(64 + 32, 48).to(dtype)
    tokens = torch.randn(rows, 4, 64, dtype=dtype, requires_grad=True)
    shared = torch.randn(rows, 1, 32, dtype=dtype, requires_grad=True)  # one vector for a row's 4 tokens
    products = linear.products_of_concatenated_inputs(layer, [tokens, shared])
    assert products is not None and [product.shape for product in products] == [(rows, 4, 48), (rows, 1, 48)]
    through_onednn = type(products[0].grad_fn).__name__ == "OneDNNBlockLinearFunctionBackward"
    # oneDNN where every part has enough rows: the shared part has the fewer
    assert through_onednn == (dtype == torch.float32 and rows >= linear.ONEDNN_MIN_ROWS
                              and torch.backends.mkldnn.is_available())
    blockwise = products[0] + products[1]
    output_gradient = torch.randn(rows, 4, 48, dtype=dtype)
    gradients = torch.autograd.grad(blockwise, [tokens, shared, layer.weight, layer.bias], output_gradient)
    concatenated = layer(torch.cat([tokens, shared.expand(rows, 4, 32)], -1))
    expected = torch.autograd.grad(concatenated, [tokens, shared, layer.weight, layer.bias], output_gradient)
    tolerance = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else {}
    torch.testing.assert_close(blockwise, concatenated, **tolerance)
    for gradient, reference in zip(gradients, expected, strict=True):
        torch.testing.assert_close(gradient, reference, **tolerance)
    with torch.no_grad():  # inference: the same products without the autograd function
        torch.testing.assert_close(sum(linear.products_of_concatenated_inputs(layer, [tokens, shared])),
                                   concatenated, **tolerance)


def test_products_of_concatenated_inputs_are_left_to_a_layer_that_does_more_than_its_product():
    layer = linear.Linear(96, 48)
    layer.register_forward_hook(lambda module, inputs, output: output * 2)
    assert linear.products_of_concatenated_inputs(layer, [torch.randn(40, 64), torch.randn(40, 32)]) is None


def test_products_of_concatenated_inputs_read_prepared_copies_of_the_blocks_in_inference():
    """Within `prepared_inference_weights` each part is multiplied by a prepared copy of its column block (a glance
    shared by a phrase's tokens stays multiplied once per phrase), remade when the weight changes."""
    torch.manual_seed(0)
    layer = linear.Linear(96, 48)
    tokens, shared = torch.randn(40, 4, 64), torch.randn(40, 1, 32)
    with torch.no_grad(), linear.prepared_inference_weights(layer):
        products = linear.products_of_concatenated_inputs(layer, [tokens, shared])
        assert products is not None and [product.shape for product in products] == [(40, 4, 48), (40, 1, 48)]
        expected = layer(torch.cat([tokens, shared.expand(40, 4, 32)], -1))
        torch.testing.assert_close(products[0] + products[1], expected, atol=1e-5, rtol=1e-5)
        copies = linear._PREPARED_WEIGHTS[layer].blocks[(64, 32)]
        assert all(copy.packed is not None or copy.transposed is not None for copy in copies)
        layer.weight.mul_(2)  # a changed weight: the block copies are made again from it
        doubled = linear.products_of_concatenated_inputs(layer, [tokens, shared])
        torch.testing.assert_close(doubled[0] + doubled[1], 2 * expected - layer.bias, atol=1e-4, rtol=1e-4)


def test_generate_reads_prepared_weights_only_within_a_block(trained_baseline, subword_tokenizer, monkeypatch):
    model = copy.deepcopy(trained_baseline[0])
    products = []
    original = linear._prepared_product
    monkeypatch.setattr(linear, "_prepared_product", lambda *args: products.append(1) or original(*args))
    inputs = subword_tokenizer(["A man rides a bike .", "Two dogs play ."], padding=True, return_tensors="pt")
    model.generate(**inputs, max_new_tokens=5)
    assert not products  # generate on its own reads the weights as stored
    with linear.prepared_inference_weights(model):
        model.generate(**inputs, max_new_tokens=5)
    assert products
    assert not any(isinstance(layer, linear.Linear) and layer in linear._PREPARED_WEIGHTS for layer in model.modules())


def stacked_layers(bias: tuple[bool, ...] = (True, True, True)) -> list[linear.Linear]:
    torch.manual_seed(0)
    return [linear.Linear(64, out_features, bias=with_bias)
            for out_features, with_bias in zip((32, 48, 16), bias, strict=True)]


@pytest.mark.parametrize("bias", [(True, True, True), (False, True, False)])
@pytest.mark.parametrize("shape", [(1, 1, 64), (5, 64), (2, 7, 64)])
def test_stacked_inference_products_are_each_layers_own(shape, bias):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    layers, inputs = stacked_layers(bias), torch.randn(shape)
    with torch.no_grad(), linear.prepared_inference_weights(torch.nn.ModuleList(layers)):
        outputs = linear.prepared_stacked_products(layers, inputs)
        stacked = linear._PREPARED_WEIGHTS[layers[0]].stacked
        assert stacked is not None  # one copy, with the first layer's, in the layout for these rows
        copy = stacked.prepared.transposed if len(inputs.reshape(-1, 64)) == 1 else stacked.prepared.packed
        assert copy is not None and (copy.shape == (64, 96) if len(inputs.reshape(-1, 64)) == 1 else True)
        assert all(linear._PREPARED_WEIGHTS[layer].packed is None and linear._PREPARED_WEIGHTS[layer].transposed
                   is None for layer in layers)  # no copies of their own
    assert outputs is not None and len(outputs) == 3
    for layer, output in zip(layers, outputs, strict=True):
        expected = torch.nn.functional.linear(inputs, layer.weight, layer.bias)
        assert output.shape == expected.shape and torch.allclose(output, expected, atol=1e-5, rtol=1e-5)
    assert layers[0] not in linear._PREPARED_WEIGHTS  # freed when the block ends


def test_stacked_products_follow_a_change_of_any_stacked_parameter():
    layers, rows = stacked_layers(), torch.randn(5, 64)

    def match() -> bool:
        with torch.no_grad():
            outputs = linear.prepared_stacked_products(layers, rows)
        return all(torch.allclose(output, torch.nn.functional.linear(rows, layer.weight, layer.bias), atol=1e-5)
                   for layer, output in zip(layers, outputs, strict=True))

    with linear.prepared_inference_weights(torch.nn.ModuleList(layers)):
        assert match()
        with torch.no_grad():
            layers[1].weight.mul_(2)  # the middle layer's weight, in place
        assert match()
        layers[2].bias = torch.nn.Parameter(torch.randn(16))  # the last layer's bias, a new tensor
        assert match()


def test_stacked_products_are_left_to_each_layer_outside_prepared_inference():
    layers, rows = stacked_layers(), torch.randn(5, 64)
    with torch.no_grad():
        assert linear.prepared_stacked_products(layers, rows) is None  # no block
    with linear.prepared_inference_weights(torch.nn.ModuleList(layers)):
        assert linear.prepared_stacked_products(layers, rows) is None  # gradients wanted: training's kernels
        with torch.no_grad():
            wrapped = [*layers[:2], torch.nn.utils.parametrizations.weight_norm(layers[2])]
            assert linear.prepared_stacked_products(wrapped, rows) is None  # a layer that is not a plain Linear
            handle = layers[0].register_forward_pre_hook(lambda module, args: None)
            assert linear.prepared_stacked_products(layers, rows) is None  # a hook the stack would skip
            handle.remove()


@pytest.fixture
def product_widths(monkeypatch) -> list[int]:
    """The output width of each product read from a prepared copy, in order."""
    widths = []
    original = linear._product_from_copy

    def counted(*args):
        outputs = original(*args)
        if outputs is not None:
            widths.append(outputs.shape[-1])
        return outputs

    monkeypatch.setattr(linear, "_product_from_copy", counted)
    return widths


def test_self_attention_projects_queries_keys_and_values_in_one_product(trained_baseline, product_widths):
    model = trained_baseline[0]
    attention = model.get_encoder().layers[0].self_attn
    hidden_states = torch.randn(2, 6, model.config.d_model)
    with torch.no_grad():
        expected = attention(hidden_states)[0]
        with linear.prepared_inference_weights(model):
            outputs = attention(hidden_states)[0]
    d_model = model.config.d_model
    assert product_widths == [3 * d_model, d_model]  # query, key and value; then the output
    assert torch.allclose(outputs, expected, atol=1e-5)


def test_cross_attention_projects_the_memorys_keys_and_values_in_one_product(trained_baseline, product_widths):
    model = trained_baseline[0]
    attention = model.get_decoder().layers[0].encoder_attn
    queries, memory = torch.randn(2, 3, model.config.d_model), torch.randn(2, 6, model.config.d_model)
    with torch.no_grad():
        expected = attention(queries, key_value_states=memory)[0]
        with linear.prepared_inference_weights(model):
            outputs = attention(queries, key_value_states=memory)[0]
    d_model = model.config.d_model
    assert product_widths == [d_model, 2 * d_model, d_model]  # query; key and value; the output
    assert torch.allclose(outputs, expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_label_smoothed_loss_and_its_gradient_are_pytorchs_cross_entropy(trained_baseline, pairs_batch,
                                                                           smoothing, dtype):
    """In float64 to rounding: tighter than float32 allows, where a smoothing share off by one word (e.g.
    ε / (V - 1)) moves each logit's gradient by about ε / V², here 1e-7."""
    model, _ = trained_baseline
    with torch.no_grad():
        logits = model(**pairs_batch).logits.to(dtype)  # real logits over a real vocabulary, with ignored positions
    labels = pairs_batch["labels"]
    assert (labels == -100).any()
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = label_smoothed_cross_entropy(ours, labels, smoothing)
    expected = torch.nn.functional.cross_entropy(theirs.reshape(-1, theirs.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100, label_smoothing=smoothing, reduction="sum")
    (3 * loss).backward(retain_graph=True)
    (3 * expected).backward()
    if dtype == torch.float32:
        assert torch.allclose(loss, expected, rtol=1e-5)
        assert torch.allclose(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5)  # float32 rounding of gradients up to 3
    else:
        torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-9, atol=1e-12)
    first = ours.grad.clone()
    ours.grad = None
    (3 * loss).backward()  # a second backward through the retained graph gives the same gradient
    assert torch.equal(ours.grad, first)


def test_the_label_smoothed_loss_passes_a_numerical_gradient_check(trained_baseline, pairs_batch):
    model, _ = trained_baseline
    with torch.no_grad():
        logits = model(**pairs_batch).logits.double()
    logits, labels = logits.reshape(-1, logits.shape[-1]), pairs_batch["labels"].reshape(-1)
    # Four counted positions and two padding ones (-100): every logit is one numerical derivative, so a few rows.
    counted, ignored = (labels != -100).nonzero().squeeze(1), (labels == -100).nonzero().squeeze(1)
    rows = torch.cat([counted[:4], ignored[:2]])
    assert len(rows) == 6
    assert torch.autograd.gradcheck(lambda values: label_smoothed_cross_entropy(values, labels[rows], 0.1),
                                    (logits[rows].requires_grad_(),))


def test_the_loss_gradient_is_pytorchs_where_probabilities_fall_below_float32s_normal_range(trained_baseline,
                                                                                             pairs_batch):
    model, _ = trained_baseline
    with torch.no_grad():
        logits = model(**pairs_batch).logits[:4] * 40  # a confident model: most probabilities below 1e-38
    log_probabilities = torch.log_softmax(logits, dim=-1)
    assert ((log_probabilities < -87.3) & (log_probabilities > -103.9)).any()  # exp() gives subnormal numbers
    labels = pairs_batch["labels"][:4]
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    label_smoothed_cross_entropy(ours, labels, 0.1).backward()
    torch.nn.functional.cross_entropy(theirs.reshape(-1, theirs.shape[-1]), labels.reshape(-1), ignore_index=-100,
                                      label_smoothing=0.1, reduction="sum").backward()
    assert torch.allclose(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def test_a_batch_of_ignored_labels_has_zero_loss_and_gradient():
    logits = torch.randn(2, 5, 40, requires_grad=True)
    loss = label_smoothed_cross_entropy(logits, torch.full((2, 5), -100), 0.1)
    loss.backward()
    assert loss.item() == 0 and not logits.grad.any()


def decoder_states(model, batch) -> torch.Tensor:
    """The decoder's last hidden states for `batch` (what the output projection reads)."""
    with torch.no_grad():
        return model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           decoder_input_ids=model.prepare_decoder_input_ids_from_labels(batch["labels"]),
                           ).last_hidden_state


@pytest.mark.parametrize("bias", [False, True])
def test_the_loss_without_logits_is_the_loss_of_the_projected_logits_with_its_gradients(
        trained_baseline, pairs_batch, monkeypatch, bias):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    # Chunks of 64 positions: several, the last one shorter.
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", 1)
    monkeypatch.setattr(loss_module, "MIN_CHUNK_ROWS", 64)
    model, _ = trained_baseline
    states, labels = decoder_states(model, pairs_batch), pairs_batch["labels"]
    counted = int((labels != -100).sum())
    assert (labels == -100).any() and counted > 3 * loss_module.MIN_CHUNK_ROWS and counted % loss_module.MIN_CHUNK_ROWS
    weight = model.lm_head.weight.detach()
    logits_bias = 0.1 * torch.randn(weight.shape[0]) if bias else None
    ours = [tensor.clone().requires_grad_() for tensor in (states, weight, *([logits_bias] if bias else []))]
    theirs = [tensor.detach().clone().requires_grad_() for tensor in ours]
    loss = projected_label_smoothed_cross_entropy(ours[0], ours[1], ours[2] if bias else None, labels, 0.1)
    expected = label_smoothed_cross_entropy(
        torch.nn.functional.linear(theirs[0], theirs[1], theirs[2] if bias else None), labels, 0.1)
    assert torch.allclose(loss, expected, rtol=1e-5)
    (3 * loss).backward(retain_graph=True)
    (3 * expected).backward()
    for mine, reference in zip(ours, theirs, strict=True):
        assert torch.allclose(mine.grad, reference.grad, rtol=1e-4, atol=1e-5 * reference.grad.abs().max())
    assert not ours[0].grad[labels == -100].any()  # positions left out of the loss get no gradient
    first = [tensor.grad.clone() for tensor in ours]
    for tensor in ours:
        tensor.grad = None
    (3 * loss).backward()  # a second backward through the retained graph gives the same gradients
    assert all(torch.equal(tensor.grad, gradient) for tensor, gradient in zip(ours, first, strict=True))


def test_the_loss_without_logits_scales_the_weights_gradient_into_its_layout_without_copying_it(trained_baseline,
                                                                                               pairs_batch):
    # The summed weight gradient comes out of the products transposed (the vocabulary is the wider side); it is
    # scaled into the weight's layout in one pass, where the earlier way copied it there first.
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    from benchmarks.op_timing import OperationTimer
    from benchmarks.undone_changes import undone

    model, _ = trained_baseline
    states, labels = decoder_states(model, pairs_batch), pairs_batch["labels"]
    weight = model.lm_head.weight.detach().clone().requires_grad_()
    assert weight.shape[0] > weight.shape[1]
    copies, gradients = [], []
    for change in (None, "copied_loss_weight_gradient"):
        with undone(change):
            loss = projected_label_smoothed_cross_entropy(states, weight, None, labels, 0.1)
            recorder = OperationTimer()  # every operation of the backward, by name
            with recorder:
                (gradient,) = torch.autograd.grad(3 * loss, weight)
        copies.append(recorder.calls["aten.clone"] + recorder.calls["aten.copy_"])
        gradients.append(gradient)
    assert copies == [0, 1]
    assert gradients[0].is_contiguous() and torch.equal(gradients[0], gradients[1])


@pytest.mark.parametrize("frozen", ["weight", "states"])
def test_the_loss_without_logits_computes_only_the_gradients_that_are_needed(trained_baseline, pairs_batch,
                                                                           monkeypatch, frozen):
    model, _ = trained_baseline
    states, labels = decoder_states(model, pairs_batch), pairs_batch["labels"]
    weight = model.lm_head.weight.detach()
    asked = []
    original = loss_module.linear_gradients
    monkeypatch.setattr(loss_module, "linear_gradients",
                        lambda *args: asked.append(tuple(args[4])) or original(*args))
    ours = {"states": states.clone().requires_grad_(frozen != "states"),
            "weight": weight.clone().requires_grad_(frozen != "weight")}
    theirs = {name: tensor.detach().clone().requires_grad_(tensor.requires_grad) for name, tensor in ours.items()}
    projected_label_smoothed_cross_entropy(ours["states"], ours["weight"], None, labels, 0.1).backward()
    label_smoothed_cross_entropy(torch.nn.functional.linear(theirs["states"], theirs["weight"]), labels,
                                 0.1).backward()
    trained = "states" if frozen == "weight" else "weight"
    assert asked and all(needs == (trained == "states", trained == "weight", False) for needs in asked)
    assert ours[frozen].grad is None
    assert torch.allclose(ours[trained].grad, theirs[trained].grad, rtol=1e-4,
                          atol=1e-5 * theirs[trained].grad.abs().max())


def test_the_loss_without_logits_is_exact_where_the_targets_probability_underflows():
    # The logits are the states (an identity projection): rows whose target lies 0, 90 (a subnormal probability
    # in float32) and 210 (zero in float32) below the row's maximum.
    logits = torch.tensor([[0.0, 1.0, -1.0, 0.5, 0.0], [90.0, 0.0, 0.0, 0.0, 0.0], [200.0, 0.0, 0.0, 0.0, -10.0]])
    labels = torch.tensor([1, 1, 4])
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = projected_label_smoothed_cross_entropy(ours, torch.eye(5), None, labels, 0.1)
    expected = torch.nn.functional.cross_entropy(theirs, labels, label_smoothing=0.1, reduction="sum")
    assert torch.isfinite(loss) and torch.allclose(loss, expected, rtol=1e-6)
    loss.backward()
    expected.backward()
    assert torch.allclose(ours.grad, theirs.grad, atol=1e-6)


def test_the_loss_without_logits_of_a_batch_of_ignored_labels_is_zero_with_zero_gradients():
    states, weight = torch.randn(2, 40, 32, requires_grad=True), torch.randn(50, 32, requires_grad=True)
    loss = projected_label_smoothed_cross_entropy(states, weight, None, torch.full((2, 40), -100), 0.1)
    loss.backward()
    assert loss.item() == 0 and not states.grad.any() and not weight.grad.any()


def test_a_model_asked_to_skip_the_logits_returns_none_and_the_same_loss_and_gradients(trained_baseline,
                                                                                      pairs_batch):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    model = copy.deepcopy(trained_baseline[0]).eval()  # eval: no dropout, so both passes compute the same function
    loss, gradients = loss_and_gradients(model, pairs_batch)
    assert model(**pairs_batch, skip_logits=True).logits is None
    loss_without_logits, gradients_without_logits = loss_and_gradients(model, {**pairs_batch, "skip_logits": True})
    assert torch.allclose(loss_without_logits, loss, rtol=1e-5)
    largest = max(gradient.abs().max() for gradient in gradients.values())
    for name, gradient in gradients_without_logits.items():
        scale = torch.maximum(gradients[name].abs().max(), 1e-3 * largest)  # the keys' bias: zero but for rounding
        assert (gradient - gradients[name]).abs().max() <= 1e-4 * scale, name
    with torch.no_grad():  # no gradient to compute: the logits as usual
        assert model(**pairs_batch, skip_logits=True).logits is not None


def _bias_on_the_output_projection(model):
    model.lm_head = linear.Linear(model.config.d_model, model.config.vocab_size)


def _logits_replaced_on_the_instance(model):
    model.output_logits = lambda states: type(model).output_logits(model, states) * 0.5


def _forward_replaced_on_the_projection(model):  # as Accelerate's device placement does
    model.lm_head.forward = lambda states: linear.Linear.forward(model.lm_head, states) * 0.5


def _hook_on_the_projection(model):
    model.lm_head.register_forward_hook(lambda module, args, output: output * 0.5)


@pytest.mark.parametrize("change", [_bias_on_the_output_projection, _logits_replaced_on_the_instance,
                                    _forward_replaced_on_the_projection, _hook_on_the_projection])
def test_a_model_whose_output_layer_does_more_than_the_projection_keeps_its_logits(trained_baseline, pairs_batch,
                                                                                    change):
    model = copy.deepcopy(trained_baseline[0]).eval()
    change(model)
    outputs = model(**pairs_batch, skip_logits=True)
    assert outputs.logits is not None
    assert torch.allclose(outputs.loss, model(**pairs_batch).loss)


def test_a_global_module_hook_keeps_the_logits(trained_baseline, pairs_batch):
    model = copy.deepcopy(trained_baseline[0]).eval()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        assert model(**pairs_batch, skip_logits=True).logits is not None
    finally:
        handle.remove()
    assert model(**pairs_batch, skip_logits=True).logits is None


def test_the_trainers_training_steps_ask_the_model_for_the_loss_only(trained_baseline, pairs_batch, tmp_path):
    from transformers import Seq2SeqTrainingArguments

    model = copy.deepcopy(trained_baseline[0])
    asked = []
    model.register_forward_pre_hook(lambda module, args, kwargs: asked.append(kwargs.get("skip_logits", False)),
                                    with_kwargs=True)
    trainer = SrcFeatSeq2SeqTrainer(model=model, args=Seq2SeqTrainingArguments(
        str(tmp_path), use_cpu=True, report_to="none"))
    model.train()
    trainer.compute_loss(model, dict(pairs_batch))
    trainer.compute_loss(model, dict(pairs_batch), return_outputs=True)  # a caller that reads the outputs
    model.eval()
    trainer.compute_loss(model, dict(pairs_batch))
    trainer.compute_loss_func = lambda outputs, labels, num_items_in_batch=None: outputs.logits.sum()
    model.train()
    # A loss of the user's, which reads the logits (the Trainer hands it the labels: the decoder reads its inputs).
    trainer.compute_loss(model, {**pairs_batch, "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(
        pairs_batch["labels"])})
    assert asked == [True, False, False, False]


def test_the_trainer_leaves_the_logits_to_a_model_with_its_own_forward(trained_baseline, pairs_batch, tmp_path):
    from transformers import Seq2SeqTrainingArguments

    base = type(trained_baseline[0])

    class WithLogitPenalty(base):  # a user's model whose forward reads the logits, and takes no `skip_logits`
        def forward(self, input_ids=None, attention_mask=None, labels=None, num_items_in_batch=None):
            outputs = super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                                      num_items_in_batch=num_items_in_batch)
            outputs.loss = outputs.loss + 1e-4 * outputs.logits.logsumexp(-1).pow(2).mean()
            return outputs

    model = WithLogitPenalty(trained_baseline[0].config)
    model.load_state_dict(trained_baseline[0].state_dict())
    trainer = SrcFeatSeq2SeqTrainer(model=model, args=Seq2SeqTrainingArguments(
        str(tmp_path), use_cpu=True, report_to="none"))
    model.train()
    batch = {name: pairs_batch[name] for name in ("input_ids", "attention_mask", "labels")}
    assert torch.isfinite(trainer.compute_loss(model, batch))
