"""The baseline Transformer: loss, KV cache, generation, batching, save/load, input validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_srcfeat import SrcFeatTransformerForConditionalGeneration

from .helpers import REPO, random_model


def encode(tokenizer, sentences, **kwargs):
    return tokenizer(sentences, padding=True, return_tensors="pt", **kwargs)


def test_training_on_real_pairs_lowers_the_loss(trained_baseline):
    _, losses = trained_baseline
    start, end = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert end < 0.75 * start, (start, end)


def test_loss_is_label_smoothed_cross_entropy_per_target_token(tiny_config, subword_tokenizer, test_sentences):
    model = random_model(SrcFeatTransformerForConditionalGeneration, tiny_config(label_smoothing=0.2))
    batch = encode(subword_tokenizer, test_sentences[:3], text_target=test_sentences[3:6])
    labels = batch["labels"].masked_fill(batch["labels"] == subword_tokenizer.pad_token_id, -100)
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)

    log_probs = output.logits.log_softmax(-1)
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    uniform = -log_probs.mean(-1)
    expected = ((0.8 * nll + 0.2 * uniform) * keep).sum() / keep.sum()
    torch.testing.assert_close(output.loss, expected)


def test_a_training_step_fills_no_cache_unless_asked(tiny_config, subword_tokenizer, test_sentences):
    model = random_model(SrcFeatTransformerForConditionalGeneration, tiny_config()).train()
    batch = encode(subword_tokenizer, test_sentences[:3], text_target=test_sentences[3:6])
    labels = batch["labels"].masked_fill(batch["labels"] == subword_tokenizer.pad_token_id, -100)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": labels}
    assert model.config.use_cache
    assert model(**inputs).past_key_values is None
    assert isinstance(model(**inputs, use_cache=True).past_key_values, EncoderDecoderCache)
    torch.manual_seed(0)
    loss_without_cache = model(**inputs).loss
    torch.manual_seed(0)
    torch.testing.assert_close(model(**inputs, use_cache=True).loss, loss_without_cache, rtol=0, atol=0)


def test_labels_are_shifted_right_into_decoder_inputs(tiny_config):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config())
    labels = torch.tensor([[11, 12, 2], [13, 2, -100]])
    assert model.prepare_decoder_input_ids_from_labels(labels).tolist() == [[1, 11, 12], [1, 13, 2]]


@pytest.mark.parametrize("position_embedding_type", ["sinusoidal", "sinusoidal_marian", "sinusoidal_fairseq"])
def test_positions_are_looked_up_in_a_table_equal_to_computing_each_alone(tiny_config, position_embedding_type):
    model = random_model(SrcFeatTransformerForConditionalGeneration,
                         tiny_config(position_embedding_type=position_embedding_type, max_position_embeddings=64))
    embedding = model.get_decoder().embed_target
    alone = torch.cat([embedding.sinusoids(torch.tensor([position])) for position in range(64)])
    assert torch.equal(embedding.positional(torch.arange(64)), alone)
    assert list(embedding.sinusoid_tables) == [torch.device("cpu")]
    assert not any("sinusoid" in name for name in model.state_dict())  # computed, never saved


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("layernorm_position", ["post", "pre"])
def test_incremental_decoding_with_cache_equals_full_recompute(
    tiny_config, subword_tokenizer, test_sentences, attn_implementation, layernorm_position
):
    config = tiny_config(layernorm_position=layernorm_position)
    config._attn_implementation = attn_implementation
    model = random_model(SrcFeatTransformerForConditionalGeneration, config)
    source = encode(subword_tokenizer, test_sentences[:3])
    target = encode(subword_tokenizer, test_sentences[3:6])["input_ids"][:, :7]
    encoder_outputs = model.get_encoder()(**source)
    full = model(encoder_outputs=encoder_outputs, attention_mask=source["attention_mask"],
                 decoder_input_ids=target, use_cache=False).logits
    cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    steps = []
    for t in range(target.shape[1]):
        output = model(encoder_outputs=encoder_outputs, attention_mask=source["attention_mask"],
                       decoder_input_ids=target[:, t:t + 1], past_key_values=cache, use_cache=True)
        cache = output.past_key_values
        steps.append(output.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_with_cache_equals_generate_without_cache(trained_baseline, subword_tokenizer, test_sentences,
                                                           num_beams):
    model, _ = trained_baseline
    inputs = encode(subword_tokenizer, test_sentences[:4])
    cached = model.generate(**inputs, num_beams=num_beams, use_cache=True)
    uncached = model.generate(**inputs, num_beams=num_beams, use_cache=False)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_padded_batch_generates_exactly_what_each_sentence_generates_alone(
    trained_baseline, subword_tokenizer, test_sentences, num_beams
):
    model, _ = trained_baseline
    batch = encode(subword_tokenizer, test_sentences)
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding"
    together = model.generate(**batch, num_beams=num_beams)
    texts = subword_tokenizer.batch_decode(together, skip_special_tokens=True)
    for sentence, text in zip(test_sentences, texts, strict=True):
        alone = model.generate(**encode(subword_tokenizer, [sentence]), num_beams=num_beams)
        assert subword_tokenizer.decode(alone[0], skip_special_tokens=True) == text
    assert len(set(texts)) > 1, "a trained model translates different sentences differently"


def test_sdpa_and_eager_attention_give_the_same_logits(tiny_config, subword_tokenizer, test_sentences):
    eager_config, sdpa_config = tiny_config(), tiny_config()
    eager_config._attn_implementation, sdpa_config._attn_implementation = "eager", "sdpa"
    eager = random_model(SrcFeatTransformerForConditionalGeneration, eager_config)
    sdpa = random_model(SrcFeatTransformerForConditionalGeneration, sdpa_config)
    batch = encode(subword_tokenizer, test_sentences[:3], text_target=test_sentences[3:6])
    torch.testing.assert_close(eager(**batch).logits, sdpa(**batch).logits, atol=1e-4, rtol=1e-4)


def test_save_and_load_round_trip_gives_identical_logits_in_safetensors(trained_baseline, subword_tokenizer,
                                                                        test_sentences, tmp_path):
    model, _ = trained_baseline
    model.save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "generation_config.json", "model.safetensors"]
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is SrcFeatTransformerForConditionalGeneration
    batch = encode(subword_tokenizer, test_sentences[:3], text_target=test_sentences[3:6])
    assert torch.equal(model(**batch).logits, reloaded(**batch).logits)


@pytest.mark.slow
def test_a_fresh_process_loads_the_model_through_automodel(trained_baseline, subword_tokenizer, test_sentences,
                                                           tmp_path):
    model, _ = trained_baseline
    model.save_pretrained(tmp_path / "model")
    subword_tokenizer.save_pretrained(tmp_path / "model")
    expected = model.generate(**encode(subword_tokenizer, test_sentences[:2]), num_beams=4).tolist()
    script = (
        "import json, sys, torch, hf_srcfeat\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        "m = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1]).eval()\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "x = t(json.loads(sys.argv[2]), padding=True, return_tensors='pt')\n"
        "print(json.dumps(m.generate(**x, num_beams=4).tolist()))\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "model"), json.dumps(test_sentences[:2])],
                            capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize(("share", "tie"), [(True, True), (True, False), (False, True), (False, False)])
def test_embedding_sharing_and_output_tying_follow_the_config(tiny_config, subword_tokenizer, test_sentences,
                                                              share, tie, tmp_path):
    model = random_model(SrcFeatTransformerForConditionalGeneration,
                         tiny_config(share_embeddings=share, tie_word_embeddings=tie))
    model.save_pretrained(tmp_path)
    reloaded = SrcFeatTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    for candidate in (model, reloaded):
        source = candidate.model.encoder.embed_tokens.weight
        target = candidate.model.decoder.embed_tokens.weight
        assert (source is target) == share
        assert (candidate.lm_head.weight is target) == tie
    batch = encode(subword_tokenizer, test_sentences[:2], text_target=test_sentences[2:4])
    assert torch.equal(model(**batch).logits, reloaded(**batch).logits)


def test_source_features_with_the_wrong_length_raise_an_error_naming_them(tiny_config, subword_tokenizer,
                                                                          test_sentences):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config()).eval()
    batch = encode(subword_tokenizer, test_sentences[:2])
    length = batch["input_ids"].shape[1]
    with pytest.raises(ValueError, match="`pos_ids` has shape"):
        model.generate(**batch, pos_ids=torch.zeros(2, length + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="`dep_distance` has shape"):
        model(**batch, decoder_input_ids=batch["input_ids"], dep_distance=torch.zeros(2, length, length - 1))


def test_misspelled_feature_names_are_rejected_by_generate(tiny_config, subword_tokenizer, test_sentences):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config()).eval()
    batch = encode(subword_tokenizer, test_sentences[:1])
    with pytest.raises(ValueError, match="pos_idz"):
        model.generate(**batch, pos_idz=torch.zeros_like(batch["input_ids"]))


def test_empty_and_overlong_sources_raise_clear_errors(tiny_config):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config(max_position_embeddings=16)).eval()
    with pytest.raises(ValueError, match="empty"):
        model.get_encoder()(input_ids=torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.get_encoder()(input_ids=torch.full((1, 20), 5))


def test_positions_within_the_table_are_not_read_back_to_the_host(tiny_config):
    # A bound known on the host spares the read-back, which waits for the GPU: positions on the meta device, which
    # cannot be read, pass when the bound fits and are read (and fail) when it does not.
    model = SrcFeatTransformerForConditionalGeneration(tiny_config(max_position_embeddings=16))
    embeddings = model.model.decoder.embed_target
    positions = torch.empty(2, 20, dtype=torch.long, device="meta")
    embeddings.check_positions(positions, longest=16)
    with pytest.raises((NotImplementedError, RuntimeError)):
        embeddings.check_positions(positions, longest=20)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        embeddings.check_positions(torch.arange(20), longest=20)


def test_source_positions_count_the_mask_as_real_or_padding_whatever_its_values(tiny_config):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config(max_position_embeddings=16)).eval()
    input_ids = torch.full((1, 10), 5)
    ones = model.get_encoder()(input_ids=input_ids, attention_mask=torch.ones(1, 10, dtype=torch.long))
    twos = model.get_encoder()(input_ids=input_ids, attention_mask=torch.full((1, 10), 2))
    torch.testing.assert_close(twos.last_hidden_state, ones.last_hidden_state, rtol=0, atol=0)


def test_token_ids_of_a_dtype_the_embedding_cannot_index_raise_an_error_naming_it(tiny_config):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config()).eval()
    with pytest.raises(TypeError, match="`input_ids` has dtype torch.uint8"):
        model(input_ids=torch.tensor([[5, 6, 2]], dtype=torch.uint8), labels=torch.tensor([[7, 2]]))


def test_out_of_range_labels_raise_an_error_naming_them_and_minus_100_passes(tiny_config):
    model = SrcFeatTransformerForConditionalGeneration(tiny_config()).eval()
    input_ids = torch.tensor([[5, 6, 2]])
    model(input_ids=input_ids, labels=torch.tensor([[7, 2, -100]]))
    vocab_size = model.config.vocab_size
    for labels in ([[7, vocab_size, -100]], [[7, -5, 2]]):
        with pytest.raises(ValueError, match=r"`labels` holds ids from -?\d+ to \d+, but the model has"):
            model(input_ids=input_ids, labels=torch.tensor(labels))


def test_the_baseline_ignores_source_features(trained_baseline, subword_tokenizer, test_sentences):
    model, _ = trained_baseline
    batch = encode(subword_tokenizer, test_sentences[:2])
    length = batch["input_ids"].shape[1]
    with_features = model.generate(**batch, num_beams=4, pos_ids=torch.randint(0, 9, (2, length)),
                                   dep_distance=torch.randint(0, 5, (2, length, length)))
    assert torch.equal(with_features, model.generate(**batch, num_beams=4))


@pytest.mark.slow
def test_saved_code_loads_with_trust_remote_code_where_the_package_is_not_importable(tmp_path):
    save = (
        "import sys, torch\n"
        "from hf_srcfeat import SrcFeatTransformerConfig, SrcFeatTransformerForConditionalGeneration as M\n"
        "config = SrcFeatTransformerConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1,\n"
        "    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)\n"
        "torch.manual_seed(0)\n"
        "SrcFeatTransformerConfig.register_for_auto_class()\n"
        "M.register_for_auto_class('AutoModelForSeq2SeqLM')\n"
        "M(config).save_pretrained(sys.argv[1])\n"
    )
    load = (
        "import sys, torch\n"
        "sys.modules['hf_srcfeat'] = None  # the package is not importable: only the copied code can serve\n"
        "from transformers import AutoModelForSeq2SeqLM\n"
        "m = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
        "assert type(m).__module__.startswith('transformers_modules'), type(m).__module__\n"
        "ids = torch.tensor([[5, 6, 7, 2]])\n"
        "print(m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=2, max_new_tokens=5).tolist())\n"
    )
    folder = str(tmp_path / "remote")
    environment = {**os.environ, "HF_HOME": str(tmp_path / "hf_home")}
    subprocess.run([sys.executable, "-c", save, folder], check=True, cwd=tmp_path, env=environment)
    assert {"modeling_srcfeat_transformer.py", "attention.py", "embeddings.py", "source_features.py",
            "configuration_srcfeat_transformer.py"} <= set(os.listdir(folder))
    loaded = subprocess.run([sys.executable, "-c", load, folder], capture_output=True, text=True, cwd=tmp_path,
                            env=environment)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert json.loads(loaded.stdout.strip().splitlines()[-1])[0][0] == 1


def resize_cases(tiny_config):
    from hf_srcfeat import LatentFeedbackConfig, LatentFeedbackForConditionalGeneration

    yield "separate source and target tables", SrcFeatTransformerForConditionalGeneration, \
        tiny_config(share_embeddings=False)
    yield "untied output projection and a final logits bias", SrcFeatTransformerForConditionalGeneration, \
        tiny_config(tie_word_embeddings=False, final_logits_bias=True)
    yield "a latent feature encoder's own tables", LatentFeedbackForConditionalGeneration, \
        LatentFeedbackConfig(**{**tiny_config(encoder_layers=3).to_diff_dict(), "lfe_own_embeddings": True,
                                "share_embeddings": False})


def test_resizing_the_vocabulary_resizes_every_token_table_and_the_model_reloads(tiny_config, subword_tokenizer,
                                                                                  test_sentences, tmp_path):
    batch = encode(subword_tokenizer, test_sentences[:3])
    decoder_input_ids = torch.full((3, 4), subword_tokenizer.bos_token_id)
    for case, model_class, config in resize_cases(tiny_config):
        model = random_model(model_class, config).eval()
        size = config.vocab_size
        with torch.no_grad():
            before = model(**batch, decoder_input_ids=decoder_input_ids).logits
        model.resize_token_embeddings(size + 8)
        tables = {name: module.num_embeddings for name, module in model.named_modules()
                  if name.endswith(("embed_tokens", "shared")) and isinstance(module, torch.nn.Embedding)}
        assert set(tables.values()) == {size + 8}, (case, tables)
        assert model.lm_head.weight.shape[0] == model.config.vocab_size == size + 8, case
        if config.final_logits_bias:
            assert model.final_logits_bias.shape == (1, size + 8), case
        with torch.no_grad():
            after = model(**batch, decoder_input_ids=decoder_input_ids).logits
        torch.testing.assert_close(after[..., :size], before, msg=f"{case}: the old tokens' logits are kept")
        model.save_pretrained(tmp_path / "resized")
        reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "resized").eval()
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**batch, decoder_input_ids=decoder_input_ids).logits, after,
                                       msg=f"{case}: the saved model is the resized one")
