"""The translation pipeline: raw sentences in, translations out, features computed on the way, batched;
`hf_srcfeat.pipeline("translation")` mirrors the Transformers 4 call and the task is registered with
Transformers under its own name."""

from __future__ import annotations

import pytest
import torch
import transformers

from hf_srcfeat import SourceFeatureTranslationPipeline, pipeline
from hf_srcfeat.pipeline_translation import TASK


@pytest.fixture(scope="module")
def translator(trained_baseline, feature_tokenizer):
    model, _ = trained_baseline
    return pipeline("translation", model=model, tokenizer=feature_tokenizer, num_beams=4, max_new_tokens=24)


def test_translation_task_gives_the_source_feature_pipeline(translator):
    assert isinstance(translator, SourceFeatureTranslationPipeline)
    with pytest.raises(KeyError, match="translation has been removed"):
        transformers.pipeline("translation", model=translator.model, tokenizer=translator.tokenizer)


def test_pipeline_output_equals_generate_on_the_tokenizers_features(translator, feature_tokenizer, test_sentences):
    outputs = translator(test_sentences[:3])
    for sentence, output in zip(test_sentences[:3], outputs, strict=True):
        inputs = feature_tokenizer(sentence, return_tensors="pt")
        with torch.no_grad():
            ids = translator.model.generate(**inputs, num_beams=4, max_new_tokens=24)
        assert output == {"translation_text": feature_tokenizer.decode(ids[0], skip_special_tokens=True).strip()}
        assert output["translation_text"], "a trained model translates into something"


def test_batched_pipeline_gives_what_one_sentence_at_a_time_gives(translator, test_sentences):
    one_by_one = [translator(sentence)[0] for sentence in test_sentences]
    assert translator(test_sentences, batch_size=4) == one_by_one
    assert translator(test_sentences[:2], num_return_sequences=2)[0][1]["translation_text"]


def test_registered_task_loads_model_and_tokenizer_from_a_saved_folder(translator, test_sentences, tmp_path):
    translator.model.save_pretrained(tmp_path)
    translator.tokenizer.save_pretrained(tmp_path)
    loaded = transformers.pipeline(TASK, model=str(tmp_path), num_beams=4, max_new_tokens=24)
    assert isinstance(loaded, SourceFeatureTranslationPipeline)
    assert loaded(test_sentences[:3]) == translator(test_sentences[:3])


def test_pre_parsed_sentences_translate_without_the_annotator(translator, feature_tokenizer, test_sentences):
    parsed = feature_tokenizer.annotate(test_sentences[:2])
    assert translator(parsed) == translator(test_sentences[:2])


def test_empty_input_raises_a_clear_error(translator):
    with pytest.raises(ValueError, match="empty or whitespace only"):
        translator(["A dog runs.", "  "])
    with pytest.raises(ValueError, match="no sentences to translate"):
        translator([])


def test_max_new_tokens_wins_over_a_saved_max_length_without_a_warning(model_folder, feature_tokenizer,
                                                                        test_sentences, monkeypatch):
    from transformers import AutoModelForSeq2SeqLM
    from transformers.generation import utils as generation_utils

    from hf_srcfeat import pipeline

    warned: list[str] = []
    monkeypatch.setattr(generation_utils.logger, "warning", lambda message, *args: warned.append(message))
    model = AutoModelForSeq2SeqLM.from_pretrained(model_folder)
    model.generation_config.max_length, model.generation_config.max_new_tokens = 30, None  # as training saves it
    translator = pipeline("translation", model=model, tokenizer=feature_tokenizer, max_new_tokens=5)
    translation = translator(test_sentences[0])[0]["translation_text"]
    assert len(feature_tokenizer(text_target=translation)["input_ids"]) <= 6
    assert not [message for message in warned if "max_length" in message], warned


def test_a_baseline_is_never_given_tree_distances_it_does_not_read(translator, test_sentences, monkeypatch):
    from hf_srcfeat import tokenization_source_features

    def refuse(*args):
        raise AssertionError("the [S, S] distances were built for a model that does not read them")

    monkeypatch.setattr(tokenization_source_features, "token_distance_matrix", refuse)
    assert not translator.model.config.reads_dependency_distances
    assert translator(test_sentences[:3], batch_size=2) == translator(test_sentences[:3])


def test_the_pipeline_decodes_with_prepared_weights_and_frees_them_after_the_call(translator, test_sentences,
                                                                                  monkeypatch):
    from hf_srcfeat import linear

    products = []
    original = linear._prepared_product
    monkeypatch.setattr(linear, "_prepared_product", lambda *args: products.append(1) or original(*args))
    translator(test_sentences[:2], max_new_tokens=5)
    assert products
    assert not any(layer in linear._PREPARED_WEIGHTS for layer in translator.model.modules())
