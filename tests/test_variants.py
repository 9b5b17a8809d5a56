"""Named variants: `--variant NAME` trains the benchmark's set-up of that name, the variants marked exportable are
exactly those the CTranslate2 exporter takes, and `--help_model TYPE` documents a model type's settings."""

from __future__ import annotations

import json

import pytest

from benchmarks import benchmark
from hf_srcfeat.commands import train
from hf_srcfeat.integrations.ctranslate2 import check_exportable
from hf_srcfeat.variants import VARIANTS


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_variants_marked_for_ctranslate2_are_those_the_exporter_takes(name, feature_tokenizer):
    size = ["--d_model", "64", "--attention_heads", "4"]
    pretrained = ["--config_overrides", '{"lfe_pretrained_from": "a/dae"}'] if name == "lfe_dae" else []
    model_args, _, _ = train.parse_arguments(["--output_dir", "unused", "--variant", name, *size, *pretrained])
    config = train.model_config(model_args, len(feature_tokenizer), feature_tokenizer.feature_vocabularies.sizes())
    try:
        check_exportable(config)
        exportable = True
    except ValueError:
        exportable = False
    assert exportable == VARIANTS[name].ctranslate2


def test_a_variant_is_the_benchmarks_system_of_that_name_and_given_settings_win():
    model_args, _, _ = train.parse_arguments(["--output_dir", "unused", "--variant", "relevance_concat",
                                              "--config_overrides", '{"dropout": 0.2}'])
    assert model_args.model_type == benchmark.SYSTEMS["relevance_concat"][0] == "relevance_features"
    assert json.loads(model_args.config_overrides) == {"relevance_combine": "concat", "dropout": 0.2}
    composed = train.parse_arguments(["--output_dir", "unused", "--variant", "relevance_concat+deps_san"])[0]
    assert (composed.model_type, json.loads(composed.config_overrides)) == benchmark.COMPOSED_SYSTEMS[
        "relevance_concat+deps_san"]
    with pytest.raises(SystemExit, match="--variant deps_san is a deps_san model; --model_type phrase_rep"):
        train.parse_arguments(["--output_dir", "unused", "--variant", "deps_san", "--model_type", "phrase_rep"])
    with pytest.raises(SystemExit, match="no variant 'relevance'; the variants are baseline, deps_san"):
        train.parse_arguments(["--output_dir", "unused", "--variant", "relevance"])


def test_help_model_lists_a_model_types_settings_with_their_defaults_and_variants(capsys):
    with pytest.raises(SystemExit) as exit_code:
        train.parse_arguments(["--help_model", "relevance_features"])
    assert exit_code.value.code == 0
    text = capsys.readouterr().out
    assert "relevance_combine (`str`, *optional*, defaults to `\"self_relevance\"`)" in text
    assert "  relevance_combine = 'self_relevance'" in text and "--variant relevance_concat:" in text


def test_the_documentations_variant_table_is_the_libraries():
    from hf_srcfeat.variants import markdown_table

    from .helpers import REPO

    assert markdown_table() in (REPO / "docs" / "models" / "index.md").read_text()
