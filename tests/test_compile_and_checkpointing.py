"""Training on accelerators: the training forward of the models without data-dependent shapes compiles into one
graph (no host syncs from our code), `torch.compile` gives eager's loss and gradients, and gradient checkpointing
gives the same loss and gradients for every model type, on real parsed Multi30k pairs (CPU)."""

from __future__ import annotations

import pytest
import torch

from hf_srcfeat import MODEL_CLASSES_BY_TYPE

from .test_half_precision import VARIANTS, variant_config

#: Every variant of the shared half-precision set, and phrase representations over parse phrases: compiled, phrase
#: models lay their phrases out from tensor shapes (eager sizes the layout by the batch's phrase count).
ONE_GRAPH = ["baseline", "deps_san", "relevance_concat", "fusing_diverse", "lfe_joint", "phrase_rep", "phrase_parse",
             "composed"]

#: Models with parts whose computation follows the batch's lengths: diverse input's RNN over the time steps and its
#: convolution, phrase layouts (the test takes 20-45 s a model, too long for all of them; Deps-SAN and the others
#: passed it too).
LENGTH_DEPENDENT = ["fusing_diverse", "phrase_rep"]


def training_batch(feature_tokenizer, test_sentences):
    return dict(feature_tokenizer(test_sentences[:4], text_target=test_sentences[4:8], padding=True,
                                  return_tensors="pt"))


def model_of(variant: str, tokenizer):
    if variant == "phrase_parse":
        config = variant_config("phrase_rep", tokenizer)
        config.phrase_segmentation = "parse"
    else:
        config = variant_config(variant, tokenizer)
    config.dropout = 0.0  # deterministic, so the two runs can be compared exactly
    torch.manual_seed(0)
    return MODEL_CLASSES_BY_TYPE[config.model_type](config).train()


def loss_and_gradients(model, batch, run=None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of `run` (default: the model itself, else e.g. its compiled form) and the model's gradients."""
    model.zero_grad(set_to_none=True)
    loss = (model if run is None else run)(**batch).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ONE_GRAPH)
def test_the_training_forward_compiles_into_one_graph(variant, feature_tokenizer, test_sentences):
    model = model_of(variant, feature_tokenizer)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(**training_batch(feature_tokenizer, test_sentences))
    assert explanation.graph_break_count == 0, [str(reason.reason)[:200] for reason in explanation.break_reasons]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ONE_GRAPH)
def test_a_compiled_training_step_gives_the_eager_loss_and_gradients(variant, feature_tokenizer, test_sentences):
    batch = training_batch(feature_tokenizer, test_sentences)
    model = model_of(variant, feature_tokenizer)
    eager_loss, eager_gradients = loss_and_gradients(model, batch)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    compiled_loss, compiled_gradients = loss_and_gradients(model, batch, run=compiled)
    torch.testing.assert_close(compiled_loss, eager_loss)
    for name, gradient in eager_gradients.items():
        torch.testing.assert_close(compiled_gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("variant", LENGTH_DEPENDENT)
def test_compiled_with_dynamic_sizes_one_graph_trains_on_batches_of_every_length(variant, feature_tokenizer,
                                                                                  test_sentences):
    """No part of a model fixes the traced graph to a batch's lengths (diverse input's RNN, traced, would unroll over
    the time steps): batches of other lengths reuse the graph and give eager's loss and gradients."""
    pairs = [((0, 1), (2, 3)), ((4, 5, 6), (1, 2, 3))]  # (a batch of one sentence would be traced apart)
    batches = [dict(feature_tokenizer([test_sentences[i] for i in sources], text_target=[test_sentences[i] for i in
                                                                                          targets],
                                      padding=True, return_tensors="pt")) for sources, targets in pairs]
    assert batches[0]["input_ids"].shape[1] != batches[1]["input_ids"].shape[1]
    model = model_of(variant, feature_tokenizer)
    torch._dynamo.reset()
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = torch.compile(model, backend="aot_eager", dynamic=True)
    for batch in batches:
        eager_loss, eager_gradients = loss_and_gradients(model, batch)
        compiled_loss, compiled_gradients = loss_and_gradients(model, batch, run=compiled)
        torch.testing.assert_close(compiled_loss, eager_loss)
        for name, gradient in eager_gradients.items():
            torch.testing.assert_close(compiled_gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before == 1


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(variant, feature_tokenizer, test_sentences):
    batch = training_batch(feature_tokenizer, test_sentences)
    model = model_of(variant, feature_tokenizer)
    plain_loss, plain_gradients = loss_and_gradients(model, batch)
    model.activation_checkpointing_enable()
    assert model.is_activation_checkpointing
    checkpointed_loss, checkpointed_gradients = loss_and_gradients(model, batch)
    torch.testing.assert_close(checkpointed_loss, plain_loss)
    assert checkpointed_gradients.keys() == plain_gradients.keys()
    for name, gradient in plain_gradients.items():
        torch.testing.assert_close(checkpointed_gradients[name], gradient, rtol=1e-5, atol=1e-7, msg=name)


def test_one_graph_for_all_batch_shapes_changes_dynamos_settings_only_when_enabled_and_only_within():
    import torch.fx.experimental._config as fx_config

    from hf_srcfeat.compilation import one_graph_for_all_batch_shapes

    defaults = (torch._dynamo.config.assume_static_by_default, fx_config.use_duck_shape)
    with one_graph_for_all_batch_shapes(enabled=False):
        assert (torch._dynamo.config.assume_static_by_default, fx_config.use_duck_shape) == defaults
    with one_graph_for_all_batch_shapes():
        assert (torch._dynamo.config.assume_static_by_default, fx_config.use_duck_shape) == (False, False)
        assert torch._dynamo.config.specialize_float
    assert (torch._dynamo.config.assume_static_by_default, fx_config.use_duck_shape) == defaults


def test_one_graph_for_all_batch_shapes_traces_the_models_floats_as_constants(feature_tokenizer, test_sentences):
    """Dropout rates and label smoothing enter the traced graph as constants: with sizes dynamic from the first
    batch dynamo would otherwise trace each as a symbol (and start the trace over for the loss's label smoothing)."""
    from hf_srcfeat.compilation import one_graph_for_all_batch_shapes

    config = variant_config("baseline", feature_tokenizer)
    assert config.dropout > 0 and config.label_smoothing > 0
    model = MODEL_CLASSES_BY_TYPE[config.model_type](config).train()
    symbolic_floats: list[str] = []

    def recording_backend(graph, example_inputs):
        symbolic_floats.extend(node.name for node in graph.graph.nodes
                               if isinstance(node.meta.get("example_value"), torch.SymFloat))
        return graph.forward

    torch._dynamo.reset()
    with one_graph_for_all_batch_shapes():
        compiled = torch.compile(model, backend=recording_backend)
        compiled(**training_batch(feature_tokenizer, test_sentences)).loss.backward()
    assert symbolic_floats == []
