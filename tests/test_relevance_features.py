"""Relevance-based linguistic features (Chakrabarty et al. 2020): the five combination methods of Sections
3.1-3.2 pinned on a tiny model over real parses, the factor widths of Table 2, and the model end to end."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import plot_relevance
from hf_srcfeat import RelevanceFeaturesConfig, RelevanceFeaturesForConditionalGeneration
from hf_srcfeat.embeddings import sinusoidal_position_encoding
from hf_srcfeat.feature_vocabulary import UNK_ID
from hf_srcfeat.source_features import SourceFeatures
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text
from .helpers import random_model

FACTORS = ["lemma", "subword_tag", "pos", "deprel"]
WIDTHS = {"word": 6, "lemma": 4, "subword_tag": 2, "pos": 2, "deprel": 2}  # sums to d_model 16
FEATURE_OF = {"lemma": "lemma_ids", "subword_tag": "subword_tag_ids", "pos": "pos_ids", "deprel": "deprel_ids"}


@pytest.fixture
def relevance_config(feature_tokenizer):
    def make(**overrides) -> RelevanceFeaturesConfig:
        arguments = dict(vocab_size=len(feature_tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                         decoder_ffn_dim=32, dropout=0.0, **feature_tokenizer.feature_vocabularies.sizes())
        if overrides.get("relevance_combine") != "add":
            arguments["factor_embedding_sizes"] = WIDTHS
        arguments.update(overrides)
        return RelevanceFeaturesConfig(**arguments)

    return make


@pytest.fixture(scope="module")
def parsed_batch(feature_tokenizer, test_sentences):
    """Two real sentences, padded, with their lemma, B/I/E/S, UPOS and relation ids."""
    return feature_tokenizer(test_sentences[:2], padding=True, return_tensors="pt")


def factor_vectors_by_hand(embedding, batch) -> dict[str, torch.Tensor]:
    """e_ik = E_k s_ik, read straight from the embedding matrices."""
    vectors = {"word": embedding.embed_tokens.weight[batch["input_ids"]]}
    for name in FACTORS:
        vectors[name] = embedding.factor_embeddings[name].weight[batch[FEATURE_OF[name]]]
    return vectors


def linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return x @ layer.weight.T + layer.bias


def expected_combination(mode: str, embedding, vectors: dict[str, torch.Tensor]) -> torch.Tensor:
    names = ["word", *FACTORS]
    if mode == "concat":
        return torch.cat([vectors[name] for name in names], -1)
    if mode == "add":
        return sum(vectors[name] for name in names)
    if mode == "linear":
        return torch.relu(linear(embedding.linear, torch.cat([vectors[name] for name in names], -1)))
    if mode == "self_relevance":
        return torch.cat([torch.sigmoid(linear(embedding.relevance[name], vectors[name])) * vectors[name]
                          for name in names], -1)
    word = vectors["word"]
    return torch.cat([word] + [
        torch.sigmoid(linear(embedding.relevance[name], torch.cat([word, vectors[name]], -1))) * vectors[name]
        for name in FACTORS], -1)


def source_embedding(model):
    return model.get_encoder().embed_source


def embedding_features(batch) -> SourceFeatures:
    return SourceFeatures(**{name: batch[name] for name in FEATURE_OF.values()})


@pytest.mark.parametrize("mode", ["concat", "add", "linear", "self_relevance", "word_relevance"])
def test_each_combination_method_follows_its_equation(relevance_config, parsed_batch, mode):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config(relevance_combine=mode))
    embedding = source_embedding(model)
    features = embedding_features(parsed_batch)
    combined, _ = embedding.combine(embedding.factor_vectors(parsed_batch["input_ids"], features))
    expected = expected_combination(mode, embedding, factor_vectors_by_hand(embedding, parsed_batch))
    assert combined.shape[-1] == 16
    torch.testing.assert_close(combined, expected)


def test_the_encoder_input_is_the_scaled_combination_plus_positions(relevance_config, parsed_batch):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config())
    embedding = source_embedding(model)
    features = embedding_features(parsed_batch)
    combined, _ = embedding.combine(embedding.factor_vectors(parsed_batch["input_ids"], features))
    mask = parsed_batch["attention_mask"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    expected = combined * math.sqrt(16) + sinusoidal_position_encoding(positions, 16)
    torch.testing.assert_close(embedding(parsed_batch["input_ids"], features, mask), expected)


def test_word_relevance_passes_the_subword_embedding_unchanged(relevance_config, parsed_batch):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config(relevance_combine="word_relevance"))
    embedding = source_embedding(model)
    combined, masks = embedding.combine(embedding.factor_vectors(parsed_batch["input_ids"],
                                                                 embedding_features(parsed_batch)))
    assert torch.equal(combined[..., :WIDTHS["word"]], embedding.embed_tokens.weight[parsed_batch["input_ids"]])
    assert list(masks) == FACTORS, "the subword gets no mask"


@pytest.mark.parametrize(("mode", "masked"), [("self_relevance", ["word", *FACTORS]),
                                               ("word_relevance", FACTORS)])
def test_relevance_masks_are_returned_per_factor_and_lie_strictly_between_0_and_1(
        relevance_config, parsed_batch, mode, masked):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config(relevance_combine=mode))
    masks = model.relevance_masks(**parsed_batch)
    assert list(masks) == masked
    for name, mask in masks.items():
        assert mask.shape == (*parsed_batch["input_ids"].shape, WIDTHS[name])
        assert ((mask > 0) & (mask < 1)).all()


def test_self_relevance_masks_depend_only_on_the_factor_value(relevance_config, parsed_batch):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config())
    masks = model.relevance_masks(**parsed_batch)
    pos = parsed_batch["pos_ids"]
    first, second = (pos == pos[0, 0]).nonzero()[:2].tolist()
    assert torch.equal(masks["pos"][first[0], first[1]], masks["pos"][second[0], second[1]])


def test_methods_without_masks_refuse_to_return_them(relevance_config, parsed_batch):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config(relevance_combine="concat"))
    with pytest.raises(ValueError, match="computes no relevance masks"):
        model.relevance_masks(**parsed_batch)


def test_default_widths_are_table_2_scaled_to_d_model():
    assert RelevanceFeaturesConfig(d_model=536).factor_widths == \
        {"word": 250, "lemma": 250, "subword_tag": 6, "pos": 15, "deprel": 15}
    widths = RelevanceFeaturesConfig(d_model=512).factor_widths
    assert widths == {"word": 239, "lemma": 239, "subword_tag": 6, "pos": 14, "deprel": 14}
    assert sum(RelevanceFeaturesConfig(d_model=256).factor_widths.values()) == 256
    assert RelevanceFeaturesConfig(d_model=512, source_factors=["pos"]).factor_widths == {"word": 483, "pos": 29}
    assert set(RelevanceFeaturesConfig(d_model=64, relevance_combine="add").factor_widths.values()) == {64}


def test_a_subset_of_factors_needs_only_its_features(relevance_config, parsed_batch):
    config = relevance_config(source_factors=["deprel"], factor_embedding_sizes={"word": 12, "deprel": 4})
    model = random_model(RelevanceFeaturesForConditionalGeneration, config)
    only_deprel = {key: parsed_batch[key] for key in ("input_ids", "attention_mask", "deprel_ids")}
    assert model.get_encoder()(**only_deprel).last_hidden_state.shape[-1] == 16
    with pytest.warns(UserWarning, match="no parse"):  # at inference: the feature's default
        model.get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])
    with pytest.raises(ValueError, match="needs `deprel_ids`"):  # in training: an error
        model.train().get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"])


def test_linear_maps_any_total_width_to_d_model(relevance_config, parsed_batch):
    widths = {"word": 10, "lemma": 6, "subword_tag": 2, "pos": 3, "deprel": 3}
    model = random_model(RelevanceFeaturesForConditionalGeneration,
                         relevance_config(relevance_combine="linear", factor_embedding_sizes=widths))
    assert model.get_encoder()(**parsed_batch).last_hidden_state.shape[-1] == 16


def test_unknown_lemmas_get_the_unknown_id_and_translate(relevance_config, feature_tokenizer):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config())
    batch = feature_tokenizer(["The glorbified zibbets wobbled."], return_tensors="pt")
    assert (batch["lemma_ids"] == UNK_ID).sum() >= 2
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 1


def test_feature_ids_beyond_the_model_vocabulary_are_refused(relevance_config, parsed_batch):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config(num_lemmas=4))
    with pytest.raises(ValueError, match="`lemma_ids` holds ids .* 4 lemma embeddings"):
        model.get_encoder()(**parsed_batch)


def test_inputs_embeds_stand_for_the_subword_factor_and_must_have_its_width(relevance_config, parsed_batch):
    model = random_model(RelevanceFeaturesForConditionalGeneration, relevance_config())
    embedding = source_embedding(model)
    features = {name: parsed_batch[name] for name in FEATURE_OF.values()}
    words = embedding.embed_tokens(parsed_batch["input_ids"])
    from_embeds = model.get_encoder()(inputs_embeds=words, attention_mask=parsed_batch["attention_mask"], **features)
    from_ids = model.get_encoder()(input_ids=parsed_batch["input_ids"], attention_mask=parsed_batch["attention_mask"],
                                   **features)
    torch.testing.assert_close(from_embeds.last_hidden_state, from_ids.last_hidden_state)
    with pytest.raises(ValueError, match="6 wide here, but they are 16 wide"):
        model.get_encoder()(inputs_embeds=torch.zeros(*parsed_batch["input_ids"].shape, 16), **features)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"relevance_combine": "sum"}, "relevance_combine"),
    ({"source_factors": ["lemma", "ner"]}, "source_factors"),
    ({"source_factors": ["pos", "pos"]}, "source_factors"),
    ({"factor_embedding_sizes": {**WIDTHS, "word": 2}}, r"sum to d_model \(16\).*sum to 12"),
    ({"factor_embedding_sizes": {"word": 16}}, "exactly"),
    ({"relevance_combine": "add", "factor_embedding_sizes": WIDTHS}, "add"),
    ({"num_lemmas": 0}, "num_lemmas"),
])
def test_invalid_arguments_raise_errors_naming_them(relevance_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        relevance_config(**overrides)


def test_sharing_source_and_target_embeddings_needs_a_full_width_subword_embedding(relevance_config):
    with pytest.raises(ValueError, match="share_embeddings.*16.*6 wide"):
        RelevanceFeaturesForConditionalGeneration(relevance_config(share_embeddings=True))
    shared = RelevanceFeaturesForConditionalGeneration(relevance_config(relevance_combine="add", share_embeddings=True))
    assert shared.get_encoder().embed_tokens is shared.get_decoder().embed_tokens


class TestRelevanceEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class", params=["self_relevance", "word_relevance"])
    @classmethod
    def trained(cls, request, feature_tokenizer, train_pairs):
        config = tiny_method_config(RelevanceFeaturesConfig, feature_tokenizer, relevance_combine=request.param,
                                    **feature_tokenizer.feature_vocabularies.sizes())
        return train_from_raw_text(RelevanceFeaturesForConditionalGeneration, config, feature_tokenizer, train_pairs)

def mask_of_first_token_tagged(model, tokenizer, sentence: str, tag: str) -> torch.Tensor:
    batch = tokenizer([sentence], return_tensors="pt")
    position = (batch["pos_ids"][0] == tokenizer.feature_vocabularies.pos.id(tag)).nonzero()[0, 0]
    return model.relevance_masks(**batch)["pos"][0, position]


def test_morphological_features_are_a_factor_of_their_own(feature_tokenizer, test_sentences):
    sizes = feature_tokenizer.feature_vocabularies.sizes()
    config = tiny_method_config(RelevanceFeaturesConfig, feature_tokenizer, source_factors=["pos", "feats"], **sizes)
    assert set(config.factor_widths) == {"word", "pos", "feats"} and config.num_morph_features == sizes[
        "num_morph_features"]
    model = random_model(RelevanceFeaturesForConditionalGeneration, config)
    batch = feature_tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    masks = model.relevance_masks(**batch)
    assert masks["feats"].shape[-1] == config.factor_widths["feats"]
    # Two words with different morphology get different masks; the same FEATS, the same mask.
    ids = batch["feats_ids"][0]
    first, other = 0, int((ids != ids[0]).nonzero()[0, 0])
    assert not torch.allclose(masks["feats"][0, first], masks["feats"][0, other])
    without = {name: value for name, value in batch.items() if name != "feats_ids"}
    with pytest.raises(ValueError, match="feats_ids"):  # in training; at inference it takes its default
        model.train()(**without, labels=batch["input_ids"][:, :4])


def test_plot_script_draws_the_pos_masks_of_a_self_relevance_model(tmp_path, feature_tokenizer, test_sentences):
    model = random_model(RelevanceFeaturesForConditionalGeneration, tiny_method_config(
        RelevanceFeaturesConfig, feature_tokenizer, **feature_tokenizer.feature_vocabularies.sizes()))
    model.save_pretrained(tmp_path / "model")
    feature_tokenizer.save_pretrained(tmp_path / "model")
    output = tmp_path / "pos.png"
    curves = plot_relevance.main([str(tmp_path / "model"), "--factor", "pos", "--values", "NOUN", "VERB", "DET",
                                  "--output", str(output)])
    assert output.read_bytes()[:4] == b"\x89PNG" and output.with_suffix(".json").exists()
    assert list(curves) == ["NOUN", "VERB", "DET"]
    # The curve of a tag is the mask every token with that tag gets in a real sentence.
    torch.testing.assert_close(torch.tensor(curves["NOUN"]),
                               mask_of_first_token_tagged(model, feature_tokenizer, test_sentences[0], "NOUN"))


def test_plot_script_draws_the_papers_12_penn_treebank_categories_of_an_xpos_model(tmp_path, train_pairs,
                                                                                   train_annotations):
    sources, targets = list(train_pairs["source"])[:300], list(train_pairs["target"])[:300]
    tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=600, source_annotations=train_annotations,
                                               pos_tagset="xpos")
    model = random_model(RelevanceFeaturesForConditionalGeneration, tiny_method_config(
        RelevanceFeaturesConfig, tokenizer, **tokenizer.feature_vocabularies.sizes()))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    present = [tag for tag in plot_relevance.PAPER_PTB_CATEGORIES if tag in tokenizer.feature_vocabularies.pos.ids]
    assert len(present) >= 10, "the Multi30k sources have most of the 12 categories"
    curves = plot_relevance.main([str(tmp_path / "model"), "--factor", "pos", "--output", str(tmp_path / "ptb.png")])
    assert list(curves) == present
    with pytest.raises(SystemExit, match="XPOS tags"):
        plot_relevance.main([str(tmp_path / "model"), "--factor", "pos", "--values", "NOUN",
                             "--output", str(tmp_path / "upos.png")])


def test_plot_script_draws_word_based_masks_per_word(tmp_path, feature_tokenizer):
    model = random_model(RelevanceFeaturesForConditionalGeneration, tiny_method_config(
        RelevanceFeaturesConfig, feature_tokenizer, relevance_combine="word_relevance",
        **feature_tokenizer.feature_vocabularies.sizes()))
    model.save_pretrained(tmp_path / "model")
    feature_tokenizer.save_pretrained(tmp_path / "model")
    curves = plot_relevance.main([str(tmp_path / "model"), "--factor", "pos", "--values", "NOUN", "--words", "dog",
                                  "man", "--output", str(tmp_path / "noun.png")])
    assert list(curves) == ["dog", "man"] and curves["dog"] != curves["man"]
    torch.testing.assert_close(torch.tensor(curves["man"]), mask_of_first_token_tagged(
        model, feature_tokenizer, "A man sleeps.", "NOUN"))
