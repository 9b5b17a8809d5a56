"""`attn_implementation="packed_sdpa"`: several sentences to an attention row under a block-diagonal mask is the same
function as SDPA, on real parsed Multi30k batches with padding, for every model type that attends through SDPA."""

from __future__ import annotations

import pytest
import torch

from hf_srcfeat.packed_attention import PACKED_SDPA, SENTENCES_PER_ROW, packed_sdpa_attention_forward

from .test_compile_and_checkpointing import loss_and_gradients, model_of
from .test_half_precision import VARIANTS


def padded_batch(feature_tokenizer, test_sentences, sentences: int = 11):
    """Sentences of different lengths (rows padded), a batch that is not a multiple of the sentences per row."""
    sources = (test_sentences * 2)[:sentences]
    return dict(feature_tokenizer(sources, text_target=sources[::-1], padding=True, return_tensors="pt"))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_packed_sdpa_gives_sdpas_loss_and_gradients(variant, feature_tokenizer, test_sentences):
    batch = padded_batch(feature_tokenizer, test_sentences)
    model = model_of(variant, feature_tokenizer)
    model.set_attn_implementation("sdpa")
    reference_loss, reference_gradients = loss_and_gradients(model, batch)
    model.set_attn_implementation(PACKED_SDPA)
    assert model.config._attn_implementation == PACKED_SDPA
    loss, gradients = loss_and_gradients(model, batch)
    torch.testing.assert_close(loss, reference_loss)
    assert gradients.keys() == reference_gradients.keys()
    for name, gradient in reference_gradients.items():
        torch.testing.assert_close(gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)


def test_packed_sdpa_runs_packed_rows_on_a_training_batch(feature_tokenizer, test_sentences, monkeypatch):
    """The equality above is not the fallback's: the batch's attention calls run with several sentences a row."""
    batch = padded_batch(feature_tokenizer, test_sentences)
    model = model_of("baseline", feature_tokenizer)
    model.set_attn_implementation(PACKED_SDPA)
    row_lengths = []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, **kwargs):
        row_lengths.append((query.shape[0], query.shape[2], key.shape[2]))
        return original(query, key, value, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    model(**batch)
    source_length, target_length = batch["input_ids"].shape[1], batch["labels"].shape[1]
    layers = model.config.encoder_layers + 2 * model.config.decoder_layers
    assert len(row_lengths) == layers
    rows = 11 // SENTENCES_PER_ROW + 1
    assert set(row_lengths) == {(rows, SENTENCES_PER_ROW * query_length, SENTENCES_PER_ROW * key_length)
                                for query_length, key_length in ((source_length, source_length),
                                                                  (target_length, target_length),
                                                                  (target_length, source_length))}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_rows_match_sdpa_for_padding_causal_and_cross_masks(causal, dtype):
    """Direct comparison at awkward sizes: a batch of 5 packed 2 to a row (one empty sentence added), a padding mask
    with a fully padded sentence, query and key lengths that differ (cross-attention) or a causal mask without one;
    a longer sentence than packing takes gives SDPA's own result."""
    torch.manual_seed(0)
    batch, heads, query_length, key_length, dim = 5, 2, 6, 6 if causal else 9, 8
    query, key, value = (torch.randn(batch, heads, length, dim, dtype=dtype)
                         for length in (query_length, key_length, key_length))
    lengths = torch.tensor([key_length, 3, 1, key_length - 1, 0])
    keys_kept = torch.arange(key_length)[None] < lengths[:, None]
    mask = keys_kept[:, None, None, :].expand(batch, 1, query_length, key_length)
    if causal:
        mask = mask & torch.ones(query_length, key_length, dtype=torch.bool).tril()
    module = torch.nn.Module()
    module.is_causal = causal
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    for attention_mask, max_packed_length in ((mask, 9), (None, 9), (mask, 5)):
        expected, _ = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=0.3)
        packed, _ = packed_sdpa_attention_forward(module, query, key, value, attention_mask, scaling=0.3,
                                                  sentences_per_row=2, max_packed_length=max_packed_length)
        assert packed.shape == expected.shape == (batch, query_length, heads, dim)
        kept = attention_mask[:, 0].any(-1) if attention_mask is not None else torch.ones(batch, query_length, dtype=bool)
        # Fully masked query rows (a sentence that is all padding) are undefined in SDPA; compare the others.
        # bf16: the masked-out blocks change the kernel's summation order, so the last bit may differ.
        tolerance = {"atol": 1e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(packed[kept], expected[kept], **tolerance)
