"""SrcFeatTransformerConfig: documented arguments, early and named validation errors, Auto registration."""

from __future__ import annotations

import inspect
import re

import pytest
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

import hf_srcfeat
from hf_srcfeat import SrcFeatTransformerConfig


def test_every_init_argument_is_documented_in_the_class_docstring():
    documented = set(re.findall(r"^\s{8}(\w+) \(`", SrcFeatTransformerConfig.__doc__, flags=re.M))
    arguments = set(inspect.signature(SrcFeatTransformerConfig.__init__).parameters) - {"self", "kwargs"}
    assert arguments - documented == set()


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"d_model": 30, "encoder_attention_heads": 4}, "encoder_attention_heads"),
        ({"d_model": 32, "decoder_attention_heads": 5}, "decoder_attention_heads"),
        ({"encoder_layers": -1}, "encoder_layers"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"encoder_ffn_dim": 2.5}, "encoder_ffn_dim"),
        ({"dropout": 1.5}, "dropout"),
        ({"label_smoothing": -0.1}, "label_smoothing"),
        ({"layernorm_position": "middle"}, "layernorm_position"),
        ({"activation_function": "swishy"}, "activation_function"),
        ({"pad_token_id": 9000}, "pad_token_id"),
        ({"init_std": -1.0}, "init_std"),
    ],
)
def test_invalid_values_raise_a_value_error_naming_the_argument(arguments, named):
    with pytest.raises(ValueError, match=f"`{named}`"):
        SrcFeatTransformerConfig(**arguments)


def test_defaults_are_transformer_base_and_encoder_decoder():
    config = SrcFeatTransformerConfig()
    assert (config.d_model, config.encoder_layers, config.encoder_attention_heads, config.encoder_ffn_dim) == (
        512, 6, 8, 2048)
    assert config.is_encoder_decoder and config.tie_word_embeddings and config.label_smoothing == 0.1
    # generate's DynamicCache reads the decoder depth through get_text_config.
    assert SrcFeatTransformerConfig(decoder_layers=3).get_text_config(decoder=True).num_hidden_layers == 3


def test_config_round_trips_through_json(tmp_path):
    config = SrcFeatTransformerConfig(d_model=64, encoder_attention_heads=2, layernorm_position="pre")
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert type(reloaded) is SrcFeatTransformerConfig
    assert reloaded.to_diff_dict() | {"_name_or_path": ""} == config.to_diff_dict() | {"_name_or_path": ""}


def test_import_registers_the_baseline_with_the_auto_classes():
    config = SrcFeatTransformerConfig(d_model=16, encoder_attention_heads=2, decoder_attention_heads=2,
                                      encoder_layers=1, decoder_layers=1, encoder_ffn_dim=16, decoder_ffn_dim=16,
                                      vocab_size=20)
    assert isinstance(AutoConfig.for_model("srcfeat_transformer"), SrcFeatTransformerConfig)
    assert type(AutoModel.from_config(config)) is hf_srcfeat.SrcFeatTransformerModel
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is hf_srcfeat.SrcFeatTransformerForConditionalGeneration


@pytest.mark.parametrize(("sizes", "named"), [
    ({"encoder_layers": 10**6}, "`encoder_layers`=1000000"),
    ({"d_model": 10**7, "encoder_attention_heads": 1, "decoder_attention_heads": 1}, "`d_model`=10000000"),
    ({"vocab_size": 10**9, "share_embeddings": False, "tie_word_embeddings": False}, "`vocab_size`=1000000000"),
])
def test_sizes_no_machine_holds_are_refused_by_the_config_naming_the_argument(sizes, named):
    """Refused from the sizes alone, before a model allocates anything (encoder_layers 10^6 used to run minutes)."""
    with pytest.raises(ValueError, match=f"{named} makes about"):
        SrcFeatTransformerConfig(**sizes)


def test_each_config_names_the_source_features_its_model_reads():
    from hf_srcfeat import (
        DepsSanConfig,
        DiverseInputConfig,
        LatentFeedbackConfig,
        PhraseRepConfig,
        RelevanceFeaturesConfig,
        SrcFeatComposedConfig,
    )

    assert SrcFeatTransformerConfig().source_features_read == ()
    assert LatentFeedbackConfig().source_features_read == (), "the LFE reads subwords"
    assert DepsSanConfig().source_features_read == ("dep_distance",)
    assert DiverseInputConfig().source_features_read == ("pos_ids",), "the syntactic group (Eq. 12)"
    assert DiverseInputConfig(diverse_variant="loc_diverse").source_features_read == ()
    assert PhraseRepConfig(phrase_segmentation="parse").source_features_read == ("phrase_ids",)
    assert PhraseRepConfig(phrase_segmentation="ngram").source_features_read == ()
    relevance = RelevanceFeaturesConfig(source_factors=["subword_tag", "pos"])
    assert relevance.source_features_read == ("subword_tag_ids", "pos_ids")
    assert not RelevanceFeaturesConfig(source_factors=["subword_tag"]).reads_parse, "subword tags need words only"
    composed = SrcFeatComposedConfig(components=["relevance_features", "deps_san"], source_factors=["lemma"])
    assert composed.source_features_read == ("lemma_ids", "dep_distance")
    assert composed.reads_parse and composed.reads_dependency_distances


def test_a_setting_changed_after_the_config_was_made_is_checked_before_a_model_is_built_or_saved(tmp_path):
    from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration

    small = dict(vocab_size=100, d_model=32, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2,
                 decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32)
    config = DepsSanConfig(**small, deps_san_layers=[1])
    config.encoder_layers = 1  # the dependency-scaled layer would silently not exist
    with pytest.raises(ValueError, match="deps_san_layers"):
        DepsSanForConditionalGeneration(config)
    config = SrcFeatTransformerConfig(**small)
    model = AutoModelForSeq2SeqLM.from_config(config)
    model.config.encoder_attention_heads = 5
    with pytest.raises(ValueError, match="encoder_attention_heads"):
        model.save_pretrained(tmp_path / "model")
    assert not (tmp_path / "model" / "config.json").exists()
