"""What `generate` prepares for the zoo's loops, kept for later calls with the same settings
(`hf_srcfeat.generation_preparation`): a later call skips the preparation, gives Transformers' tokens, and prepares
anew whenever a setting or the generation config differs."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig, GenerationMixin
from transformers.generation import LogitsProcessorList, MinLengthLogitsProcessor

from hf_srcfeat.generation_preparation import KEPT_PREPARATIONS, forget_preparations


@pytest.fixture()
def model(trained_baseline):
    model = trained_baseline[0]
    forget_preparations(model)
    yield model
    forget_preparations(model)


@pytest.fixture(scope="module")
def sources(multi30k_dir) -> list[str]:
    from hf_srcfeat.data.multi30k import load_multi30k

    return list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=6)["source"])


@pytest.fixture()
def preparations(monkeypatch) -> list:
    """Each call of Transformers' own preparation of a `generate` call."""
    calls: list = []
    prepare = GenerationMixin._prepare_generation_config

    def counted(self, *args, **kwargs):
        calls.append(1)
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(GenerationMixin, "_prepare_generation_config", counted)
    return calls


@pytest.mark.parametrize("options", [{"num_beams": 1}, {"num_beams": 4}, {"num_beams": 4, "max_new_tokens": 9},
                                     {"num_beams": 3, "num_return_sequences": 2, "no_repeat_ngram_size": 2}])
def test_a_later_call_with_the_same_settings_skips_the_preparation_and_gives_transformers_tokens(
        model, subword_tokenizer, sources, preparations, options):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    first = model.generate(**batch, **options)
    assert len(preparations) == 1
    again = model.generate(**batch, **options)
    alone = [model.generate(**subword_tokenizer(source, return_tensors="pt"), **options) for source in sources]
    assert len(preparations) == 1  # neither the batch again nor any single sentence prepared anew
    expected = model.generate(**batch, **options, fast_decoding=False)
    assert torch.equal(first, expected) and torch.equal(again, expected)
    rows = options.get("num_return_sequences", 1)
    for index, output in enumerate(alone):
        assert torch.equal(output, model.generate(**subword_tokenizer(sources[index], return_tensors="pt"), **options,
                                                  fast_decoding=False))
        assert output.shape[0] == rows


def test_a_change_to_the_models_generation_config_is_prepared_anew(model, subword_tokenizer, sources, preparations,
                                                                   monkeypatch):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    before = model.generate(**batch, num_beams=1)
    monkeypatch.setattr(model.generation_config, "no_repeat_ngram_size", 1)  # changed in place
    after = model.generate(**batch, num_beams=1)
    assert len(preparations) == 2
    assert torch.equal(after, model.generate(**batch, num_beams=1, fast_decoding=False))
    assert not torch.equal(before, after)  # the ban applies: no token twice in a sentence
    for row in after.tolist():
        words = [token for token in row if token not in (model.config.pad_token_id, model.config.eos_token_id)]
        assert len(words) == len(set(words))


def test_a_passed_generation_config_is_compared_by_its_settings_not_its_identity(model, subword_tokenizer, sources,
                                                                                 preparations):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    settings = {"num_beams": 4, "max_new_tokens": 12, "eos_token_id": model.config.eos_token_id,
                "pad_token_id": model.config.pad_token_id, "decoder_start_token_id": model.config.bos_token_id}
    first = model.generate(**batch, generation_config=GenerationConfig(**settings))
    again = model.generate(**batch, generation_config=GenerationConfig(**settings))  # a new, equal object
    assert len(preparations) == 1 and torch.equal(first, again)
    shorter = model.generate(**batch, generation_config=GenerationConfig(**{**settings, "max_new_tokens": 3}))
    assert len(preparations) == 2
    assert shorter.shape[1] <= 4 and torch.equal(
        shorter, model.generate(**batch, generation_config=GenerationConfig(**{**settings, "max_new_tokens": 3}),
                                fast_decoding=False))


def test_each_setting_keeps_its_own_preparation_up_to_the_limit(model, subword_tokenizer, sources, preparations):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    for beams in (1, 4, 1, 4):
        model.generate(**batch, num_beams=beams)
    assert len(preparations) == 2
    for beams in range(1, KEPT_PREPARATIONS + 2):
        model.generate(**batch, num_beams=beams)
    assert len(model.__dict__["_generation_preparations"]) == KEPT_PREPARATIONS
    assert len(preparations) == 2 + KEPT_PREPARATIONS - 1  # beams 1 and 4 were kept; 2, 3 and 5 are new


def test_calls_with_arguments_that_cannot_be_compared_are_never_reused(model, subword_tokenizer, sources,
                                                                       preparations):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    processors = LogitsProcessorList([MinLengthLogitsProcessor(4, model.config.eos_token_id)])
    for _ in range(2):
        model.generate(**batch, num_beams=1, logits_processor=processors)
    assert len(preparations) == 2
    assert "_generation_preparations" not in model.__dict__


def test_transformers_loops_and_calls_without_an_attention_mask_prepare_every_time(model, subword_tokenizer, sources,
                                                                                   preparations):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    model.generate(**batch, num_beams=4)
    model.generate(**batch, num_beams=4, fast_decoding=False)
    model.generate(input_ids=batch["input_ids"][:1], num_beams=4)
    model.generate(input_ids=batch["input_ids"][:1], num_beams=4)
    assert len(preparations) == 4


def test_a_generation_config_holding_a_tensor_is_prepared_anew_without_error(model, subword_tokenizer, sources,
                                                                             preparations, monkeypatch):
    batch = subword_tokenizer(sources, padding=True, return_tensors="pt")
    monkeypatch.setattr(model.generation_config, "eos_token_id",
                        torch.tensor([model.config.eos_token_id, model.config.pad_token_id]), raising=False)
    outputs = [model.generate(**batch, num_beams=1) for _ in range(2)]
    assert len(preparations) == 2  # a tensor's comparison cannot say "equal": nothing is reused
    assert torch.equal(outputs[0], outputs[1])
    assert torch.equal(outputs[0], model.generate(**batch, num_beams=1, fast_decoding=False))
