"""The translation pipeline: raw sentences in, translations out, features computed on the way, batched;
`hf_srcfeat.pipeline("translation")` mirrors the Transformers 4 call and the task is registered with
Transformers under its own name."""

from __future__ import annotations

import warnings

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


def test_an_empty_sentence_translates_to_nothing_without_failing_its_batch(translator, test_sentences):
    """As the translate command gives an empty line for one: the others of the batch are translated as alone."""
    translated = translator([test_sentences[0], "  ", test_sentences[1], ""], batch_size=2)
    assert translated == [translator(test_sentences[0])[0], {"translation_text": ""},
                          translator(test_sentences[1])[0], {"translation_text": ""}]
    assert translator("") == [{"translation_text": ""}]
    scored = translator(["\t", test_sentences[0]], num_return_sequences=2, return_scores=True)
    assert scored[0] == [{"translation_text": "", "score": float("-inf")}] * 2 and len(scored[1]) == 2
    with pytest.raises(ValueError, match="no sentences to translate"):
        translator([])


def test_sampling_draws_with_one_beam_and_a_seed_repeats_the_draws(translator, test_sentences, monkeypatch):
    """`do_sample` and `seed` as in the translate command: one beam whatever the search setting (the pipeline was
    made with num_beams=4), the same seed the same samples, and beam sampling or a seed without sampling refused."""
    sampled = [translator(test_sentences[:4], do_sample=True, seed=seed, batch_size=2) for seed in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]
    asked = []
    generate = translator.model.generate
    monkeypatch.setattr(translator.model, "generate", lambda **options: asked.append(options) or generate(**options))
    translator(test_sentences[0], do_sample=True, seed=1)
    assert asked[-1]["do_sample"] is True and asked[-1]["num_beams"] == 1
    translator(test_sentences[0], do_sample=True, num_beams=None, seed=1)
    assert asked[-1]["num_beams"] == 1
    with pytest.raises(ValueError, match="give num_beams=1"):
        translator(test_sentences[0], do_sample=True, num_beams=4)
    with pytest.raises(ValueError, match="seed makes sampling reproducible: it needs do_sample=True"):
        translator(test_sentences[0], seed=1)


def test_n_samples_per_sentence_come_with_the_models_own_score_of_each(translator, feature_tokenizer, test_sentences):
    """fairseq's `--sampling --nbest N`: N draws per sentence, each scored as beam search scores a hypothesis (the
    sum of the model's token log-probabilities over length ** length_penalty), which teacher forcing reproduces."""
    drawn = translator(test_sentences[:2], do_sample=True, num_return_sequences=3, seed=3, return_scores=True,
                       return_tensors=True, temperature=1.5, length_penalty=0.6)
    assert [len(samples) for samples in drawn] == [3, 3]
    assert len({tuple(sample["translation_token_ids"].tolist()) for sample in drawn[0]}) > 1, "three draws, not one"
    model = translator.model
    for sentence, samples in zip(test_sentences[:2], drawn, strict=True):
        inputs = feature_tokenizer(sentence, return_tensors="pt")
        for sample in samples:
            ids = sample["translation_token_ids"]
            end = int((ids[1:] == model.config.eos_token_id).nonzero()[0]) + 2 if \
                (ids[1:] == model.config.eos_token_id).any() else len(ids)
            ids = ids[:end]
            with torch.no_grad():
                logits = model(**inputs, decoder_input_ids=ids[None, :-1]).logits[0]
            forced = torch.log_softmax(logits, dim=-1).gather(-1, ids[1:, None]).sum()
            assert sample["score"] == pytest.approx(float(forced) / (len(ids) - 1) ** 0.6, abs=1e-4)
    greedy = translator(test_sentences[0], num_beams=1, return_scores=True)[0]
    assert greedy["score"] < 0 and greedy["translation_text"] == translator(test_sentences[0], num_beams=1)[0][
        "translation_text"]


def test_scores_follow_the_settings_generate_uses_with_a_given_generation_config(translator, test_sentences,
                                                                                  monkeypatch):
    """A generation config given in the call leaves num_beams unset: `generate` takes the model's (4 here), and the
    score is that beam search's."""
    from transformers import GenerationConfig

    monkeypatch.setattr(translator.model.generation_config, "num_beams", 4)
    given = translator(test_sentences[0], generation_config=GenerationConfig(max_new_tokens=24), return_scores=True)
    assert given == translator(test_sentences[0], num_beams=4, max_new_tokens=24, return_scores=True)


def test_forced_tokens_count_nothing_in_a_sampled_or_greedy_score():
    """As beam search scores a forced target-language token: log-probability 0; the rest are the model's."""
    from hf_srcfeat.sequence_scores import sequence_scores

    torch.manual_seed(0)
    logits = [torch.randn(2, 6) for _ in range(3)]
    sequences = torch.tensor([[0, 5, 2, 1], [0, 5, 1, 0]])  # start, forced 5, then a token and the end (1) or end
    log_probs = [torch.log_softmax(step, dim=-1) for step in logits]
    first = log_probs[1][0, 2] + log_probs[2][0, 1]
    second = log_probs[1][1, 1]  # the padding after the end token counts nothing either
    scores = sequence_scores(sequences, logits, eos_token_id=1, length_penalty=1.0, forced_first_token=5)
    assert scores.tolist() == pytest.approx([float(first) / 3, float(second) / 2])
    unforced = sequence_scores(sequences, logits, eos_token_id=1, length_penalty=1.0)
    assert unforced[0] == pytest.approx(float(log_probs[0][0, 5] + first) / 3)
    # Marian's </s> forced at the length limit's step (the third here) counts nothing either
    at_limit = sequence_scores(sequences, logits, eos_token_id=1, length_penalty=1.0, forced_first_token=5,
                               forced_last_token=(1, 2))
    assert at_limit.tolist() == pytest.approx([float(log_probs[1][0, 2]) / 3, float(second) / 2])


def test_a_greedy_score_counts_the_end_token_forced_at_the_length_limit_as_zero(translator, feature_tokenizer,
                                                                                test_sentences, monkeypatch):
    """As beam search counts Marian's `</s>` forced at the limit: the translation's other tokens are the model's."""
    model = translator.model
    monkeypatch.setattr(model.generation_config, "forced_eos_token_id", model.config.eos_token_id)
    [cut] = translator(test_sentences[0], num_beams=1, max_new_tokens=4, return_scores=True, return_tensors=True)
    ids = cut["translation_token_ids"]
    assert len(ids) == 5 and ids[-1] == model.config.eos_token_id, "three tokens, then the forced end"
    inputs = feature_tokenizer(test_sentences[0], return_tensors="pt")
    with torch.no_grad():
        log_probs = torch.log_softmax(model(**inputs, decoder_input_ids=ids[None, :-1]).logits[0], dim=-1)
    chosen = log_probs.gather(-1, ids[1:, None])[:, 0]
    assert cut["score"] == pytest.approx(float(chosen[:-1].sum()) / 4, abs=1e-4)


def test_sampling_switched_on_by_a_generation_config_takes_a_seed_and_one_beam(translator, test_sentences,
                                                                                 monkeypatch):
    from transformers import GenerationConfig

    sampling = GenerationConfig(do_sample=True, max_new_tokens=24)
    draws = [translator(test_sentences[:3], generation_config=sampling, seed=seed) for seed in (5, 5, 6)]
    assert draws[0] == draws[1] != draws[2]
    searched = translator(test_sentences[:3])
    monkeypatch.setattr(translator.model.generation_config, "do_sample", True)  # a model saved sampling
    assert translator(test_sentences[:3]) == searched, "the beams the pipeline was made with win over the default"
    with pytest.raises(ValueError, match="give num_beams=1"):  # a seed asks for sampling, the beams for a search
        translator(test_sentences[0], seed=5)
    draws = [translator(test_sentences[:3], num_beams=1, seed=seed) for seed in (5, 5, 6)]
    assert draws[0] == draws[1] != draws[2]
    # A generation config given at creation keeps the other settings given with it when sampling switches on
    made = pipeline("translation", model=translator.model, tokenizer=translator.tokenizer,
                    generation_config=GenerationConfig(do_sample=True), max_new_tokens=3)
    assert all(len(made.tokenizer(result["translation_text"])["input_ids"]) <= 6
               for result in made(test_sentences[:3], seed=1))


def test_any_iterable_of_sentences_translates_as_a_list(translator, test_sentences):
    """A generator, a datasets column or a KeyDataset, as Transformers' pipelines take them."""
    from datasets import Dataset
    from transformers.pipelines.pt_utils import KeyDataset

    expected = translator(test_sentences[:3])
    column = Dataset.from_dict({"en": test_sentences[:3]})
    for inputs in ((sentence for sentence in test_sentences[:3]), column["en"], KeyDataset(column, "en")):
        assert translator(inputs) == expected, type(inputs).__name__


def test_transformers_4_output_options_work_and_other_options_are_named(translator, test_sentences):
    ids = translator(test_sentences[0], return_tensors=True)[0]["translation_token_ids"]
    assert translator.tokenizer.decode(ids, skip_special_tokens=True).strip() == \
        translator(test_sentences[0])[0]["translation_text"]
    assert translator(test_sentences[0], clean_up_tokenization_spaces=True) == translator(test_sentences[0])
    assert translator(test_sentences[0], fast_decoding=False) == translator(test_sentences[0]), \
        "an argument of the model's own generate"
    for option, message in ((dict(tgt_lang="de"), "`tgt_lang` is not an option of this pipeline"),
                            (dict(return_text=False), "give return_tensors=True"),
                            (dict(num_beam=2), "`num_beam` is not an option of the translation pipeline")):
        with pytest.raises(ValueError, match=message):
            translator(test_sentences[0], **option)


def test_a_sentence_longer_than_the_models_positions_is_cut_there_whatever_the_tokenizer_allows(
        translator, test_sentences, monkeypatch):
    """A checkpoint's tokenizer may allow more tokens than the model has positions (or no limit at all)."""
    monkeypatch.setattr(translator.tokenizer, "model_max_length", int(1e30))
    monkeypatch.setattr(translator.model.config, "max_position_embeddings", 8)
    with pytest.warns(UserWarning, match=r"only its first 8 \(the model's max_position_embeddings\) are translated"):
        cut = translator(test_sentences[0])
    assert cut[0]["translation_text"]


def test_the_pipeline_refuses_a_tokenizer_without_source_features_and_a_direction_it_does_not_translate(
        translator, test_sentences):
    from transformers import PreTrainedTokenizerFast

    plain = PreTrainedTokenizerFast(tokenizer_object=translator.tokenizer.backend_tokenizer, pad_token="<pad>",
                                    eos_token="</s>")
    with pytest.raises(TypeError, match="needs the model's source-feature tokenizer .*not a"):
        pipeline("translation", model=translator.model, tokenizer=plain)
    with pytest.raises(ValueError, match="'translation_de_to_en': the model translates from 'en', not 'de'"):
        pipeline("translation_de_to_en", model=translator.model, tokenizer=translator.tokenizer)
    assert pipeline("translation_en_to_de", model=translator.model, tokenizer=translator.tokenizer,
                    num_beams=4, max_new_tokens=24)(test_sentences[0]) == translator(test_sentences[0])


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


def test_token_ids_end_at_each_translations_end_token_whatever_the_batch_size(translator, test_sentences):
    """A batch pads its shorter translations after their end token; what the pipeline returns is each translation
    alone, as one sentence at a time gives it: ids up to the end token, n-best and scored ones too."""
    sentences = ["A man.", "Two dogs play.", *test_sentences[:2]]
    end = translator.model.config.eos_token_id
    for options in ({}, {"num_return_sequences": 2}, {"return_scores": True}):
        alone = [translator(sentence, return_tensors=True, **options) for sentence in sentences]
        together = translator(sentences, return_tensors=True, batch_size=len(sentences), **options)
        assert len({len(translation["translation_token_ids"]) for translations in alone
                    for translation in translations}) > 1, "translations of different lengths share the batch"
        for one, batched in zip(alone, together, strict=True):
            batched = batched if isinstance(batched, list) else [batched]
            assert [translation["translation_token_ids"].tolist() for translation in batched] == \
                [translation["translation_token_ids"].tolist() for translation in one], options
            assert [translation.get("score") for translation in batched] == \
                pytest.approx([translation.get("score") for translation in one], abs=1e-4)  # padding rounds apart
            for translation in batched:
                ids = translation["translation_token_ids"].tolist()
                assert ids[-1] == end and end not in ids[1:-1], ids
    special = dict(skip_special_tokens=False)
    assert translator(sentences, batch_size=4, **special) == [translator(one, **special)[0] for one in sentences]


def test_factored_text_is_translated_as_text_with_a_warning_naming_the_way_to_give_its_factors(translator):
    """OpenNMT-py's `word￨value` lines (U+FFE8), which `hf-srcfeat-translate` reports without `--input_format
    factored`: one warning a call, naming the first such input; `parse_factored_lines` gives the pipeline their
    words as given, without the values, and no warning."""
    from hf_srcfeat.data.user_factors import parse_factored_lines

    factored = "Two￨Cap dogs￨lower play￨lower .￨other"
    with pytest.warns(UserWarning) as caught:
        translator(["A man.", factored, "  ", factored])
    said = [str(warning.message) for warning in caught if "factors inline" in str(warning.message)]
    assert len(said) == 1, said
    assert said[0].startswith(f"input 1 ({factored!r}) (and 1 more) carries factors inline (word￨value, ")
    assert "parse_factored_lines(translator.tokenizer.annotator, lines, factor_names)" in said[0]
    assert "hf-srcfeat-translate --input_format factored --factor_names NAME" in said[0]
    parses = parse_factored_lines(translator.tokenizer.annotator, [factored], ["case"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert translator(parses) == translator("Two dogs play .")
        translator("The sign ￨ stands between two words .")  # the character itself, now and then, is text


def test_parses_whose_tags_or_relations_the_model_never_saw_are_warned_once_a_call(translator, feature_tokenizer,
                                                                                    test_sentences):
    """As `hf-srcfeat-translate` says once a run: CoNLL-U of another tag set (UPOS `ZZZ`) or relations (`foo:bar`)
    translates with those features unknown, said for the first such sentence of a call; the parser's own labels,
    and a model that reads no tags (the baseline), give no warning."""
    from dataclasses import replace

    from hf_srcfeat import MODEL_CLASSES_BY_TYPE, RelevanceFeaturesConfig
    from hf_srcfeat.pipeline_translation import UnknownLabelsWarning

    from .end_to_end import tiny_method_config
    from .helpers import random_model

    config = tiny_method_config(RelevanceFeaturesConfig, feature_tokenizer, relevance_combine="concat",
                                **feature_tokenizer.feature_vocabularies.sizes())
    reader = pipeline("translation", model=random_model(MODEL_CLASSES_BY_TYPE[config.model_type], config),
                      tokenizer=feature_tokenizer, num_beams=1, max_new_tokens=4)
    parses = feature_tokenizer.annotate(test_sentences[:3])
    retagged = replace(parses[1], words=[replace(word, upos="ZZZ") for word in parses[1].words])
    relabelled = replace(parses[2], words=[replace(word, deprel="foo:bar") for word in parses[2].words])
    words = len(retagged.words)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownLabelsWarning)
        reader(parses)
        reader(test_sentences[:2])
        translator([retagged, relabelled])
    with pytest.warns(UnknownLabelsWarning) as caught:
        reader([parses[0], retagged, relabelled])
    assert [str(warning.message) for warning in caught] == [
        f"input 1 ({retagged.name}): {words} of the {words} words have POS tags the model never saw ('ZZZ'): "
        "translated with them unknown (a parse of another tag set?); said once a call."]
    with pytest.warns(UnknownLabelsWarning, match=r"^input 1 .* words have relations the model never saw "
                                                  r"\('foo:bar'\)"):
        reader(["", relabelled])
