"""What the options of `hf-srcfeat-train` do to a run started from a pretrained checkpoint (`--init_from`): language
codes resolve to the token the checkpoint's tokenizer puts into the encodings (M2M100's `de` is the token `__de__`,
not the subword `de`) and are checked against it before any parsing; `--dropout` and `--label_smoothing` apply,
the options the weights fix are refused; `--optim` chooses the optimizer of the adapter options; a grafted LFE's
settings are checked against what a graft does (a copy of the checkpoint's encoder), with advice that works."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    M2M100Config,
    M2M100ForConditionalGeneration,
    M2M100Tokenizer,
)

from hf_srcfeat.commands import train
from hf_srcfeat.commands.train_arguments import ModelArguments
from hf_srcfeat.tokenization_pretrained_source_features import PretrainedSourceFeatureTokenizer

from .test_pretrained_tokenizer import checkpoint_tokenizers, train_sentencepiece  # noqa: F401  (a fixture)
from .test_pretrained_training import RUN, SIZE, marian_checkpoint, tiny_checkpoint  # noqa: F401  (a fixture)

spm = pytest.importorskip("sentencepiece")

#: Where a run would parse its sources: no Stanza here, so a check that comes after the parsing would fail otherwise.
NO_PARSING = ["--do_train", "--use_cpu", "--dataset_name", "multi30k", "--source_lang", "en", "--target_lang", "de"]


@pytest.fixture(scope="module")
def m2m_checkpoint(multi30k_dir, checkpoint_tokenizers, tmp_path_factory):  # noqa: F811
    """A tiny M2M100 checkpoint with M2M100's own (Python) tokenizer over a SentencePiece model trained on Multi30k
    English and German, whose vocabulary has the subword `de` beside the language token `__de__`."""
    folder = tmp_path_factory.mktemp("m2m100")
    with gzip.open(multi30k_dir / "train.en.gz", "rt") as english, gzip.open(multi30k_dir / "train.de.gz", "rt") as german:
        lines = [line.strip() for pair in zip(english, german, range(3000), strict=False) for line in pair[:2]]
    model = train_sentencepiece(folder, "joint", lines, "bpe")
    processor = spm.SentencePieceProcessor(model_file=model)
    (folder / "vocab.json").write_text(json.dumps({processor.id_to_piece(index): index
                                                   for index in range(processor.get_piece_size())}))
    M2M100Tokenizer(vocab_file=str(folder / "vocab.json"), spm_file=model, src_lang="en", tgt_lang="de",
                    language_codes="m2m100").save_pretrained(str(folder / "tokenizer"))
    base = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    torch.manual_seed(0)
    # M2M100's embeddings hold the SentencePiece vocabulary, then its language tokens and 8 made-up words
    model = M2M100ForConditionalGeneration(M2M100Config(
        vocab_size=max(base.lang_token_to_id.values()) + 1 + 8, pad_token_id=base.pad_token_id,
        eos_token_id=base.eos_token_id, decoder_start_token_id=base.eos_token_id, **SIZE))
    model.save_pretrained(folder / "checkpoint")
    base.save_pretrained(folder / "checkpoint")
    return folder / "checkpoint"


@pytest.mark.slow
def test_an_m2m100_run_forces_the_language_token_its_labels_start_with_not_the_subword_of_that_code(m2m_checkpoint,
                                                                                                 tmp_path):
    base = AutoTokenizer.from_pretrained(m2m_checkpoint)
    assert base.convert_tokens_to_ids("de") not in (base.unk_token_id, base.get_lang_id("de")), "de is also a subword"
    train.main(["--init_from", str(m2m_checkpoint), "--model_type", "diverse_input", "--source_lang_code", "en",
                "--target_lang_code", "de", "--output_dir", str(tmp_path / "run"), "--max_steps", "1",
                *[argument for argument in RUN if argument not in ("--do_predict", "--predict_with_generate")]])
    tokenizer = PretrainedSourceFeatureTokenizer.from_pretrained(tmp_path / "run")
    labels = tokenizer(["A dog runs."], text_target=["Ein Hund rennt."])["labels"][0]
    forced = GenerationConfig.from_pretrained(tmp_path / "run").forced_bos_token_id
    assert forced == labels[0] == base.get_lang_id("de")
    assert tokenizer.convert_ids_to_tokens(forced) == "__de__"


def test_language_codes_resolve_as_the_checkpoint_tokenizer_resolves_them(m2m_checkpoint, checkpoint_tokenizers):  # noqa: F811
    base = AutoTokenizer.from_pretrained(m2m_checkpoint)
    # M2M100: a code stands for its token, whether or not the code is also a subword (de) or not (zu)
    for code in ("de", "en", "zu"):
        assert train.language_code_id(base, code) == base.get_lang_id(code)
    assert train.language_code_id(base, "__de__") is None and train.language_code_id(base, "de_DE") is None
    # NLLB and mBART-50: the code is the token; a subword of the same spelling is no code
    for family, code, subword in (("nllb", "deu_Latn", "de"), ("mbart50", "de_DE", "de")):
        tokenizer = checkpoint_tokenizers[family]
        assert train.language_code_id(tokenizer, code) == tokenizer.convert_tokens_to_ids(code)
        assert tokenizer.convert_tokens_to_ids(subword) != tokenizer.unk_token_id
        assert train.language_code_id(tokenizer, subword) is None
    # A valid M2M100 code that is no subword passes the start-up checks
    train.check_pretrained_start(ModelArguments(init_from=str(m2m_checkpoint), model_type="diverse_input",
                                                source_lang_code="en", target_lang_code="zu"))


def test_a_language_code_the_checkpoint_tokenizer_lacks_is_named_with_its_spelling_before_any_parsing(
        m2m_checkpoint, checkpoint_tokenizers, tmp_path):  # noqa: F811
    nllb = tiny_checkpoint("nllb", checkpoint_tokenizers["nllb"], tmp_path / "nllb")
    mbart50 = tiny_checkpoint("mbart50", checkpoint_tokenizers["mbart50"], tmp_path / "mbart50")
    for checkpoint, codes, message in (
            (m2m_checkpoint, ["__en__", "de"], "--source_lang_code __en__: the tokenizer of .* has no such language "
                                               "code \\(M2M100's codes are spelt without underscores: en, whose "
                                               "token is __en__\\)"),
            (m2m_checkpoint, ["en", "de_DE"], "--target_lang_code de_DE: .* no such language code; did you mean de\\?"),
            (mbart50, ["en", "de_DE"], "--source_lang_code en: .* no such language code; did you mean en_XX\\? Its "
                                       "52 codes include"),
            (nllb, ["eng_Latn", "de"], "--target_lang_code de: .* no such language code; did you mean deu_Latn\\?")):
        with pytest.raises(SystemExit, match=message):
            train.main(["--init_from", str(checkpoint), "--model_type", "diverse_input", "--source_lang_code",
                        codes[0], "--target_lang_code", codes[1], "--output_dir", str(tmp_path / "run"), *NO_PARSING,
                        "--stanza_dir", str(tmp_path / "no_stanza_here")])
        assert not (tmp_path / "run").exists(), "refused before any work"


@pytest.mark.slow
def test_dropout_label_smoothing_and_optim_apply_to_a_graft_with_adapter_options(marian_checkpoint, tmp_path):  # noqa: F811
    checkpoint_config = json.loads((marian_checkpoint / "config.json").read_text())
    assert checkpoint_config["dropout"] != 0.2
    run = [argument for argument in RUN if argument not in ("--do_predict", "--predict_with_generate")]
    run[run.index("--save_strategy") + 1] = "steps"
    results = train.main(["--init_from", str(marian_checkpoint), "--model_type", "deps_san", "--dropout", "0.2",
                          "--label_smoothing", "0.05", "--optim", "sgd", "--added_learning_rate", "1e-2",
                          "--output_dir", str(tmp_path / "run"), "--max_steps", "2", "--save_steps", "2", *run])
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["dropout"], config["label_smoothing"]) == (0.2, 0.05)
    assert (results["model_args"]["dropout"], results["model_args"]["label_smoothing"]) == (0.2, 0.05)
    assert config["attention_dropout"] == checkpoint_config["attention_dropout"], "the checkpoint's own"
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "run")
    assert model.config.dropout == 0.2
    # The optimizer --optim names, over the pretrained parameters at --learning_rate and the added at their own rate
    state = torch.load(tmp_path / "run" / "checkpoint-2" / "optimizer.pt", weights_only=True)
    groups = state["param_groups"]
    assert all("momentum" in group and "betas" not in group for group in groups), "SGD's, not AdamW's"
    assert {group["initial_lr"] for group in groups} == {3e-3, 1e-2}


@pytest.mark.parametrize(("arguments", "message"), [
    (["--layernorm_position", "post"], "--layernorm_position: a model started from --init_from has the checkpoint's "
                                       "sizes, layout and vocabulary; leave them out"),
    (["--model_type", "deps_san", "--added_learning_rate", "1e-3", "--optim", "galore_adamw"],
     "--optim galore_adamw makes its own parameter groups .*--freeze_pretrained / --added_learning_rate"),
    (["--model_type", "deps_san", "--freeze_pretrained", "--optim", "lomo"], "--optim lomo makes its own parameter"),
    (["--model_type", "latent_feedback", "--config_overrides", '{"lfe_layers": 3}'],
     "lfe_layers=3: a graft's LFE starts as a copy of the checkpoint's encoder, which has 2 layers; leave lfe_layers "
     "out \\(or give 2\\)"),
    (["--model_type", "srcfeat_composed", "--config_overrides",
      '{"components": ["deps_san", "latent_feedback"], "lfe_layers": 4}'], "lfe_layers=4: a graft's LFE starts as a "
                                                                            "copy of the checkpoint's encoder"),
    (["--model_type", "latent_feedback", "--config_overrides", '{"lfe_pretrained_from": "/x"}'],
     "lfe_pretrained_from='/x': a graft's LFE starts as a copy of the checkpoint's encoder.*Leave lfe_pretrained_from "
     "\\(and lfe_mode\\) out"),
    (["--model_type", "latent_feedback", "--config_overrides", '{"lfe_mode": "frozen", "lfe_pretrained_from": "/x"}'],
     "Leave lfe_pretrained_from \\(and lfe_mode\\) out"),
    (["--model_type", "latent_feedback", "--config_overrides", '{"lfe_mode": "fine_tuned"}'],
     "lfe_mode='fine_tuned': .*the only mode a graft takes\\); leave lfe_mode out"),
    (["--model_type", "latent_feedback", "--config_overrides", '{"share_lfe_parameters": true}'],
     "share_lfe_parameters=True: a graft's LFE starts as a copy of the checkpoint's encoder with its own embeddings, "
     "beside the NMT encoder, so it cannot share the NMT encoder's parameters; leave share_lfe_parameters out"),
])
def test_graft_settings_a_checkpoint_cannot_take_are_refused_before_any_parsing_with_advice_that_works(
        arguments, message, marian_checkpoint, tmp_path):  # noqa: F811
    with pytest.raises(SystemExit, match=message) as refused:
        train.main(["--init_from", str(marian_checkpoint), *arguments, "--output_dir", str(tmp_path / "run"),
                    *NO_PARSING, "--stanza_dir", str(tmp_path / "no_stanza_here")])
    assert not (tmp_path / "run").exists(), "refused before any work"
    assert "'frozen' or 'fine_tuned'" not in str(refused.value) and "lfe_own_embeddings" not in str(refused.value)


def test_an_lfe_as_deep_as_the_checkpoints_encoder_and_the_dropouts_are_taken_by_a_graft(marian_checkpoint):  # noqa: F811
    arguments = ModelArguments(init_from=str(marian_checkpoint), model_type="latent_feedback",
                               config_overrides='{"lfe_layers": 2, "attention_dropout": 0.15}', dropout=0.25,
                               label_smoothing=0.0)
    arguments.__dict__["_given"] = {"dropout", "label_smoothing", "config_overrides", "model_type", "init_from"}
    train.check_pretrained_start(arguments)
    config = train.started_config(AutoModelForSeq2SeqLM.from_pretrained(marian_checkpoint).config, arguments)
    assert (config.lfe_layers, config.dropout, config.attention_dropout, config.label_smoothing) == (2, 0.25, 0.15,
                                                                                                     0.0)
