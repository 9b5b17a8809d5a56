"""Deps-SAN (Peng et al.): Eq. (3)-(7) pinned on a tiny model with real parses, the knowledge-sparse
variants of Section 2.2, and the model end to end from raw text."""

from __future__ import annotations

import math

import pytest
import torch

from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration
from hf_srcfeat.modeling_deps_san import dependency_scaled_matrix, knowledge_sparse

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text
from .helpers import masked_softmax, random_model, unmodified_scores

SCALED_HEADS = [1, 3]


@pytest.fixture
def deps_san_config(tiny_config):
    def make(**overrides) -> DepsSanConfig:
        return DepsSanConfig(**tiny_config(encoder_layers=4, **overrides).to_diff_dict())

    return make


@pytest.fixture(scope="module")
def parsed_batch(feature_tokenizer, test_sentences):
    """Four real sentences with different trees, padded."""
    batch = feature_tokenizer(test_sentences[:4], padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    return batch


def test_gaussian_of_the_distance_follows_eq_5():
    distance = torch.tensor([[[0, 1, 2, -1]]])
    for sigma in (1.0, 2.0):
        expected = [math.exp(-d * d / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2) for d in (0, 1, 2)]
        values = dependency_scaled_matrix(distance, sigma, neutral=1.0)[0, 0].tolist()
        assert values[:3] == pytest.approx(expected) and values[3] == 1.0
    assert dependency_scaled_matrix(distance, 1.0, neutral=0.0)[0, 0, 3] == 0.0


@pytest.mark.parametrize(("mode", "combine", "neutral"), [
    ("mult", lambda scores, matrix: scores * matrix, 1.0),
    ("add", lambda scores, matrix: scores + matrix, 0.0),
])
def test_scores_of_the_chosen_layers_and_heads_are_baseline_scores_combined_with_the_gaussian(
    deps_san_config, parsed_batch, mode, combine, neutral
):
    config = deps_san_config(deps_san_heads=SCALED_HEADS, deps_san_mode=mode)
    assert config.scaled_layers == [0, 1], "the lower half of 4 layers by default"
    model = random_model(DepsSanForConditionalGeneration, config)
    scores, attentions = unmodified_scores(model, parsed_batch)
    mask = parsed_batch["attention_mask"]
    matrix = dependency_scaled_matrix(parsed_batch["dep_distance"], sigma=1.0, neutral=neutral)
    for layer in range(4):
        for head in range(4):
            expected = scores[layer][:, head]
            if layer in (0, 1) and head in SCALED_HEADS:
                expected = combine(expected, matrix)  # Eq. (4), each sentence with its own tree
            torch.testing.assert_close(attentions[layer][:, head], masked_softmax(expected, mask))
    assert (attentions[0] * (mask[:, None, None, :] == 0)).sum() == 0, "padding receives no attention mass"


def test_special_token_rows_and_columns_keep_their_baseline_scores(deps_san_config, parsed_batch):
    model = random_model(DepsSanForConditionalGeneration, deps_san_config())
    scores, attentions = unmodified_scores(model, parsed_batch)
    eos_position = int(parsed_batch["attention_mask"][0].sum()) - 1
    assert parsed_batch["word_ids"][0, eos_position] == -1
    row = masked_softmax(scores[0][:1, 0], parsed_batch["attention_mask"][:1])[0, eos_position]
    torch.testing.assert_close(attentions[0][0, 0, eos_position], row)


def test_wink_sparse_gives_far_pairs_the_largest_distance_of_their_sentence():
    distance = torch.tensor([[[0, 1, 7, -1], [1, 0, 8, -1], [7, 8, 0, -1], [-1, -1, -1, -1]]])
    sparsed = knowledge_sparse(distance, "wink", probability=0.1, window=6)
    assert sparsed.tolist() == [[[0, 1, 8, -1], [1, 0, 8, -1], [8, 8, 0, -1], [-1, -1, -1, -1]]]


def test_rs_sparse_replaces_about_q_of_the_word_pairs_by_the_largest_distance():
    torch.manual_seed(0)
    distance = torch.randint(0, 5, (8, 40, 40))
    distance[:, -1], distance[:, :, -1] = -1, -1
    sparsed = knowledge_sparse(distance, "rs", probability=0.1, window=6)
    changed = sparsed != distance
    largest = distance.amax(dim=(1, 2), keepdim=True).expand_as(distance)
    assert torch.equal(sparsed[changed], largest[changed])
    word_pairs = distance >= 0
    assert not changed[~word_pairs].any()
    # Elements already at the largest distance cannot change: compare against the eligible ones.
    eligible = word_pairs & (distance != largest)
    assert 0.08 < changed.sum() / eligible.sum() < 0.12


@pytest.mark.parametrize("sparse", ["rs", "wink"])
def test_sparsing_acts_in_training_only(deps_san_config, parsed_batch, sparse):
    config = deps_san_config(knowledge_sparse=sparse, wink_sparse_window=1)
    sparse_model = random_model(DepsSanForConditionalGeneration, config)
    plain_model = random_model(DepsSanForConditionalGeneration, deps_san_config())
    inputs = dict(parsed_batch)
    evaluated = sparse_model.get_encoder()(**inputs).last_hidden_state
    torch.testing.assert_close(evaluated, sparse_model.get_encoder()(**inputs).last_hidden_state, rtol=0, atol=0)
    torch.testing.assert_close(evaluated, plain_model.get_encoder()(**inputs).last_hidden_state, rtol=0, atol=0)
    sparse_model.train()  # dropout is 0 in the tiny config: only the sparsing differs
    trained = sparse_model.get_encoder()(**inputs).last_hidden_state
    assert not torch.allclose(trained, evaluated)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"deps_san_layers": [4]}, "deps_san_layers"),
    ({"deps_san_layers": []}, "deps_san_layers"),
    ({"deps_san_heads": [0, 0]}, "deps_san_heads"),
    ({"deps_san_sigma": 0}, "deps_san_sigma"),
    ({"deps_san_mode": "multiply"}, "deps_san_mode"),
    ({"knowledge_sparse": "random"}, "knowledge_sparse"),
    ({"rs_sparse_probability": 1.5}, "rs_sparse_probability"),
])
def test_invalid_arguments_raise_errors_naming_them(deps_san_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        deps_san_config(**overrides)


def test_a_source_without_dependency_distances_is_refused(deps_san_config, parsed_batch):
    model = random_model(DepsSanForConditionalGeneration, deps_san_config())
    with pytest.raises(ValueError, match="Deps-SAN needs `dep_distance`"):
        model.get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])


class TestDepsSanEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, feature_tokenizer, train_pairs, train_annotations):
        config = tiny_method_config(DepsSanConfig, feature_tokenizer, deps_san_heads=[0, 2], knowledge_sparse="rs")
        return train_from_raw_text(DepsSanForConditionalGeneration, config, feature_tokenizer, train_pairs)
