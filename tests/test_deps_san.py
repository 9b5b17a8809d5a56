"""Deps-SAN (Peng et al.): Eq. (3)-(7) pinned on a tiny model with real parses, the knowledge-sparse
variants of Section 2.2, and the model end to end from raw text."""

from __future__ import annotations

import math

import pytest
import torch

from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration
from hf_srcfeat.modeling_deps_san import (
    dependency_scaled_matrix,
    knowledge_sparse,
    place_special_tokens_farthest,
)

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text
from .helpers import masked_softmax, random_model, unmodified_scores

SCALED_HEADS = [1, 3]


@pytest.fixture
def deps_san_config(tiny_config):
    def make(**overrides) -> DepsSanConfig:
        return DepsSanConfig(**{**tiny_config(encoder_layers=4).to_diff_dict(), **overrides})

    return make


@pytest.fixture(scope="module")
def parsed_batch(feature_tokenizer, test_sentences):
    """Four real sentences with different trees, padded."""
    batch = feature_tokenizer(test_sentences[:4], padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    return batch


def test_gaussian_of_the_distance_follows_eq_5():
    distance = torch.tensor([[[0, 1, 2, -1]]])
    for variance in (1.0, 4.0):  # sigma^2, the quantity of Table 2b's grid
        expected = [math.exp(-d * d / (2 * variance)) / math.sqrt(2 * math.pi * variance) for d in (0, 1, 2)]
        values = dependency_scaled_matrix(distance, variance, neutral=1.0)[0, 0].tolist()
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
    distance = place_special_tokens_farthest(parsed_batch["dep_distance"])
    matrix = dependency_scaled_matrix(distance, variance=1.0, neutral=neutral)
    for layer in range(4):
        for head in range(4):
            expected = scores[layer][:, head]
            if layer in (0, 1) and head in SCALED_HEADS:
                expected = combine(expected, matrix)  # Eq. (4), each sentence with its own tree
            torch.testing.assert_close(attentions[layer][:, head], masked_softmax(expected, mask))
    assert (attentions[0] * (mask[:, None, None, :] == 0)).sum() == 0, "padding receives no attention mass"


def test_end_of_sentence_is_one_step_farther_than_the_farthest_word_pair_by_default(deps_san_config, parsed_batch):
    """The authors' implementation: `</s>` gets a scale of about 0 in its row and column, not the baseline's 1."""
    distance = parsed_batch["dep_distance"][0]
    eos_position = int(parsed_batch["attention_mask"][0].sum()) - 1
    assert parsed_batch["word_ids"][0, eos_position] == -1 and distance[eos_position].max() == -1
    farthest = int(distance.max())
    filled = place_special_tokens_farthest(parsed_batch["dep_distance"])[0]
    assert (filled[eos_position, : eos_position + 1] == farthest + 1).all()
    assert (filled[: eos_position + 1, eos_position] == farthest + 1).all()
    words = slice(0, eos_position)
    assert torch.equal(filled[words, words], distance[words, words]), "word pairs keep their tree distance"

    model = random_model(DepsSanForConditionalGeneration, deps_san_config())
    scores, attentions = unmodified_scores(model, parsed_batch)
    scale = math.exp(-((farthest + 1) ** 2) / 2) / math.sqrt(2 * math.pi)
    assert scale < 0.02
    row = scores[0][0, 0, eos_position, : eos_position + 1] * scale  # every score of the </s> row shrinks
    expected = row.softmax(-1)
    torch.testing.assert_close(attentions[0][0, 0, eos_position, : eos_position + 1], expected)


def test_neutral_special_tokens_keep_their_baseline_scores(deps_san_config, parsed_batch):
    model = random_model(DepsSanForConditionalGeneration, deps_san_config(special_token_distance="neutral"))
    scores, attentions = unmodified_scores(model, parsed_batch)
    eos_position = int(parsed_batch["attention_mask"][0].sum()) - 1
    row = masked_softmax(scores[0][:1, 0], parsed_batch["attention_mask"][:1])[0, eos_position]
    torch.testing.assert_close(attentions[0][0, 0, eos_position], row)


def test_a_config_saved_with_a_standard_deviation_reads_it_as_variance_and_keeps_its_old_behaviour():
    config = DepsSanConfig(deps_san_sigma=2.0)
    assert config.deps_san_variance == 4.0 and not hasattr(config, "deps_san_sigma")
    assert (config.special_token_distance, config.sparsed_distance) == ("neutral", "farthest")
    assert (DepsSanConfig().special_token_distance, DepsSanConfig().sparsed_distance) == ("farthest", "k")
    assert "deps_san_sigma" not in config.to_dict()


def test_wink_sparse_gives_pairs_farther_than_k_the_distance_k_as_the_paper_says():
    distance = torch.tensor([[[0, 1, 7, -1], [1, 0, 8, -1], [7, 8, 0, -1], [-1, -1, -1, -1]]])
    sparsed = knowledge_sparse(distance, "wink", probability=0.1, k=6)
    assert sparsed.tolist() == [[[0, 1, 6, -1], [1, 0, 6, -1], [6, 6, 0, -1], [-1, -1, -1, -1]]]
    farthest = knowledge_sparse(distance, "wink", probability=0.1, k=6, sparsed_distance="farthest")
    assert farthest.tolist() == [[[0, 1, 9, -1], [1, 0, 9, -1], [9, 9, 0, -1], [-1, -1, -1, -1]]]


@pytest.mark.parametrize("sparsed_distance", ["k", "farthest"])
def test_rs_sparse_replaces_about_q_of_the_word_pairs(sparsed_distance):
    torch.manual_seed(0)
    distance = torch.randint(0, 5, (8, 40, 40))
    distance[:, -1], distance[:, :, -1] = -1, -1
    sparsed = knowledge_sparse(distance, "rs", probability=0.1, k=6, sparsed_distance=sparsed_distance)
    changed = sparsed != distance
    value = 6 if sparsed_distance == "k" else distance.amax(dim=(1, 2), keepdim=True).expand_as(distance) + 1
    expected = torch.full_like(distance, 6) if sparsed_distance == "k" else value
    assert torch.equal(sparsed[changed], expected[changed])
    assert not changed[distance < 0].any(), "pairs with a token of no word are left alone"
    assert 0.08 < changed.sum() / (distance >= 0).sum() < 0.12


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
    ({"deps_san_variance": 0}, "deps_san_variance"),
    ({"special_token_distance": "zero"}, "special_token_distance"),
    ({"sparsed_distance": "largest"}, "sparsed_distance"),
    ({"deps_san_mode": "multiply"}, "deps_san_mode"),
    ({"knowledge_sparse": "random"}, "knowledge_sparse"),
    ({"rs_sparse_probability": 1.5}, "rs_sparse_probability"),
])
def test_invalid_arguments_raise_errors_naming_them(deps_san_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        deps_san_config(**overrides)


def test_the_fused_flex_attention_path_gives_what_the_eager_path_gives(deps_san_config, parsed_batch, monkeypatch):
    """On CUDA the scaled layers run as one FlexAttention kernel; here its reference implementation (uncompiled, on
    CPU) stands in for it and must reproduce the eager scores, mask and padding included."""
    from torch.nn.attention.flex_attention import flex_attention

    from hf_srcfeat import attention

    model = random_model(DepsSanForConditionalGeneration, deps_san_config(deps_san_heads=SCALED_HEADS))
    with torch.no_grad():
        eager = model.get_encoder()(**parsed_batch).last_hidden_state
        calls = []
        monkeypatch.setattr(attention, "fused_score_modification_available", lambda query, dropout: True)
        monkeypatch.setattr(attention, "_compiled_flex_attention",
                            lambda: lambda *args, **kwargs: calls.append(1) or flex_attention(*args, **kwargs))
        fused = model.get_encoder()(**parsed_batch).last_hidden_state
    assert len(calls) == len(model.config.scaled_layers), "only the scaled layers take the FlexAttention path"
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-5)


def test_a_source_without_dependency_distances_is_refused_in_training_and_defaulted_at_inference(deps_san_config, parsed_batch):
    model = random_model(DepsSanForConditionalGeneration, deps_san_config())
    with pytest.warns(UserWarning, match="no parse"):  # at inference: the feature's default
        model.get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])
    with pytest.raises(ValueError, match="Deps-SAN needs `dep_distance`"):  # in training: an error
        model.train().get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])


class TestDepsSanEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, feature_tokenizer, train_pairs, train_annotations):
        config = tiny_method_config(DepsSanConfig, feature_tokenizer, deps_san_heads=[0, 2], knowledge_sparse="rs")
        return train_from_raw_text(DepsSanForConditionalGeneration, config, feature_tokenizer, train_pairs)
