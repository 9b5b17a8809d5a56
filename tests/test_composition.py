"""Several methods in one model (`SrcFeatComposedConfig`): one component is exactly that method's model, every pair
of methods on different extension points composes with the parameters of both, each component still acts, and
what cannot compose is refused by name. On real parsed Multi30k sentences."""

from __future__ import annotations

import inspect
import itertools

import pytest
import torch
from transformers import AutoConfig

from hf_srcfeat import (
    MODEL_CLASSES_BY_TYPE,
    DepsSanConfig,
    RelevanceFeaturesConfig,
    SrcFeatComposedConfig,
    SrcFeatComposedForConditionalGeneration,
)
from hf_srcfeat.configuration_composed import COMPONENT_CONFIGS, EXTENSION_POINTS

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text

#: Each method's settings in these tests: small phrase sublayers, an LFE with its own embeddings (relevance features
#: make the NMT subword embeddings narrower than d_model), no embedding sharing (relevance features' default).
COMPONENT_SETTINGS = {
    "relevance_features": {"relevance_combine": "concat"},
    "diverse_input": {"diverse_variant": "fusing_diverse"},
    "deps_san": {"deps_san_heads": [0, 2]},
    "phrase_rep": {"phrase_pooling_dim": 64, "phrase_combination_dim": 64},
    "latent_feedback": {"lfe_own_embeddings": True},
}
COMPOSABLE_PAIRS = [pair for pair in itertools.combinations(COMPONENT_CONFIGS, 2)
                    if EXTENSION_POINTS[pair[0]] != EXTENSION_POINTS[pair[1]]]


def backbone_settings(tokenizer) -> dict:
    return {"share_embeddings": False, "dropout": 0.0, **tokenizer.feature_vocabularies.sizes()}


def method_model(component: str, tokenizer):
    """The single-method model with the same settings."""
    config_class = COMPONENT_CONFIGS[component]
    accepted = inspect.signature(config_class.__init__).parameters
    sizes = {name: size for name, size in tokenizer.feature_vocabularies.sizes().items() if name in accepted}
    config = tiny_method_config(config_class, tokenizer, share_embeddings=False, dropout=0.0,
                                **COMPONENT_SETTINGS[component], **sizes)
    torch.manual_seed(0)
    return MODEL_CLASSES_BY_TYPE[component](config).eval()


def composed_model(components, tokenizer, seed: int = 0):
    settings = backbone_settings(tokenizer)
    for component in components:
        settings.update(COMPONENT_SETTINGS[component])
    config = tiny_method_config(SrcFeatComposedConfig, tokenizer, components=list(components), **settings)
    torch.manual_seed(seed)
    return SrcFeatComposedForConditionalGeneration(config).eval()


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.fixture(scope="module")
def batch(feature_tokenizer, test_sentences):
    return dict(feature_tokenizer(test_sentences[:4], text_target=test_sentences[4:8], padding=True,
                                  return_tensors="pt"))


@pytest.mark.parametrize("component", list(COMPONENT_CONFIGS))
def test_one_component_is_that_methods_model_with_the_same_parameters_and_logits(component, feature_tokenizer,
                                                                                 batch):
    alone = method_model(component, feature_tokenizer)
    composed = composed_model([component], feature_tokenizer)
    assert type(composed.model.encoder) is type(alone.model.encoder)
    assert type(composed.model.decoder) is type(alone.model.decoder)
    composed.load_state_dict(alone.state_dict(), strict=True)
    with torch.no_grad():
        assert torch.equal(composed(**batch).logits, alone(**batch).logits)


@pytest.mark.parametrize("pair", COMPOSABLE_PAIRS, ids="+".join)
def test_every_pair_on_different_extension_points_has_the_parameters_of_both_and_trains(pair, feature_tokenizer,
                                                                                        batch):
    baseline = parameter_count(MODEL_CLASSES_BY_TYPE["srcfeat_transformer"](
        tiny_method_config(SrcFeatComposedConfig, feature_tokenizer, **backbone_settings(feature_tokenizer))))
    composed = composed_model(pair, feature_tokenizer).train()
    added = [parameter_count(method_model(component, feature_tokenizer)) - baseline for component in pair]
    assert parameter_count(composed) == baseline + sum(added)
    loss = composed(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)
    unused = [name for name, parameter in composed.named_parameters() if parameter.grad is None]
    assert unused == []  # every part of both methods takes part in the loss


def test_each_component_still_acts_in_the_composition(feature_tokenizer, batch):
    relevance = method_model("relevance_features", feature_tokenizer)
    composed = composed_model(["relevance_features", "deps_san"], feature_tokenizer)
    composed.load_state_dict(relevance.state_dict(), strict=True)  # Deps-SAN adds no parameters
    encoder = composed.get_encoder()
    inputs = {name: value for name, value in batch.items() if name not in ("labels",)}
    with torch.no_grad():
        # The input is relevance features' factored embedding ...
        embedded = encoder.embed_source(inputs["input_ids"], encoder_features(inputs), inputs["attention_mask"])
        alone = relevance.get_encoder().embed_source(inputs["input_ids"], encoder_features(inputs),
                                                     inputs["attention_mask"])
        assert torch.equal(embedded, alone)
        # ... and Deps-SAN scales the chosen layers' self-attention, so the translation model differs.
        contexts = encoder.layer_contexts(inputs["input_ids"], embedded, encoder_features(inputs),
                                          inputs["attention_mask"])
        assert [context.score_modification is not None for context in contexts] == [True, False]
        assert not torch.allclose(composed(**batch).logits, relevance(**batch).logits)


def encoder_features(inputs: dict):
    from hf_srcfeat import SourceFeatures

    return SourceFeatures(**{name: inputs.get(name) for name in SourceFeatures.__dataclass_fields__
                             if name in inputs})


def test_the_composed_config_round_trips_through_auto_config(tmp_path, feature_tokenizer):
    config = composed_model(["diverse_input", "deps_san", "phrase_rep", "latent_feedback"], feature_tokenizer).config
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is SrcFeatComposedConfig
    assert loaded.to_diff_dict() == config.to_diff_dict()
    assert loaded.scaled_layers == config.scaled_layers == [0]  # a component's property, read through
    assert loaded.group_widths == config.group_widths


@pytest.mark.parametrize(("arguments", "message"), [
    ({"components": ["relevance_features", "diverse_input"]}, "both replace the source input representation"),
    ({"components": ["deps_san", "deps_san"]}, "must be distinct"),
    ({"components": ["syntax"]}, "must be distinct model types"),
    ({"components": "deps_san"}, "must be a list"),
    ({"components": ["deps_san"], "relevance_combine": "concat"},
     "`relevance_combine` is an argument of relevance_features, which is not among `components`"),
    ({"components": ["deps_san"], "deps_san_layers": [7]}, "deps_san_layers"),
    ({"components": ["phrase_rep", "latent_feedback"], "share_lfe_parameters": True}, "share_lfe_parameters"),
    ({"components": ["relevance_features", "latent_feedback"], "relevance_combine": "concat"},
     "lfe_own_embeddings=True"),
])
def test_what_cannot_compose_is_refused_by_name(arguments, message):
    with pytest.raises(ValueError, match=message):
        SrcFeatComposedConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                              decoder_attention_heads=4, **arguments)


def test_a_component_default_of_a_backbone_argument_applies_unless_given():
    assert SrcFeatComposedConfig(components=["relevance_features", "deps_san"]).share_embeddings is False
    assert SrcFeatComposedConfig(components=["deps_san"]).share_embeddings is True
    assert SrcFeatComposedConfig(components=["relevance_features"], relevance_combine="add",
                                 share_embeddings=True).share_embeddings is True


def test_an_argument_changed_after_construction_reaches_the_components_properties():
    config = SrcFeatComposedConfig(components=["relevance_features", "deps_san"], relevance_combine="concat")
    config.d_model, config.deps_san_layers = 256, [0, 1]
    alone = RelevanceFeaturesConfig(relevance_combine="concat", d_model=256)
    assert config.factor_widths == alone.factor_widths != RelevanceFeaturesConfig(relevance_combine="concat").factor_widths
    assert config.scaled_layers == DepsSanConfig(deps_san_layers=[0, 1]).scaled_layers == [0, 1]


class TestComposedEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, feature_tokenizer, train_pairs):
        settings = {**feature_tokenizer.feature_vocabularies.sizes(), **COMPONENT_SETTINGS["relevance_features"],
                    **COMPONENT_SETTINGS["deps_san"], **COMPONENT_SETTINGS["phrase_rep"],
                    **COMPONENT_SETTINGS["latent_feedback"]}
        config = tiny_method_config(SrcFeatComposedConfig, feature_tokenizer, components=[
            "relevance_features", "deps_san", "phrase_rep", "latent_feedback"], **settings)
        return train_from_raw_text(SrcFeatComposedForConditionalGeneration, config, feature_tokenizer, train_pairs)
