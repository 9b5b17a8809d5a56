"""The end-to-end behaviour every model of the zoo must show from raw text, as a test class to subclass.

A method's test module declares

    class TestMyMethodEndToEnd(EndToEndFromRawText):
        @pytest.fixture(scope="class")
        @classmethod
        def trained(cls, feature_tokenizer, train_pairs):
            return train_from_raw_text(MyMethodForConditionalGeneration, MyMethodConfig(...), feature_tokenizer,
                                       train_pairs)

and inherits the checks below, run on that model.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from hf_srcfeat import pipeline
from hf_srcfeat.generation_preparation import forget_preparations, matching_preparation

from .helpers import train_briefly


def tiny_method_config(config_class, tokenizer, **overrides):
    """A 2+2-layer, d_model 64 config over the feature-aware tokenizer's vocabularies."""
    arguments = dict(vocab_size=len(tokenizer), d_model=64, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                     dropout=0.1)
    arguments.update(overrides)
    return config_class(**arguments)


def train_from_raw_text(model_class, config, tokenizer, train_pairs, steps: int = 80):
    """The model trained briefly on the 300 parsed Multi30k pairs, sources encoded from raw text."""
    pairs = {"source": list(train_pairs["source"])[:300], "target": list(train_pairs["target"])[:300]}
    torch.manual_seed(0)
    model = model_class(config)
    if hasattr(model, "load_pretrained_parts"):
        model.load_pretrained_parts()  # as hf-srcfeat-train does for a new model
    losses = train_briefly(model, tokenizer, pairs, steps=steps)
    model.generation_config.max_new_tokens = 20
    return model, losses


class EndToEndFromRawText:
    """Training, generation, the pipeline and saving, each from raw sentences through the tokenizer."""

    pytestmark = [pytest.mark.slow]  # every subclass trains a model first

    def test_training_from_raw_text_lowers_the_loss(self, trained):
        _, losses = trained
        assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:5]) / 5, losses

    @pytest.mark.parametrize("num_beams", [1, 4])
    def test_padded_batch_generates_what_each_sentence_generates_alone(self, trained, feature_tokenizer,
                                                                       test_sentences, num_beams):
        model, _ = trained
        batch = feature_tokenizer(test_sentences, padding=True, return_tensors="pt")
        together = model.generate(**batch, num_beams=num_beams)
        assert torch.equal(together, model.generate(**batch, num_beams=num_beams, use_cache=False))
        for index, sentence in enumerate(test_sentences):
            alone = model.generate(**feature_tokenizer(sentence, return_tensors="pt"), num_beams=num_beams)
            assert feature_tokenizer.decode(alone[0], skip_special_tokens=True) == \
                feature_tokenizer.decode(together[index], skip_special_tokens=True)

    @pytest.mark.parametrize("num_beams", [1, 4])
    def test_fast_decoding_generates_what_transformers_loops_generate(self, trained, feature_tokenizer,
                                                                      test_sentences, num_beams):
        model, _ = trained
        batch = feature_tokenizer(test_sentences, padding=True, return_tensors="pt")
        expected = model.generate(**batch, num_beams=num_beams, fast_decoding=False)
        forget_preparations(model)
        for _ in range(2):  # the first call prepares, the second reuses what it prepared
            assert torch.equal(model.generate(**batch, num_beams=num_beams), expected)
        assert matching_preparation(model, {**batch, "num_beams": num_beams}) is not None

    def test_translation_pipeline_translates_raw_sentences(self, trained, feature_tokenizer, test_sentences):
        model, _ = trained
        translator = pipeline("translation", model=model, tokenizer=feature_tokenizer, num_beams=4)
        outputs = translator(test_sentences[:3], batch_size=3)
        assert outputs == [translator(sentence)[0] for sentence in test_sentences[:3]]
        assert all(output["translation_text"] for output in outputs)
        for sentence, output in zip(test_sentences[:3], outputs, strict=True):  # every feature the model reads
            alone = model.generate(**feature_tokenizer(sentence, return_tensors="pt"), num_beams=4)
            assert output["translation_text"] == feature_tokenizer.decode(alone[0], skip_special_tokens=True).strip()

    def test_the_pipeline_builds_tree_distances_only_for_a_model_that_reads_them(self, trained, feature_tokenizer,
                                                                                 test_sentences, monkeypatch):
        from hf_srcfeat import tokenization_source_features

        model, _ = trained
        built = []
        distance_matrix = tokenization_source_features.token_distance_matrix
        monkeypatch.setattr(tokenization_source_features, "token_distance_matrix",
                            lambda *args: built.append(1) or distance_matrix(*args))
        translator = pipeline("translation", model=model, tokenizer=feature_tokenizer, num_beams=1)
        translator(test_sentences[:3], batch_size=2)
        assert bool(built) == model.config.reads_dependency_distances

    def test_the_pipeline_parses_and_encodes_only_what_the_model_reads(self, trained, feature_tokenizer,
                                                                        test_sentences, monkeypatch):
        from hf_srcfeat import SourceFeatureTokenizer
        from hf_srcfeat.source_features import SOURCE_FEATURE_NAMES

        model, _ = trained
        depths, given = [], []
        annotate, generate = SourceFeatureTokenizer.annotate, model.generate
        monkeypatch.setattr(SourceFeatureTokenizer, "annotate", lambda tokenizer, texts, **options: depths.append(
            options.get("words_only", False)) or annotate(tokenizer, texts, **options))
        monkeypatch.setattr(model, "generate", lambda **inputs: given.append(set(inputs)) or generate(**inputs))
        translator = pipeline("translation", model=model, tokenizer=feature_tokenizer, num_beams=1)
        translator(test_sentences[:3], batch_size=2)
        assert depths == [not model.config.reads_parse], "words alone for a model that reads no tag or tree"
        inputs = {"input_ids", "attention_mask", *SOURCE_FEATURE_NAMES}
        read = {"input_ids", "attention_mask", *model.config.source_features_read}
        assert given and all(names & inputs == read for names in given), (given, read)

    def test_save_and_load_round_trip_gives_identical_logits(self, trained, feature_tokenizer, test_sentences,
                                                             tmp_path):
        model, _ = trained
        model.save_pretrained(tmp_path)
        reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
        assert type(reloaded) is type(model)
        assert reloaded.config.to_diff_dict() == model.config.to_diff_dict()
        batch = feature_tokenizer(test_sentences[:3], text_target=test_sentences[3:6], padding=True,
                                  return_tensors="pt")
        assert torch.equal(model(**batch).logits, reloaded(**batch).logits)
