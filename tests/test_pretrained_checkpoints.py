"""Pretrained translation checkpoints load as the backbone, exactly: a small randomly initialised checkpoint of
each family (Marian/OPUS-MT, M2M100/NLLB, mBART), built with the real Transformers class and saved with
`save_pretrained`, converts from its folder into a `SrcFeatTransformerForConditionalGeneration` that gives the
original's logits (fp32, max abs diff <= 1e-4) and the same greedy and beam-4 translations of 50 Multi30k
sentences, and keeps doing so after its own save and load."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    MBartConfig,
    MBartForConditionalGeneration,
    T5Config,
    T5ForConditionalGeneration,
)

from hf_srcfeat import SrcFeatTransformerForConditionalGeneration
from hf_srcfeat.data.multi30k import load_multi30k
from hf_srcfeat.pretrained_checkpoints import backbone_config, convert_pretrained

SIZE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128)


def family_checkpoint(family: str, vocab_size: int, pad: int, eos: int):
    """A random checkpoint of `family` with its own defaults (activation, positions, layer norms) at a tiny size;
    LayerNorm weights and the logits bias are randomised too, so that a misplaced one shows in the logits."""
    if family == "marian":  # OPUS-MT: swish, the decoder starts from <pad>, forced </s> at the end
        model = MarianMTModel(MarianConfig(vocab_size=vocab_size, pad_token_id=pad, eos_token_id=eos,
                                           decoder_start_token_id=pad, activation_function="swish", **SIZE))
    elif family == "m2m_100":  # NLLB's architecture: the decoder starts from </s>, then a forced language token
        model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=vocab_size, pad_token_id=pad, eos_token_id=eos,
                                                            decoder_start_token_id=eos, **SIZE))
        model.generation_config.forced_bos_token_id = 7
    else:
        model = MBartForConditionalGeneration(MBartConfig(vocab_size=vocab_size, pad_token_id=pad, eos_token_id=eos,
                                                          decoder_start_token_id=eos, **SIZE))
        model.generation_config.forced_bos_token_id = 9
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                parameter.add_(0.2 * torch.randn_like(parameter))
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_()
    return model.eval()


@pytest.fixture(scope="module")
def sentences(multi30k_dir, subword_tokenizer):
    """50 Multi30k sources as token ids of the shared test tokenizer (the checkpoints' vocabulary here)."""
    texts = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=50)["source"])
    return subword_tokenizer(texts, padding=True, return_tensors="pt")


@pytest.fixture(scope="module", params=["marian", "m2m_100", "mbart"])
def converted(request, subword_tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    original = family_checkpoint(request.param, len(subword_tokenizer), subword_tokenizer.pad_token_id,
                                 subword_tokenizer.eos_token_id)
    folder = tmp_path_factory.mktemp(request.param)
    original.save_pretrained(folder / "original")
    reloaded_original = AutoModelForSeq2SeqLM.from_pretrained(folder / "original").eval()
    model = convert_pretrained(str(folder / "original"))
    return request.param, reloaded_original, model, folder


def test_a_converted_checkpoint_gives_the_original_logits(converted, sentences):
    family, original, model, _ = converted
    assert isinstance(model, SrcFeatTransformerForConditionalGeneration)
    start = torch.full_like(sentences["input_ids"][:, :1], model.config.decoder_start_token_id)
    decoder_input_ids = torch.cat([start, sentences["input_ids"][:, :11]], dim=1)  # teacher forcing's layout
    with torch.no_grad():
        expected = original(**sentences, decoder_input_ids=decoder_input_ids).logits
        logits = model(**sentences, decoder_input_ids=decoder_input_ids).logits
    # Decoder positions after a sentence's end hold padding, which fairseq numbers apart: compared are the real ones.
    real = torch.cat([torch.ones_like(start), sentences["attention_mask"][:, :11]], dim=1).bool()
    assert (expected - logits)[real].abs().max() <= 1e-4, family
    assert model.num_parameters() == original.num_parameters() - sum(
        buffer.numel() for name, buffer in original.named_parameters() if "embed_positions" in name
        and model.config.position_embedding_type != "learned")


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_converted_checkpoint_translates_as_the_original(converted, sentences, num_beams):
    family, original, model, _ = converted
    options = dict(num_beams=num_beams, max_new_tokens=16, do_sample=False)
    expected = original.generate(**sentences, **options)
    assert torch.equal(model.generate(**sentences, **options), expected), family
    if family != "marian":  # the language token the checkpoint's generation config forces comes along
        assert (expected[:, 1] == original.generation_config.forced_bos_token_id).all()


def test_a_converted_checkpoint_saves_and_loads_as_a_zoo_model(converted, sentences):
    family, original, model, folder = converted
    model.save_pretrained(folder / "converted")
    loaded = AutoModelForSeq2SeqLM.from_pretrained(folder / "converted").eval()
    assert isinstance(loaded, SrcFeatTransformerForConditionalGeneration)
    assert loaded.config.converted_from == family
    options = dict(num_beams=4, max_new_tokens=16)
    assert torch.equal(loaded.generate(**sentences, **options), original.generate(**sentences, **options))


def test_other_architectures_are_refused_naming_the_supported_families():
    with pytest.raises(ValueError, match=r"'t5' checkpoint cannot be converted; supported: \['m2m_100', 'marian', "
                                         r"'mbart'\]"):
        backbone_config(T5ForConditionalGeneration(T5Config(d_model=16, num_layers=1, num_heads=2, d_ff=32,
                                                            d_kv=8, vocab_size=50)).config)


def test_separate_source_and_target_vocabularies_are_refused():
    config = MarianConfig(vocab_size=100, decoder_vocab_size=80, share_encoder_decoder_embeddings=False, **SIZE)
    with pytest.raises(ValueError, match="source vocabulary of 100 and a target vocabulary of 80"):
        backbone_config(config)


def test_a_converted_checkpoint_exports_to_ctranslate2_and_translates_as_the_original(converted, sentences,
                                                                                     subword_tokenizer):
    """Marian's and fairseq's sinusoids, mBART's learned positions and embedding LayerNorm, the logits bias and
    swish all reach CTranslate2's Transformer spec."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from hf_srcfeat.integrations.ctranslate2 import export

    family, original, model, folder = converted
    model.save_pretrained(folder / "for_ct2")
    subword_tokenizer.save_pretrained(folder / "for_ct2")
    export(str(folder / "for_ct2"), str(folder / "ct2"))
    forced = original.generation_config.forced_bos_token_id
    expected = original.generate(**sentences, num_beams=1, do_sample=False, max_new_tokens=16,
                                 forced_eos_token_id=None)
    expected_tokens = []
    for row in expected.tolist():
        row = row[1:]  # the decoder start token
        row = row[:row.index(model.config.eos_token_id)] if model.config.eos_token_id in row else row
        expected_tokens.append(subword_tokenizer.convert_ids_to_tokens(row))
    sources = [subword_tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist())
               for ids, mask in zip(sentences["input_ids"], sentences["attention_mask"], strict=True)]
    prefix = [[subword_tokenizer.convert_ids_to_tokens(forced)]] * len(sources) if forced is not None else None
    results = ctranslate2.Translator(str(folder / "ct2"), intra_threads=1).translate_batch(
        sources, beam_size=1, max_decoding_length=16, target_prefix=prefix)
    assert [result.hypotheses[0] for result in results] == expected_tokens, family


# --- Grafting a method onto a converted checkpoint ------------------------------------------------------------


@pytest.fixture(scope="module")
def featured_batch(feature_tokenizer, multi30k_dir):
    """12 parsed Multi30k sources with their features and German targets as labels."""
    pairs = load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=12)
    return feature_tokenizer(list(pairs["source"]), text_target=list(pairs["target"]), padding=True,
                             return_tensors="pt")


def model_inputs(batch, with_labels: bool = False) -> dict:
    return {name: value for name, value in batch.items() if with_labels or name != "labels"}


def logits_of(model, batch) -> torch.Tensor:
    start = torch.full_like(batch["labels"][:, :1], model.config.decoder_start_token_id)
    decoder_input_ids = torch.cat([start, batch["labels"][:, :-1].clamp(min=0)], dim=1)
    with torch.no_grad():
        return model(**model_inputs(batch), decoder_input_ids=decoder_input_ids).logits


GRAFTS = {
    "deps_san": dict(deps_san_layers=[0, 1]),
    "relevance_features": dict(source_factors=["lemma", "subword_tag", "pos", "deprel"]),
    "diverse_input": dict(diverse_variant="fusing_diverse"),
    "phrase_rep": dict(phrase_segmentation="ngram"),
    "latent_feedback": {},
    "srcfeat_composed": dict(components=["relevance_features", "deps_san"], deps_san_layers=[0],
                             source_factors=["pos", "deprel"]),
}
#: The parameters each graft adds that must move away from their starting values.
ADDED = {
    "deps_san": lambda model: model.model.encoder.deps_san_gates.values,
    "relevance_features": lambda model: model.model.encoder.embed_source.factor_embeddings["pos"].weight,
    "diverse_input": lambda model: model.model.encoder.embed_source.graft_gate.values,
    "phrase_rep": lambda model: model.model.encoder.layers[0].phrase_gate.values,
    "latent_feedback": lambda model: model.model.encoder.feedback_gates.values,
    "srcfeat_composed": lambda model: model.model.encoder.deps_san_gates.values,
}


@pytest.mark.parametrize("model_type", sorted(GRAFTS))
def test_a_grafted_method_starts_as_the_pretrained_model_and_then_learns(converted, featured_batch, feature_tokenizer,
                                                                         model_type):
    from hf_srcfeat.pretrained_checkpoints import graft

    family, _, model, _ = converted
    arguments = {**GRAFTS[model_type], **feature_tokenizer.feature_vocabularies.sizes()}
    grafted = graft(model, model_type, **arguments).eval()
    assert grafted.config.model_type == model_type and grafted.config.converted_from == family
    if model_type == "latent_feedback":  # the LFE starts as the pretrained encoder
        assert torch.equal(grafted.model.encoder.lfe.layers[0].ffn.fc1.weight, model.model.encoder.layers[0].ffn.fc1.weight)
    assert (logits_of(grafted, featured_batch) - logits_of(model, featured_batch)).abs().max() <= 1e-5
    assert torch.equal(grafted.generate(**model_inputs(featured_batch), num_beams=2, max_new_tokens=8),
                       model.generate(**model_inputs(featured_batch), num_beams=2, max_new_tokens=8))

    grafted.train()
    optimizer = torch.optim.Adam(grafted.parameters(), lr=1e-2)
    grafted(**model_inputs(featured_batch, with_labels=True)).loss.backward()
    optimizer.step()
    added = ADDED[model_type](grafted)
    assert added.abs().sum() > 0, "the added parameters receive gradients and move away from the identity"
    assert (logits_of(grafted.eval(), featured_batch) - logits_of(model, featured_batch)).abs().max() > 1e-3


@pytest.mark.parametrize(("model_type", "arguments", "message"), [
    ("relevance_features", {"relevance_combine": "concat"}, "only part of d_model"),
    ("relevance_features", {"relevance_combine": "self_relevance"}, "sigmoid"),
    ("srcfeat_composed", {}, "cannot be grafted onto a pretrained model yet"),
])
def test_forms_that_cannot_start_as_the_pretrained_model_are_refused_with_the_reason(converted, model_type,
                                                                                    arguments, message):
    from hf_srcfeat.pretrained_checkpoints import graft

    with pytest.raises(ValueError, match=message):
        graft(converted[2], model_type, **arguments)


def test_a_graft_onto_an_unconverted_model_or_with_a_misspelt_setting_is_refused_naming_it(converted):
    from hf_srcfeat.pretrained_checkpoints import graft

    family, original, model, _ = converted
    with pytest.raises(ValueError, match=f"not from a {original.config.model_type} model: convert the checkpoint "
                                         r"first \(convert_model\(model\)"):
        graft(original, "deps_san")
    with pytest.raises(ValueError, match="DepsSanConfig has no argument 'deps_san_layer'; did you mean "
                                         "'deps_san_layers'"):
        graft(model, "deps_san", deps_san_layer=[0])
    assert graft(model, "deps_san", deps_san_layers=[0]).config.scaled_layers == [0]
