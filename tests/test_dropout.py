"""The backbone's dropout: masks from 16-bit random lanes on the CPU, nn.Dropout's path elsewhere."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_srcfeat import SrcFeatTransformerForConditionalGeneration
from hf_srcfeat.dropout import Dropout, dropout_mask, dropped_share

from .helpers import random_model


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_every_lane_of_the_random_words_drops_at_the_asked_rate(p):
    # Four mask elements share one 64-bit word: each of the four positions must drop at rate p, the sign lane too.
    torch.manual_seed(0)
    kept = dropout_mask((400_000, 4), p)
    dropped_by_lane = 1 - kept.float().mean(0)
    torch.testing.assert_close(dropped_by_lane, torch.full((4,), p), atol=0.003, rtol=0)
    assert dropped_share(p) == round(p * 65536) / 65536


@pytest.mark.parametrize("p, kept", [(0.0, True), (1e-6, True), (-0.5, True), (1.0, False), (1 - 1e-6, False)])
def test_a_mask_at_a_rate_that_rounds_to_0_or_1_keeps_every_element_or_none(p, kept):
    torch.manual_seed(0)
    mask = dropout_mask((3, 500), p)
    assert mask.dtype == torch.bool and mask.shape == (3, 500) and bool(mask.all() if kept else not mask.any())


def test_kept_values_are_scaled_so_that_the_expectation_is_unchanged_and_the_gradient_follows_the_mask():
    dropout = Dropout(0.1).train()
    inputs = torch.randn(64, 33, requires_grad=True)
    torch.manual_seed(1)
    output = dropout(inputs)
    kept = output != 0
    scale = 1 / (1 - dropped_share(0.1))
    torch.testing.assert_close(output[kept], inputs[kept] * scale, rtol=0, atol=0)
    output.sum().backward()
    torch.testing.assert_close(inputs.grad, kept.float() * scale, rtol=0, atol=0)


def test_second_derivatives_and_a_default_device_context_work_as_with_nn_dropout():
    dropout = Dropout(0.3).train()
    inputs = torch.randn(40, 8, requires_grad=True)
    output = dropout(inputs)
    (first,) = torch.autograd.grad((output**2).sum(), inputs, create_graph=True)
    first.sum().backward()
    kept_scale = (output != 0).float() / (1 - dropped_share(0.3))
    torch.testing.assert_close(inputs.grad, 2 * kept_scale**2)
    with torch.device("meta"):
        assert dropout(torch.ones(4, 4, device="cpu")).device.type == "cpu"


def test_masks_follow_the_seed_and_evaluation_applies_none():
    dropout = Dropout(0.2).train()
    inputs = torch.randn(16, 40)
    torch.manual_seed(3)
    first = dropout(inputs)
    torch.manual_seed(3)
    assert torch.equal(dropout(inputs), first)
    assert not torch.equal(dropout(inputs), first)
    assert torch.equal(dropout.eval()(inputs), inputs)


def test_rates_that_round_to_0_or_1_and_compiled_graphs_take_nn_dropouts_path():
    inputs = torch.randn(8, 16)
    for p in (0.0, 1.0, 1e-6):
        torch.manual_seed(0)
        expected = nn.Dropout(p).train()(inputs)
        torch.manual_seed(0)
        assert torch.equal(Dropout(p).train()(inputs), expected), p
    torch.manual_seed(0)
    expected = nn.Dropout(0.1).train()(inputs)
    torch.manual_seed(0)
    assert torch.equal(torch.compile(Dropout(0.1).train(), backend="eager")(inputs), expected)


def test_switching_lane_masks_off_gives_nn_dropouts_masks(monkeypatch):
    from hf_srcfeat import dropout

    inputs = torch.randn(8, 16)
    torch.manual_seed(0)
    expected = nn.Dropout(0.1).train()(inputs)
    monkeypatch.setattr(dropout, "LANE_MASKS", False)
    torch.manual_seed(0)
    assert torch.equal(Dropout(0.1).train()(inputs), expected)


def test_bfloat16_activations_keep_their_dtype():
    output = Dropout(0.5).train()(torch.ones(4000, dtype=torch.bfloat16))
    assert output.dtype == torch.bfloat16
    assert set(output.unique().tolist()) == {0.0, 2.0}


def test_a_model_trains_with_the_lane_masks_reproducibly(tiny_config, subword_tokenizer, test_sentences):
    model = random_model(SrcFeatTransformerForConditionalGeneration, tiny_config(dropout=0.3)).train()
    assert sum(isinstance(module, Dropout) for module in model.modules()) > 0
    batch = subword_tokenizer(test_sentences[:4], text_target=test_sentences[4:8], padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == subword_tokenizer.pad_token_id, -100)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": labels}
    torch.manual_seed(5)
    loss = model(**inputs).loss
    torch.manual_seed(5)
    assert torch.equal(model(**inputs).loss, loss)
    assert not torch.equal(model.eval()(**inputs).loss, loss)
