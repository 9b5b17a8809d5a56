"""Latent feature feedback (Li, Li & Zhang 2021): the denoising noise of Section 3, Eq. (3)-(5) pinned on a tiny
model over real sentences, the training modes of Tables 1 and 8, DAE pre-training, and the model end to end
with an LFE pre-trained by hf-srcfeat-pretrain-dae."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
import torch

from hf_srcfeat import (
    LatentFeedbackConfig,
    LatentFeedbackForConditionalGeneration,
    SrcFeatTransformerConfig,
    SrcFeatTransformerForConditionalGeneration,
)
from hf_srcfeat.commands import pretrain_dae
from hf_srcfeat.data.monolingual import load_monolingual
from hf_srcfeat.modeling_latent_feedback import FeedbackContext, top_down_feedback

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text
from .helpers import REPO, random_model, sampled_batches

SENTENCE = "A little girl in a pink dress is climbing up a set of stairs in an entry way with her dog".split()


def test_noise_swaps_3_pairs_drops_a_tenth_and_masks_a_fifth_of_the_words():
    for seed in range(5):
        corruption = pretrain_dae.corrupt(SENTENCE, random.Random(seed))
        assert len(SENTENCE) == 21
        assert len(corruption.swapped_pairs) == 3 and all(a != b for a, b in corruption.swapped_pairs)
        assert len(corruption.dropped) == 2 and len(corruption.words) == 19  # round(2.1)
        # round(4.2), masked with the paper's placeholder token <pad>
        assert len(corruption.masked) == 4 and corruption.words.count("<pad>") == 4
        kept = [word for word in corruption.words if word != "<pad>"]
        assert all(kept.count(word) <= SENTENCE.count(word) for word in kept)
    again = pretrain_dae.corrupt(SENTENCE, random.Random(3))
    assert again == pretrain_dae.corrupt(SENTENCE, random.Random(3)), "a seed fixes the noise"
    short = pretrain_dae.corrupt(["Dogs", "run", "."], random.Random(0))
    assert (len(short.swapped_pairs), len(short.dropped), len(short.masked)) == (3, 0, 1)
    single = pretrain_dae.corrupt(["Hello"], random.Random(0))
    assert single.words == ["Hello"] and not single.swapped_pairs


def test_the_collator_corrupts_the_source_and_keeps_the_original_as_target(feature_tokenizer, test_sentences):
    collator = pretrain_dae.DenoisingCollator(feature_tokenizer, max_length=64, seed=0, swaps=3, drop_ratio=0.1,
                                              mask_ratio=0.2)
    batch = collator([{"text": text} for text in test_sentences[:3]])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}, "plain subwords, no linguistic features"
    placeholders = batch["input_ids"] == feature_tokenizer.pad_token_id
    assert (placeholders & (batch["attention_mask"] == 1)).sum() >= 3, "masked words: <pad> the encoder attends to"
    assert (batch["input_ids"] == feature_tokenizer.unk_token_id).sum() == 0
    targets = feature_tokenizer(text_target=test_sentences[:3], source_features=False)["input_ids"]
    for row, target in zip(batch["labels"].tolist(), targets, strict=True):
        assert [token for token in row if token != -100] == target


def test_autoencoder_token_batches_hold_whole_corrupted_pairs_within_the_budget(feature_tokenizer, multi30k_dir,
                                                                                tmp_path):
    from datasets import Dataset
    from transformers import Seq2SeqTrainingArguments

    from hf_srcfeat.data.batching import TokenBatchingSeq2SeqTrainer
    from hf_srcfeat.data.multi30k import load_multi30k

    sentences = list(load_multi30k("train", data_dir=multi30k_dir, limit=300)["source"])
    lengths = pretrain_dae.sentence_lengths(feature_tokenizer, sentences, max_length=24, mask_ratio=0.2)
    assert max(lengths) == 24 and min(lengths) < 24, "truncated as the collator truncates"
    collator = pretrain_dae.DenoisingCollator(feature_tokenizer, max_length=24, seed=0, swaps=3, drop_ratio=0.1,
                                              mask_ratio=0.2)
    config = SrcFeatTransformerConfig(vocab_size=len(feature_tokenizer), d_model=16, encoder_layers=1,
                                      decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                      encoder_ffn_dim=32, decoder_ffn_dim=32)

    def trainer(lengths: list[int]) -> TokenBatchingSeq2SeqTrainer:
        return TokenBatchingSeq2SeqTrainer(
            model=SrcFeatTransformerForConditionalGeneration(config), data_collator=collator,
            args=Seq2SeqTrainingArguments(str(tmp_path), use_cpu=True, remove_unused_columns=False, report_to="none"),
            train_dataset=Dataset.from_dict({"text": sentences}), max_tokens_per_batch=256, lengths=lengths)

    batches = list(trainer(lengths).get_train_dataloader())
    assert sum(len(batch["input_ids"]) for batch in batches) == 300, "every sentence, once an epoch"
    for batch in batches:
        rows, longest = len(batch["input_ids"]), max(batch["input_ids"].shape[1], batch["labels"].shape[1])
        assert rows * longest <= 256
    assert len(batches) < 300 / 8, "batches fill the budget instead of holding a fixed number of sentences"
    with pytest.raises(ValueError, match="299 lengths given for 300 training examples"):
        trainer(lengths[1:]).get_train_dataloader()


def test_the_autoencoder_command_trains_on_token_batches_and_refuses_bad_settings_by_name(feature_tokenizer, tmp_path,
                                                                                       monkeypatch):
    sampled = sampled_batches(monkeypatch)
    feature_tokenizer.save_pretrained(tmp_path / "tokenizer")
    arguments = ["--output_dir", str(tmp_path / "dae"), "--tokenizer_name_or_path", str(tmp_path / "tokenizer"),
                 "--d_model", "16", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2",
                 "--ffn_dim", "32", "--max_train_samples", "200", "--max_eval_samples", "4", "--max_length", "24",
                 "--do_train", "--max_steps", "3", "--learning_rate", "1e-3", "--logging_steps", "1",
                 "--save_strategy", "no", "--use_cpu", "--report_to", "none", "--disable_tqdm", "true"]
    results = pretrain_dae.main([*arguments, "--max_tokens_per_batch", "256", "--batch_size_multiple", "4"])
    assert results["dae_args"]["max_tokens_per_batch"] == 256 and results["dae_args"]["batch_size_multiple"] == 4
    assert sampled and all(len(batch) % 4 == 0 for batch in sampled[-1][:-1]), "the trainer was given the multiple"
    assert len([entry for entry in results["log_history"] if "loss" in entry]) == 3
    refused = {"--max_tokens_per_batch must be 1 or more, got 0": ["--max_tokens_per_batch", "0"],
               r"--max_tokens_per_batch 16 is below the longest example the truncation keeps \(--max_length 24\)":
                   ["--max_tokens_per_batch", "16"],
               "--mask_ratio must be from 0 to 1, got -0.2": ["--mask_ratio", "-0.2"],
               "--swaps must be 0 or more, got -1": ["--swaps", "-1"],
               "--batch_size_multiple 4 rounds token batches": ["--batch_size_multiple", "4"],
               # without training, a new untrained model's results would replace a trained autoencoder's
               "hf-srcfeat-pretrain-dae trains a denoising autoencoder: add --do_train": ["--do_train", "false"],
               "--source_lang de, but the tokenizer of --tokenizer_name_or_path .* was built for 'en' sources":
                   ["--source_lang", "de"]}
    for message, bad in refused.items():
        with pytest.raises(SystemExit, match=message):
            pretrain_dae.main([*arguments, "--output_dir", str(tmp_path / "refused"), *bad])
        assert not (tmp_path / "refused").exists(), "refused before any work"
    # Resuming as the translation command does: True for the newest checkpoint, of the model these options build
    resumable = [*arguments, "--output_dir", str(tmp_path / "resumed"), "--save_strategy", "steps", "--save_steps",
                 "3", "--max_tokens_per_batch", "256"]
    pretrain_dae.main(resumable)
    resumed = pretrain_dae.main([*resumable, "--max_steps", "4", "--resume_from_checkpoint", "True"])
    assert max(entry["step"] for entry in resumed["log_history"]) == 4, "went on from checkpoint-3"
    assert resumed["resumed_from"] == str((tmp_path / "resumed" / "checkpoint-3").resolve())
    assert [earlier["global_step"] for earlier in resumed["earlier_results"]] == [3], "the first run's results kept"
    assert set(resumed["earlier_results"][0]["reconstruction"]) == {"bleu_from_corrupted", "bleu_from_original"}
    with pytest.raises(SystemExit, match="is another model than this run builds: --d_model 32"):
        pretrain_dae.main([*resumable, "--max_steps", "5", "--resume_from_checkpoint", "True", "--d_model", "32"])
    # A new run over the resumed one leaves none of its checkpoints or results, and the user's own files
    (tmp_path / "resumed" / "notes.txt").write_text("mine")
    fresh = pretrain_dae.main([*resumable, "--save_strategy", "no", "--overwrite_output_dir"])
    assert fresh["earlier_results"] == [] and not list((tmp_path / "resumed").glob("checkpoint-*"))
    assert (tmp_path / "resumed" / "notes.txt").read_text() == "mine"
    # ... but not the tokenizer it is told to load from there
    tokenizer_arguments = [*resumable, "--tokenizer_name_or_path", str(tmp_path / "resumed"), "--overwrite_output_dir"]
    with pytest.raises(SystemExit, match="is also --tokenizer_name_or_path .*: --overwrite_output_dir would remove"):
        pretrain_dae.main(tokenizer_arguments)
    assert (tmp_path / "resumed" / "tokenizer.json").exists()


def test_feedback_of_layer_i_is_the_mean_of_the_lfe_layers_above_it_and_none_at_the_top():
    states = [torch.full((1, 2, 3), float(level)) for level in (1, 2, 3, 4)]  # s^1 ... s^4
    feedback = top_down_feedback(states, num_layers=4)
    assert [None if ctx is None else ctx.unique().item() for ctx in feedback] == [3.0, 3.5, 4.0, None]
    feedback = top_down_feedback(states, num_layers=3)  # I = 3 < J = 4: the top NMT layer still gets none
    assert [None if ctx is None else ctx.unique().item() for ctx in feedback] == [3.0, 3.5, None]


@pytest.fixture
def feedback_config(feature_tokenizer):
    def make(**overrides) -> LatentFeedbackConfig:
        arguments = dict(vocab_size=len(feature_tokenizer), d_model=16, encoder_layers=3, decoder_layers=1,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                         decoder_ffn_dim=32, dropout=0.0)
        arguments.update(overrides)
        return LatentFeedbackConfig(**arguments)

    return make


@pytest.fixture(scope="module")
def batch(feature_tokenizer, test_sentences):
    return feature_tokenizer(test_sentences[:3], padding=True, return_tensors="pt", source_features=False)


def test_each_layer_gets_the_mean_of_the_lfe_states_above_it(feedback_config, batch):
    model = random_model(LatentFeedbackForConditionalGeneration, feedback_config(lfe_layers=4))
    encoder = model.get_encoder()
    states = encoder.latent_states(batch["input_ids"], batch["attention_mask"])
    assert len(states) == 4
    contexts = encoder.layer_contexts(batch["input_ids"], None, None, batch["attention_mask"])
    torch.testing.assert_close(contexts[0].feedback, (states[1] + states[2] + states[3]) / 3)
    torch.testing.assert_close(contexts[1].feedback, (states[2] + states[3]) / 2)
    assert contexts[2].feedback is None, "the top NMT layer gets no feedback (zero)"
    lfe_outputs = encoder.lfe(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              output_hidden_states=True)
    torch.testing.assert_close(states, list(lfe_outputs.hidden_states[1:]), msg="s^j are the LFE's layer outputs")


def test_rectified_self_attention_reads_x_plus_ctx_but_the_residual_adds_x(feedback_config, batch):
    model = random_model(LatentFeedbackForConditionalGeneration, feedback_config())
    layer = model.get_encoder().layers[0]
    torch.manual_seed(1)
    x, ctx = torch.randn(3, batch["input_ids"].shape[1], 16), torch.randn(3, batch["input_ids"].shape[1], 16)
    mask = batch["attention_mask"][:, None, None, :].bool()
    output, _ = layer(x, mask, FeedbackContext(feedback=ctx))
    attended, _ = layer.self_attn(x + ctx, attention_mask=mask)  # Eq. (3): Q, K, V from x'
    hidden = layer.self_attn_sublayer.layer_norm(x + attended)  # Eq. (4): the residual adds x
    expected = layer.ffn_sublayer.layer_norm(hidden + layer.ffn(hidden))  # Eq. (2), unchanged
    torch.testing.assert_close(output, expected)


def test_only_the_chosen_layers_receive_feedback(feedback_config, batch):
    model = random_model(LatentFeedbackForConditionalGeneration, feedback_config(feedback_layers=[1]))
    contexts = model.get_encoder().layer_contexts(batch["input_ids"], None, None, batch["attention_mask"])
    assert [context.feedback is not None for context in contexts] == [False, True, False]


def test_the_lfe_reads_the_clean_source_inside_translation(feedback_config, batch):
    model = random_model(LatentFeedbackForConditionalGeneration, feedback_config())
    seen = []
    model.get_encoder().lfe.embed_source.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model.generate(**batch, max_new_tokens=3)
    assert len(seen) == 1 and torch.equal(seen[0], batch["input_ids"])


def test_a_frozen_lfe_keeps_its_weights_and_runs_without_dropout(feedback_config, batch, tmp_path):
    config = feedback_config(lfe_mode="frozen", lfe_pretrained_from=str(tmp_path), dropout=0.3)
    model = random_model(LatentFeedbackForConditionalGeneration, config).train()
    lfe = model.get_encoder().lfe
    assert not lfe.training and model.get_encoder().layers[0].training
    before = {name: value.clone() for name, value in lfe.state_dict().items()}
    others = model.get_encoder().layers[0].self_attn.q_proj.weight.clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(**batch, labels=batch["input_ids"][:, :5]).loss.backward()
    optimizer.step()
    assert all(torch.equal(value, before[name]) for name, value in lfe.state_dict().items())
    assert not torch.equal(model.get_encoder().layers[0].self_attn.q_proj.weight, others)


def test_a_joint_lfe_reads_the_nmt_source_embeddings_and_keeps_them_tied_through_save_and_load(
    feedback_config, batch, tmp_path
):
    for share_embeddings in (True, False):
        config = feedback_config(share_embeddings=share_embeddings)
        model = random_model(LatentFeedbackForConditionalGeneration, config)
        encoder = model.get_encoder()
        assert encoder.lfe.embed_tokens is encoder.embed_tokens
        own = random_model(LatentFeedbackForConditionalGeneration, feedback_config(
            share_embeddings=share_embeddings, lfe_own_embeddings=True))
        width = config.vocab_size * config.d_model
        assert own.num_parameters() - model.num_parameters() == width, "exactly one embedding matrix apart"
        model.save_pretrained(tmp_path / str(share_embeddings))
        reloaded = LatentFeedbackForConditionalGeneration.from_pretrained(tmp_path / str(share_embeddings))
        assert reloaded.get_encoder().lfe.embed_tokens is reloaded.get_encoder().embed_tokens
        torch.testing.assert_close(reloaded.get_encoder()(**batch).last_hidden_state,
                                   model.get_encoder()(**batch).last_hidden_state)
    pretrained = feedback_config(lfe_mode="fine_tuned", lfe_pretrained_from=str(tmp_path))
    assert pretrained.lfe_has_own_embeddings, "an independently pre-trained LFE keeps its own (Section 3)"


def test_shared_parameters_add_nothing_to_the_baseline(feedback_config, batch):
    config = feedback_config(share_lfe_parameters=True)
    shared = LatentFeedbackForConditionalGeneration(config)
    baseline = SrcFeatTransformerForConditionalGeneration(
        SrcFeatTransformerConfig(**{k: v for k, v in config.to_diff_dict().items()
                                    if k in SrcFeatTransformerConfig().to_dict()}))
    assert shared.get_encoder().lfe is None
    assert shared.num_parameters() == baseline.num_parameters()
    states = shared.get_encoder().latent_states(batch["input_ids"], batch["attention_mask"])
    assert len(states) == 3


@pytest.mark.parametrize(("overrides", "message"), [
    ({"lfe_layers": 2}, "at least `encoder_layers`"),
    ({"feedback_layers": [3]}, "feedback_layers"),
    ({"lfe_mode": "pretrained"}, "lfe_mode"),
    ({"lfe_mode": "frozen"}, "lfe_pretrained_from"),
    ({"lfe_pretrained_from": "runs/dae"}, "joint"),
    ({"share_lfe_parameters": True, "lfe_mode": "frozen", "lfe_pretrained_from": "x"}, "cannot be `frozen`"),
    ({"share_lfe_parameters": True, "lfe_layers": 4}, "share_lfe_parameters"),
    ({"lfe_own_embeddings": "yes"}, "lfe_own_embeddings"),
    ({"share_lfe_parameters": True, "lfe_own_embeddings": True}, "lfe_own_embeddings"),
    ({"lfe_mode": "frozen", "lfe_pretrained_from": "x", "lfe_own_embeddings": False}, "own embeddings"),
])
def test_invalid_arguments_raise_errors_naming_them(feedback_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        feedback_config(**overrides)


def test_a_config_says_whether_any_layer_gets_feedback(feedback_config):
    """Layer i takes the LFE layers above it and the top layer none: one layer, or feedback at the top alone, gets
    none (the training command warns of a new model of that kind; a saved one still loads)."""
    assert feedback_config().gives_feedback and feedback_config(feedback_layers=[1]).gives_feedback
    assert not feedback_config(encoder_layers=1).gives_feedback
    assert not feedback_config(feedback_layers=[2]).gives_feedback


@pytest.fixture(scope="module")
def pretrained_dae(feature_tokenizer, tmp_path_factory, multi30k_dir):
    """A tiny denoising autoencoder trained by hf-srcfeat-pretrain-dae on real Multi30k English sentences."""
    folder = tmp_path_factory.mktemp("dae")
    feature_tokenizer.save_pretrained(folder / "tokenizer")
    results = pretrain_dae.main([
        "--output_dir", str(folder / "dae"), "--tokenizer_name_or_path", str(folder / "tokenizer"),
        "--d_model", "64", "--encoder_layers", "2", "--decoder_layers", "1", "--attention_heads", "4",
        "--ffn_dim", "128", "--layernorm_position", "post", "--max_train_samples", "600", "--max_eval_samples",
        "10", "--max_length", "40", "--do_train", "--max_steps", "60", "--per_device_train_batch_size", "32",
        "--learning_rate", "3e-3", "--warmup_steps", "5", "--logging_steps", "10", "--save_strategy", "no",
        "--use_cpu", "--report_to", "none", "--disable_tqdm", "true", "--seed", "2",
    ])
    return folder / "dae", results


@pytest.mark.slow
def test_dae_pretraining_lowers_the_reconstruction_loss_and_records_its_run(pretrained_dae):
    folder, results = pretrained_dae
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert losses[-1] < 0.8 * losses[0], losses
    saved = json.loads((folder / "dae_results.json").read_text())
    assert {"bleu_from_corrupted", "bleu_from_original"} <= set(saved["reconstruction"])
    assert saved["sentences"] == 600 and saved["code_version"] and saved["data_files"][0].endswith("train.en.gz")
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()


@pytest.mark.slow
def test_the_lfe_is_initialised_from_the_dae_encoder(pretrained_dae, feature_tokenizer):
    folder, _ = pretrained_dae
    config = tiny_method_config(LatentFeedbackConfig, feature_tokenizer, lfe_mode="fine_tuned",
                                lfe_pretrained_from=str(folder))
    model = LatentFeedbackForConditionalGeneration(config)
    model.load_pretrained_parts()
    autoencoder = SrcFeatTransformerForConditionalGeneration.from_pretrained(folder)
    lfe, dae_encoder = model.get_encoder().lfe, autoencoder.get_encoder()
    assert torch.equal(lfe.embed_tokens.weight, dae_encoder.embed_tokens.weight)
    assert all(torch.equal(a, b) for a, b in zip(lfe.layers.state_dict().values(),
                                                 dae_encoder.layers.state_dict().values(), strict=True))
    wrong = tiny_method_config(LatentFeedbackConfig, feature_tokenizer, encoder_layers=3, lfe_mode="fine_tuned",
                               lfe_pretrained_from=str(folder))
    with pytest.raises(ValueError, match="2 encoder layers, the LFE 3"):
        LatentFeedbackForConditionalGeneration(wrong).load_pretrained_parts()
    for settings, message in (({"encoder_attention_heads": 2, "decoder_attention_heads": 2},
                               "encoder_attention_heads=4, this model 2"),
                              ({"encoder_ffn_dim": 64}, "encoder_ffn_dim=128, this model 64"),
                              ({"tokenizer_fingerprint": "0123456789abcdef"}, "trained with another tokenizer")):
        other = tiny_method_config(LatentFeedbackConfig, feature_tokenizer, lfe_mode="fine_tuned",
                                   lfe_pretrained_from=str(folder), **settings)
        with pytest.raises(ValueError, match=message):  # weights that would load into the wrong places, or fail
            LatentFeedbackForConditionalGeneration(other).load_pretrained_parts()
    joint = tiny_method_config(LatentFeedbackConfig, feature_tokenizer)
    LatentFeedbackForConditionalGeneration(joint).save_pretrained(folder.parent / "translation_model")
    with pytest.raises(ValueError, match="is a latent_feedback model, not the denoising autoencoder"):
        LatentFeedbackForConditionalGeneration(tiny_method_config(
            LatentFeedbackConfig, feature_tokenizer, lfe_mode="fine_tuned",
            lfe_pretrained_from=str(folder.parent / "translation_model"))).load_pretrained_parts()

    # Shared parameters + pre-trained (Table 8): the NMT encoder's layers and source embeddings come from the DAE.
    shared = tiny_method_config(LatentFeedbackConfig, feature_tokenizer, lfe_mode="fine_tuned",
                                lfe_pretrained_from=str(folder), share_lfe_parameters=True)
    model = LatentFeedbackForConditionalGeneration(shared)
    model.load_pretrained_parts()
    assert torch.equal(model.get_encoder().embed_tokens.weight, dae_encoder.embed_tokens.weight)
    assert torch.equal(model.get_encoder().layers[0].ffn.fc1.weight, dae_encoder.layers[0].ffn.fc1.weight)


class TestDaePretrainedLatentFeedbackEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, feature_tokenizer, train_pairs, pretrained_dae):
        folder, _ = pretrained_dae
        config = tiny_method_config(LatentFeedbackConfig, feature_tokenizer, lfe_mode="fine_tuned",
                                    lfe_pretrained_from=str(folder))
        return train_from_raw_text(LatentFeedbackForConditionalGeneration, config, feature_tokenizer, train_pairs)


def test_ewt_sentences_can_join_the_monolingual_data(ewt_dir, multi30k_dir):
    args = pretrain_dae.DaeArguments(ewt_dir=str(ewt_dir), data_dir=str(multi30k_dir), max_train_samples=200,
                                     max_eval_samples=5)
    sentences, validation, files, _ = pretrain_dae.monolingual_data(args)
    assert len(validation) == 5 and files[0].endswith("train.en.gz")
    assert len(sentences) - 200 > 10000 and files[-1].endswith("en_ewt-ud-train.conllu.gz")
    with pytest.raises(SystemExit, match="no en_ewt-ud-train"):
        pretrain_dae.monolingual_data(pretrain_dae.DaeArguments(ewt_dir=str(REPO), data_dir=str(multi30k_dir),
                                                                max_train_samples=5))


@pytest.fixture(scope="module")
def monolingual_files(multi30k_dir, tmp_path_factory) -> dict[str, Path]:
    """Multi30k English sentences as plain text, as JSON lines of translation dicts, and as a `datasets` folder."""
    folder = tmp_path_factory.mktemp("monolingual")
    with gzip.open(multi30k_dir / "val.en.gz", "rt") as english, gzip.open(multi30k_dir / "val.de.gz", "rt") as german:
        pairs = [(en.strip(), de.strip()) for en, de, _ in zip(english, german, range(60), strict=False)]
    (folder / "news.txt").write_text("".join(en + "\n" for en, _ in pairs))
    json_lines = "".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in pairs)
    (folder / "pairs.jsonl").write_text(json_lines)
    (folder / "hub_like").mkdir()
    (folder / "hub_like" / "train.jsonl").write_text(json_lines)
    (folder / "hub_like" / "validation.jsonl").write_text(json_lines[:json_lines.index("\n", 2000) + 1])
    return {"text": folder / "news.txt", "json": folder / "pairs.jsonl", "dataset": folder / "hub_like",
            "sentences": [en for en, _ in pairs]}


def test_monolingual_data_comes_from_text_files_json_lines_or_a_datasets_source(monolingual_files):
    sentences = monolingual_files["sentences"]
    text = load_monolingual("en", train_file=str(monolingual_files["text"]))
    assert list(text.train["text"]) == sentences and text.validation is None
    english_side = load_monolingual("en", train_file=str(monolingual_files["json"]))
    assert list(english_side.train["text"]) == sentences
    hub = load_monolingual("en", dataset_name=str(monolingual_files["dataset"]))
    assert list(hub.train["text"]) == sentences and 0 < len(hub.validation) < len(sentences)
    assert hub.origin == [f"{monolingual_files['dataset']} split train", f"{monolingual_files['dataset']} split validation"]
    with pytest.raises(ValueError, match="row 1: the translation has no 'fr' side"):
        load_monolingual("fr", train_file=str(monolingual_files["json"]))


def test_monolingual_data_without_validation_holds_out_the_last_sentences(monolingual_files):
    args = pretrain_dae.DaeArguments(train_file=str(monolingual_files["text"]), max_eval_samples=10)
    sentences, validation, files, origin = pretrain_dae.monolingual_data(args)
    assert sentences == monolingual_files["sentences"][:50] and validation == monolingual_files["sentences"][50:]
    assert files == [str(monolingual_files["text"])] and "held out" in origin


def test_the_autoencoder_commands_data_errors_are_one_line_naming_the_file(monolingual_files, tmp_path):
    (tmp_path / "corpus.en").write_text("A dog runs.\n")
    for train_file, message in ((tmp_path / "corpus.en", r"corpus.en: monolingual data must be a .txt file"),
                                (tmp_path / "missing.txt", r"no monolingual file .*missing.txt")):
        with pytest.raises(SystemExit, match=message):
            pretrain_dae.monolingual_data(pretrain_dae.DaeArguments(train_file=str(train_file)))


def test_an_empty_line_of_monolingual_text_is_named(tmp_path):
    (tmp_path / "mono.txt").write_text("A dog runs.\n\nA cat sleeps.\n")
    with pytest.raises(ValueError, match="mono.txt line 2 is empty"):
        load_monolingual("en", train_file=str(tmp_path / "mono.txt"))


def test_monolingual_json_lines_that_datasets_could_not_read_are_named_by_line(tmp_path):
    (tmp_path / "mono.jsonl").write_text('{"text": "A dog runs."}\n{"text": "A cat \\udc00 sleeps."}\n'
                                         '{"text": 7}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"mono.jsonl line 2 holds \\udc00, half of a UTF-16 surrogate pair"):
        load_monolingual("en", train_file=str(tmp_path / "mono.jsonl"))
    (tmp_path / "mono.jsonl").write_text('{"text": "A dog runs."}\n{"text": 7}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"mono.jsonl row 2: the sentence is not text: int 7"):
        load_monolingual("en", train_file=str(tmp_path / "mono.jsonl"))
    (tmp_path / "array.json").write_text('[{"text": "A dog runs."}, {"text": "A cat sleeps."}]\n', encoding="utf-8")
    assert list(load_monolingual("en", train_file=str(tmp_path / "array.json")).train["text"]) == [
        "A dog runs.", "A cat sleeps."], "a whole-file JSON array is read by datasets"


def test_an_autoencoder_on_own_monolingual_data_needs_the_translation_tokenizer_first(monolingual_files, tmp_path):
    with pytest.raises(SystemExit, match="needs --tokenizer_name_or_path.*--tokenizer_only"):
        pretrain_dae.main(["--output_dir", str(tmp_path / "dae"), "--train_file", str(monolingual_files["text"]),
                           "--use_cpu", "--report_to", "none"])
    assert not (tmp_path / "dae").exists()
