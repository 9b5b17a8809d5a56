"""Translating without a parse: every model type, given the subword tokens alone, gives each feature
it reads its default (`<unk>` labels, unknown dependency links, one word/phrase per token) with a warning, and
beam-searches; a training forward without the features it needs still fails with a clear error."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from hf_srcfeat import MODEL_CLASSES_BY_TYPE, PhraseRepConfig
from hf_srcfeat.source_features import UNKNOWN_DISTANCE, MissingFeatureDefaults

from .end_to_end import tiny_method_config
from .test_half_precision import VARIANTS, variant_config

FEATURE_READING = ["deps_san", "relevance_concat", "fusing_diverse", "composed"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_model_type_translates_raw_subwords_without_a_parse(variant, feature_tokenizer, test_sentences):
    config = variant_config(variant, feature_tokenizer)
    torch.manual_seed(0)
    model = MODEL_CLASSES_BY_TYPE[config.model_type](config).eval()
    batch = feature_tokenizer(test_sentences[:3], source_features=False, padding=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "attention_mask"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        generated = model.generate(**batch, num_beams=2, max_new_tokens=6)
    assert generated.shape[0] == 3
    warned = [str(w.message) for w in caught if "does not have (no parse?)" in str(w.message)]
    assert bool(warned) == (variant in FEATURE_READING), warned


def test_phrase_representations_from_parse_phrases_fall_back_to_one_phrase_per_token(feature_tokenizer,
                                                                                     test_sentences):
    config = tiny_method_config(PhraseRepConfig, feature_tokenizer, phrase_segmentation="parse")
    model = MODEL_CLASSES_BY_TYPE[config.model_type](config).eval()
    batch = feature_tokenizer(test_sentences[:2], source_features=False, padding=True, return_tensors="pt")
    with pytest.warns(UserWarning, match="phrase_ids"):
        assert model.generate(**batch, max_new_tokens=4).shape[0] == 2


def test_the_defaults_are_unknown_labels_unknown_links_and_one_word_per_token():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    defaults = MissingFeatureDefaults(2, 3, torch.device("cpu"), mask)
    with pytest.warns(UserWarning):
        assert defaults.feature("pos_ids", "test").tolist() == [[1, 1, 1], [1, 1, 0]]
        assert (defaults.feature("dep_distance", "test") == UNKNOWN_DISTANCE).all()
        assert defaults.feature("word_ids", "test").tolist() == [[0, 1, 2], [0, 1, 2]]


def test_a_training_forward_without_the_features_it_needs_is_an_error(feature_tokenizer, test_sentences):
    config = variant_config("deps_san", feature_tokenizer)
    model = MODEL_CLASSES_BY_TYPE[config.model_type](config).train()
    batch = feature_tokenizer(test_sentences[:2], text_target=test_sentences[2:4], source_features=False,
                              padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match="Deps-SAN needs `dep_distance`"):
        model(**batch)


def test_the_translate_command_translates_without_a_parse_line_for_line(feature_tokenizer,
                                                                        test_sentences, tmp_path):
    from hf_srcfeat.commands.translate import main as translate_main

    config = variant_config("relevance_concat", feature_tokenizer)
    torch.manual_seed(0)
    MODEL_CLASSES_BY_TYPE[config.model_type](config).save_pretrained(tmp_path / "model")
    feature_tokenizer.save_pretrained(tmp_path / "model")
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in [test_sentences[0], "", test_sentences[1]]), encoding="utf-8")
    with pytest.warns(UserWarning, match="no parse"):
        assert translate_main(["--model", str(tmp_path / "model"), "--input", str(source), "--output",
                               str(tmp_path / "out.de"), "--no_parse", "--num_beams", "2", "--max_new_tokens", "6",
                               "--quiet", "--device", "cpu", "--stanza_dir", str(tmp_path / "no_models_here"),
                               "--report_json", str(tmp_path / "report.json")]) == 0
    lines = (tmp_path / "out.de").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and lines[1] == "" and lines[0] and lines[2]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["parsed"] is False and report["translated"] == 2, "the report says no sentence had its parse"


def test_conllu_input_whose_tags_the_model_never_saw_is_said_once(feature_tokenizer, test_sentences, tmp_path,
                                                                  capsys):
    from hf_srcfeat.commands.translate import main as translate_main
    from hf_srcfeat.conllu import conllu_lines

    config = variant_config("relevance_concat", feature_tokenizer)
    torch.manual_seed(0)
    MODEL_CLASSES_BY_TYPE[config.model_type](config).save_pretrained(tmp_path / "model")
    feature_tokenizer.save_pretrained(tmp_path / "model")
    parses = feature_tokenizer.annotate(test_sentences[:3])
    blocks = ["\n".join(conllu_lines(parse)) + "\n\n" for parse in parses]
    untagged = "\n".join("\t".join("_" if column == 3 else value for column, value in enumerate(line.split("\t")))
                         if not line.startswith("#") else line for line in blocks[1].splitlines()) + "\n\n"
    arguments = ["--model", str(tmp_path / "model"), "--output", str(tmp_path / "out.de"), "--input_format",
                 "conllu", "--num_beams", "1", "--max_new_tokens", "4", "--quiet", "--device", "cpu"]
    (tmp_path / "tagged.conllu").write_text("".join(blocks), encoding="utf-8")
    assert translate_main([*arguments, "--input", str(tmp_path / "tagged.conllu")]) == 0
    assert "never saw" not in capsys.readouterr().err, "the parser's own tags are known"
    (tmp_path / "mixed.conllu").write_text(blocks[0] + untagged + untagged, encoding="utf-8")
    assert translate_main([*arguments, "--input", str(tmp_path / "mixed.conllu")]) == 0
    errors = capsys.readouterr().err
    words = len(parses[1].words)
    assert errors.count("never saw") == 1, "said once"
    assert f"line {len(blocks[0].splitlines()) + 1}: {words} of the {words} words have POS tags the model never " \
           "saw ('_')" in errors
