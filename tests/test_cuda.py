"""Every model type on a CUDA device in half precision: bf16 mixed-precision training steps lower the loss, and
bf16/fp16 models train and beam-search. Skipped where there is no CUDA device (CI); run on a GPU machine with
`pytest tests/test_cuda.py`. The same half-precision paths are covered on CPU by test_half_precision.py.

The sources are parsed by the test session's Stanza, or read from `$HF_SRCFEAT_TEST_SOURCE_PARSES` (a folder of
`train.en.conllu.gz` and `test_2016_flickr.en.conllu.gz` from `python -m hf_srcfeat.commands.annotate`) on a machine
without the Stanza models.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from hf_srcfeat import MODEL_CLASSES_BY_TYPE, FeatureVocabularies, SourceFeatureTokenizer
from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.data.multi30k import load_multi30k
from hf_srcfeat.subword_training import SPECIAL_TOKENS

from .test_half_precision import VARIANTS, variant_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
PARSES_ENV = "HF_SRCFEAT_TEST_SOURCE_PARSES"


@pytest.fixture(scope="module")
def parsed_data(request, subword_tokenizer, multi30k_dir):
    """(tokenizer, 300 parsed training sources with their targets, 8 parsed test sources)."""
    train = load_multi30k("train", data_dir=multi30k_dir, limit=300)
    test = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=8)["source"])
    if os.environ.get(PARSES_ENV):
        folder = Path(os.environ[PARSES_ENV])
        train_parses = [s for _, s in zip(range(300), read_conllu(folder / "train.en.conllu.gz"), strict=False)]
        test_parses = [s for _, s in zip(range(8), read_conllu(folder / "test_2016_flickr.en.conllu.gz"), strict=False)]
        assert [s.text for s in train_parses] == list(train["source"]), "the parses follow the corpus"
    else:
        annotator = request.getfixturevalue("stanza_annotator")
        train_parses, test_parses = annotator.annotate(list(train["source"])), annotator.annotate(test)
    tokenizer = SourceFeatureTokenizer(tokenizer_object=subword_tokenizer.backend_tokenizer,
                                       feature_vocabularies=FeatureVocabularies.build(train_parses),
                                       model_max_length=256, **SPECIAL_TOKENS)
    return tokenizer, (train_parses, list(train["target"])), test_parses


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_bf16_mixed_precision_training_steps_on_cuda_lower_the_loss(variant, parsed_data):
    tokenizer, (parses, targets), _ = parsed_data
    torch.manual_seed(0)
    model = MODEL_CLASSES_BY_TYPE[variant_config(variant, tokenizer).model_type](
        variant_config(variant, tokenizer)).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(60):
        start = (step * 32) % (len(parses) - 32)
        batch = tokenizer(annotations=parses[start:start + 32], text_target=targets[start:start + 32], padding=True,
                          return_tensors="pt").to("cuda")
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_half_precision_weights_train_and_beam_search_on_cuda(variant, dtype, parsed_data):
    tokenizer, (_, targets), test_parses = parsed_data
    config = variant_config(variant, tokenizer)
    model = MODEL_CLASSES_BY_TYPE[config.model_type](config).to("cuda", dtype)
    batch = tokenizer(annotations=test_parses, text_target=targets[:len(test_parses)], padding=True,
                      return_tensors="pt").to("cuda")
    loss = model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    inputs = {name: value for name, value in batch.items() if name != "labels"}
    assert model.generate(**inputs, num_beams=4, max_new_tokens=12).shape[0] == len(test_parses)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_compiled_training_step_on_cuda_gives_the_eager_loss_and_gradients(variant, parsed_data):
    """Inductor on the GPU (the CPU test compiles with aot_eager): same loss and gradients, bf16 autocast."""
    tokenizer, (parses, targets), _ = parsed_data
    config = variant_config(variant, tokenizer)
    config.dropout = 0.0
    torch.manual_seed(0)
    model = MODEL_CLASSES_BY_TYPE[config.model_type](config).cuda().train()
    batch = tokenizer(annotations=parses[:16], text_target=targets[:16], padding=True, return_tensors="pt").to("cuda")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)

    def loss_and_gradients(run):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(**batch).loss
        loss.backward()
        return loss.detach().float(), {name: p.grad.float() for name, p in model.named_parameters() if p.grad is not None}

    eager_loss, eager_gradients = loss_and_gradients(model)
    torch._dynamo.reset()
    compiled_loss, compiled_gradients = loss_and_gradients(torch.compile(model))
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=2e-2, atol=2e-2)
    assert compiled_gradients.keys() == eager_gradients.keys()
    # bf16 rounds differently in fused kernels: compare the gradient's overall size and direction, not each element.
    compiled_vector = torch.cat([gradient.flatten() for gradient in compiled_gradients.values()])
    eager_vector = torch.cat([eager_gradients[name].flatten() for name in compiled_gradients])
    assert torch.nn.functional.cosine_similarity(compiled_vector, eager_vector, dim=0) > 0.99
    torch.testing.assert_close(compiled_vector.norm(), eager_vector.norm(), rtol=5e-2, atol=0.0)


def test_deps_san_runs_its_score_scale_as_a_fused_flex_attention_kernel_matching_eager(parsed_data, monkeypatch):
    from hf_srcfeat import attention
    from hf_srcfeat.modeling_deps_san import DepsSanForConditionalGeneration

    tokenizer, _, test_parses = parsed_data
    config = variant_config("deps_san", tokenizer)
    model = DepsSanForConditionalGeneration(config).cuda().eval()
    batch = {name: value.cuda() for name, value in
             tokenizer(annotations=test_parses, padding=True, return_tensors="pt").items()}
    calls = []
    fused = attention.flex_score_modified_attention
    monkeypatch.setattr(attention, "flex_score_modified_attention",
                        lambda *args, **kwargs: calls.append(1) or fused(*args, **kwargs))
    with torch.no_grad():
        flex = model.get_encoder()(**batch).last_hidden_state
        assert calls, "the scaled layers took the FlexAttention path"
        monkeypatch.setattr(attention, "fused_score_modification_available", lambda query, dropout: False)
        eager = model.get_encoder()(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(flex[real], eager[real], atol=2e-5, rtol=1e-4)


def test_phrase_pooling_on_cuda_pools_as_on_the_cpu_under_deterministic_algorithms():
    from hf_srcfeat.modeling_phrase_rep import PhraseLayout

    torch.manual_seed(0)
    phrase_index = torch.tensor([[0, 0, 1, 1, 1, 2, -1], [0, 1, 1, 2, 2, 3, 3]])
    values = torch.randn(2, 7, 5, requires_grad=True)
    layout = PhraseLayout.from_phrase_index(phrase_index)
    on_cpu = [layout.max(values), layout.sum(values), layout.spread(layout.max(values))]
    gradients = torch.autograd.grad(sum(result.sum() for result in on_cpu), values)
    cuda_values = values.detach().cuda().requires_grad_()
    cuda_layout = PhraseLayout.from_phrase_index(phrase_index.cuda())
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        on_cuda = [cuda_layout.max(cuda_values), cuda_layout.sum(cuda_values),
                   cuda_layout.spread(cuda_layout.max(cuda_values))]
        cuda_gradients = torch.autograd.grad(sum(result.sum() for result in on_cuda), cuda_values)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    for expected, result in zip([*on_cpu, *gradients], [*on_cuda, *cuda_gradients], strict=True):
        torch.testing.assert_close(result.cpu(), expected.detach())
