"""Feature dropout (`config.feature_dropout`): in training, whole words lose a feature at the configured rate (ids
become <unk>, dependency links become unknown and Deps-SAN scores them as the baseline); evaluation never drops;
bad settings are refused by name. On real parsed Multi30k sentences."""

from __future__ import annotations

import pytest
import torch

from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration, SrcFeatTransformerConfig
from hf_srcfeat.feature_dropout import UNKNOWN_DISTANCE, apply_feature_dropout
from hf_srcfeat.feature_vocabulary import UNK_ID
from hf_srcfeat.source_features import SourceFeatures

from .helpers import masked_softmax, random_model, unmodified_scores


@pytest.fixture(scope="module")
def parsed(feature_tokenizer, test_sentences):
    return feature_tokenizer(test_sentences[:4], padding=True, return_tensors="pt")


def features_of(batch) -> SourceFeatures:
    return SourceFeatures(**{name: batch[name] for name in ("pos_ids", "lemma_ids", "word_ids", "dep_distance")})


def test_a_dropped_word_loses_the_feature_on_all_its_subwords_and_nothing_else_changes(parsed):
    torch.manual_seed(0)
    features = features_of(parsed)
    dropped = apply_feature_dropout(features, {"pos_ids": 0.5})
    words = parsed["word_ids"]
    changed = dropped.pos_ids != features.pos_ids
    assert changed.any() and (dropped.pos_ids[changed] == UNK_ID).all()
    for row in range(words.shape[0]):
        for word in words[row].unique().tolist():
            if word < 0:
                continue
            tokens = dropped.pos_ids[row][words[row] == word]
            assert (tokens == UNK_ID).all() or torch.equal(tokens, features.pos_ids[row][words[row] == word]), \
                "one draw per word"
    assert torch.equal(dropped.pos_ids[words < 0], features.pos_ids[words < 0]), "special tokens and padding kept"
    assert torch.equal(dropped.lemma_ids, features.lemma_ids) and dropped.dep_distance is features.dep_distance
    rate = changed.float().sum() / (words >= 0).sum()
    assert 0.25 < rate < 0.75


def test_dropped_links_are_unknown_and_deps_san_scores_them_as_the_baseline(parsed, tiny_config):
    features = apply_feature_dropout(features_of(parsed), {"dep_distance": 1.0})
    word_pairs = (parsed["dep_distance"] >= 0)
    assert (features.dep_distance[word_pairs] == UNKNOWN_DISTANCE).all()
    assert torch.equal(features.dep_distance[~word_pairs], parsed["dep_distance"][~word_pairs])

    # With every link unknown (and </s> neutral too), a scaled layer scores exactly as the baseline in training.
    config = DepsSanConfig(**tiny_config(encoder_layers=2, feature_dropout={"dep_distance": 1.0}).to_diff_dict(),
                           special_token_distance="neutral")
    model = random_model(DepsSanForConditionalGeneration, config).train()  # dropout 0: only the feature dropout
    scores, attentions = unmodified_scores(model, parsed)
    torch.testing.assert_close(attentions[0][:, 0], masked_softmax(scores[0][:, 0], parsed["attention_mask"]))
    model.eval()
    scores, attentions = unmodified_scores(model, parsed)
    assert not torch.allclose(attentions[0][:, 0], masked_softmax(scores[0][:, 0], parsed["attention_mask"])), \
        "evaluation keeps the parse"


def test_evaluation_never_drops_and_training_does(parsed, feature_tokenizer):
    from hf_srcfeat import RelevanceFeaturesConfig, RelevanceFeaturesForConditionalGeneration

    from .end_to_end import tiny_method_config

    config = tiny_method_config(RelevanceFeaturesConfig, feature_tokenizer, relevance_combine="concat", dropout=0.0,
                                feature_dropout={"pos_ids": 1.0, "lemma_ids": 1.0},
                                **feature_tokenizer.feature_vocabularies.sizes())
    model = random_model(RelevanceFeaturesForConditionalGeneration, config).eval()
    first = model.get_encoder()(**parsed).last_hidden_state
    torch.testing.assert_close(first, model.get_encoder()(**parsed).last_hidden_state, rtol=0, atol=0)
    model.train()
    assert not torch.allclose(model.get_encoder()(**parsed).last_hidden_state, first), "training hides the tags"


@pytest.mark.parametrize(("rates", "message"), [
    ({"word_ids": 0.1}, "word_ids"),
    ({"pos": 0.1}, "'pos'"),
    ({"pos_ids": 1.5}, "pos_ids"),
    ([0.1], "dict"),
])
def test_bad_feature_dropout_settings_are_refused_by_name(rates, message):
    with pytest.raises(ValueError, match=message):
        SrcFeatTransformerConfig(feature_dropout=rates)
