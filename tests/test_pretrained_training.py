"""`hf-srcfeat-train --init_from <checkpoint> --model_type <method>`: a tiny Marian checkpoint saved with its own
tokenizer (as a Hub repository holds them) is converted, its tokenizer given source features, the method grafted
on, and trained on Multi30k; the adapter options train only the added parameters, at their own rate, and
unfreeze the rest later."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForSeq2SeqLM,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    MBartConfig,
    MBartForConditionalGeneration,
)

from hf_srcfeat.commands import train
from hf_srcfeat.tokenization_pretrained_source_features import (
    PretrainedSourceFeatureTokenizer,
    load_tokenizer,
)

from .test_pretrained_tokenizer import checkpoint_tokenizers  # noqa: F401  (a fixture)

RUN = ["--dataset_name", "multi30k", "--source_lang", "en", "--target_lang", "de", "--max_train_samples", "48",
       "--max_eval_samples", "8", "--max_predict_samples", "8", "--per_device_train_batch_size", "16",
       "--learning_rate", "3e-3", "--do_train", "--predict_with_generate", "--do_predict", "--generation_num_beams", "2",
       "--generation_max_length", "12", "--use_cpu", "--report_to", "none", "--save_strategy", "no",
       "--disable_tqdm", "true", "--logging_steps", "1"]


SIZE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128)


def tiny_checkpoint(family: str, base, folder):
    """A random checkpoint of `family` over `base`'s vocabulary, saved with the tokenizer as a Hub repository is."""
    torch.manual_seed(0)
    ids = dict(vocab_size=len(base), pad_token_id=base.pad_token_id, eos_token_id=base.eos_token_id)
    if family == "marian":
        model = MarianMTModel(MarianConfig(**ids, decoder_start_token_id=base.pad_token_id, **SIZE))
    elif family == "nllb":
        model = M2M100ForConditionalGeneration(M2M100Config(**ids, decoder_start_token_id=base.eos_token_id, **SIZE))
    else:
        model = MBartForConditionalGeneration(MBartConfig(**ids, decoder_start_token_id=base.eos_token_id, **SIZE))
    model.save_pretrained(folder)
    base.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def marian_checkpoint(checkpoint_tokenizers, tmp_path_factory):  # noqa: F811
    return tiny_checkpoint("marian", checkpoint_tokenizers["marian"], tmp_path_factory.mktemp("opus-mt-tiny"))


@pytest.mark.slow
@pytest.mark.parametrize(("family", "model_type", "codes"), [
    ("nllb", "phrase_rep", ["--source_lang_code", "eng_Latn", "--target_lang_code", "deu_Latn"]),
    ("mbart50", "latent_feedback", ["--source_lang_code", "en_XX", "--target_lang_code", "de_DE"]),
])
def test_nllb_and_mbart_checkpoints_train_with_their_language_codes(family, model_type, codes, checkpoint_tokenizers,  # noqa: F811
                                                                    tmp_path):
    checkpoint = tiny_checkpoint(family, checkpoint_tokenizers[family], tmp_path / "checkpoint")
    results = train.main(["--init_from", str(checkpoint), "--model_type", model_type, *codes,
                          "--output_dir", str(tmp_path / "run"), "--max_steps", "4", *RUN,
                          "--save_strategy", "steps", "--save_steps", "4"])
    assert results["config"]["model_type"] == model_type and results["global_step"] == 4
    swapped = [codes[0], codes[3], codes[2], codes[1]]  # the source and target codes exchanged
    with pytest.raises(SystemExit, match="was started with other language codes: --source_lang_code"):
        train.main(["--init_from", str(checkpoint), "--model_type", model_type, *swapped, "--output_dir",
                    str(tmp_path / "run"), "--max_steps", "6", *RUN, "--resume_from_checkpoint", "True"])
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "run")
    tokenizer = PretrainedSourceFeatureTokenizer.from_pretrained(tmp_path / "run")
    target_code = tokenizer.convert_tokens_to_ids(codes[-1])
    assert model.generation_config.forced_bos_token_id == target_code
    batch = tokenizer(["A dog runs."], return_tensors="pt")
    assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())[0] == codes[1]  # the source code first
    assert model.generate(**batch, num_beams=2, max_new_tokens=6)[0, 1] == target_code
    # The forced target-language token counts 0 in every score: beam search's, a greedy translation's and forced
    # decoding's agree on the same output.
    from hf_srcfeat import pipeline
    from hf_srcfeat.metrics.forced_decoding import score_targets

    model.generation_config.forced_eos_token_id = None  # forced decoding knows no length limit to force </s> at
    translator = pipeline("translation", model=model, tokenizer=tokenizer, max_new_tokens=8, length_penalty=1.0)
    for beams in (1, 2):
        [best] = translator("A dog runs.", num_beams=beams, return_scores=True, return_tensors=True)
        ids = best["translation_token_ids"].tolist()[1:]  # without the decoder's start
        ids = ids[:ids.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in ids else ids
        [forced] = score_targets(model, tokenizer, ["A dog runs."], [ids])
        assert forced.per_token == pytest.approx(best["score"], abs=1e-4), beams


@pytest.fixture(scope="module")
def grafted_run(marian_checkpoint, tmp_path_factory):
    folder = tmp_path_factory.mktemp("grafted") / "run"
    results = train.main(["--init_from", str(marian_checkpoint), "--model_type", "deps_san", "--config_overrides",
                          '{"deps_san_layers": [0, 1]}', "--output_dir", str(folder), "--max_steps", "6", *RUN])
    return folder, results


@pytest.mark.slow
def test_the_train_command_grafts_a_method_onto_a_checkpoint_and_trains_it(grafted_run):
    folder, results = grafted_run
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert results["config"]["model_type"] == "deps_san" and results["config"]["converted_from"] == "marian"
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = PretrainedSourceFeatureTokenizer.from_pretrained(folder)
    assert tokenizer("A dog runs.")["input_ids"] == tokenizer.base("A dog runs.")["input_ids"]
    assert tokenizer.model_max_length == results["data_args"]["max_source_length"], \
        "translation cuts sources where training cut them"
    assert model.model.encoder.deps_san_gates.values.abs().sum() > 0
    predictions = list(folder.glob("test_*predictions*.txt"))
    assert predictions and len(predictions[0].read_text().splitlines()) == 8  # the test slice, translated


@pytest.mark.slow
def test_a_graft_trains_on_a_user_factor_it_reads_and_refuses_one_it_would_not_read(marian_checkpoint, multi30k_dir,
                                                                                   tmp_path):
    from hf_srcfeat.data.multi30k import load_multi30k

    from .test_user_factors import write_factor_corpus

    corpus = write_factor_corpus(tmp_path / "train.jsonl", load_multi30k("train", "en", "de", multi30k_dir, limit=32))
    run = ["--init_from", str(marian_checkpoint), "--variant", "relevance_add", "--train_file", corpus,
           "--validation_file", corpus, "--source_factor_columns", "case", "--max_steps", "2",
           *[argument for argument in RUN if argument not in ("--dataset_name", "multi30k", "--do_predict")]]
    results = train.main([*run, "--output_dir", str(tmp_path / "reads"), "--config_overrides",
                          '{"source_factors": ["pos", "case"]}'])
    assert "case" in results["config"]["source_factors"] and set(results["config"]["extra_factors"]) == {"case"}
    with pytest.raises(SystemExit, match="--source_factor_columns/--inline_source_factors case: relevance_features "
                                         "would not read it"):
        train.main([*run, "--output_dir", str(tmp_path / "unread")])
    assert not (tmp_path / "unread").exists(), "refused before any work"


@pytest.mark.slow
def test_the_translate_command_runs_a_grafted_model_with_its_checkpoint_tokenizer(grafted_run, test_sentences,
                                                                                  tmp_path):
    from hf_srcfeat.commands.translate import main as translate_main

    folder, _ = grafted_run
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in test_sentences[:5]), encoding="utf-8")
    assert translate_main(["--model", str(folder), "--input", str(source), "--output", str(tmp_path / "out.de"),
                           "--num_beams", "2", "--max_new_tokens", "10", "--quiet", "--device", "cpu"]) == 0
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = PretrainedSourceFeatureTokenizer.from_pretrained(folder)
    batch = tokenizer(test_sentences[:5], padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(model.generate(**batch, num_beams=2, max_new_tokens=10), skip_special_tokens=True)
    assert (tmp_path / "out.de").read_text(encoding="utf-8").splitlines() == [text.strip() for text in expected]


@pytest.mark.slow
def test_the_pipeline_loads_a_grafted_run_by_its_folder_with_its_checkpoint_tokenizer(grafted_run, test_sentences):
    import hf_srcfeat

    folder, _ = grafted_run
    translator = hf_srcfeat.pipeline("translation", model=str(folder), num_beams=2, max_new_tokens=10)
    assert isinstance(translator.tokenizer, PretrainedSourceFeatureTokenizer)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = translator.tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    expected = translator.tokenizer.batch_decode(model.generate(**batch, num_beams=2, max_new_tokens=10),
                                                 skip_special_tokens=True)
    assert [output["translation_text"] for output in translator(test_sentences[:3])] == [
        text.strip() for text in expected]


@pytest.mark.slow
def test_auto_tokenizer_on_a_grafted_run_points_to_load_tokenizer(grafted_run):
    from transformers import AutoTokenizer

    folder, _ = grafted_run
    with pytest.raises(ValueError, match="holds a pretrained checkpoint's tokenizer with source features; load it "
                                         r"with hf_srcfeat.tokenization_pretrained_source_features.load_tokenizer"):
        AutoTokenizer.from_pretrained(folder)


@pytest.mark.slow
def test_averaged_checkpoints_of_a_grafted_run_keep_the_checkpoint_tokenizer(marian_checkpoint, test_sentences,
                                                                             tmp_path):
    from hf_srcfeat.commands.average_checkpoints import main as average_main
    from hf_srcfeat.commands.translate import main as translate_main

    run = tmp_path / "run"
    train.main(["--init_from", str(marian_checkpoint), "--output_dir", str(run), "--max_steps", "4", *RUN,
                "--save_strategy", "steps", "--save_steps", "2", "--do_predict", "false"])
    assert average_main([str(run), "--last", "2", "--output", str(tmp_path / "averaged")]) == 0
    tokenizer = load_tokenizer(tmp_path / "averaged")
    assert isinstance(tokenizer, PretrainedSourceFeatureTokenizer)
    assert tokenizer("A dog runs.")["input_ids"] == load_tokenizer(run)("A dog runs.")["input_ids"]
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in test_sentences[:2]), encoding="utf-8")
    assert translate_main(["--model", str(tmp_path / "averaged"), "--input", str(source), "--output",
                           str(tmp_path / "out.de"), "--max_new_tokens", "8", "--quiet", "--device", "cpu"]) == 0


@pytest.mark.slow
def test_freeze_pretrained_trains_only_the_added_parameters_until_unfrozen(marian_checkpoint, tmp_path):
    original = {name: tensor for name, tensor in load_file(marian_checkpoint / "model.safetensors").items()}
    train.main(["--init_from", str(marian_checkpoint), "--model_type", "relevance_features",
                "--config_overrides", '{"source_factors": ["pos", "deprel"]}', "--freeze_pretrained",
                "--added_learning_rate", "1e-2", "--output_dir", str(tmp_path / "frozen"), "--max_steps", "3", *RUN])
    frozen = load_file(tmp_path / "frozen" / "model.safetensors")
    assert torch.equal(frozen["model.encoder.layers.0.ffn.fc1.weight"],
                       original["model.encoder.layers.0.fc1.weight"])  # a pretrained weight, untouched
    assert frozen["model.encoder.embed_source.factor_embeddings.pos.weight"].abs().sum() > 0  # an added one moved

    train.main(["--init_from", str(marian_checkpoint), "--model_type", "relevance_features",
                "--config_overrides", '{"source_factors": ["pos", "deprel"]}', "--freeze_pretrained",
                "--unfreeze_after_steps", "2", "--output_dir", str(tmp_path / "unfrozen"), "--max_steps", "4", *RUN])
    unfrozen = load_file(tmp_path / "unfrozen" / "model.safetensors")
    assert not torch.equal(unfrozen["model.encoder.layers.0.ffn.fc1.weight"],
                           original["model.encoder.layers.0.fc1.weight"])


@pytest.mark.parametrize(("arguments", "message"), [
    (["--freeze_pretrained"], "only apply with --init_from"),
    (["--init_from", "x", "--model_name_or_path", "y"], "--init_from and --model_name_or_path"),
    (["--init_from", "x", "--model_type", "deps_san", "--unfreeze_after_steps", "5"], "needs --freeze_pretrained"),
    (["--init_from", "x", "--model_type", "deps_san", "--added_learning_rate", "-1"], "positive number"),
    (["--init_from", "x", "--freeze_pretrained"], "srcfeat_transformer adds nothing"),
])
def test_pretrained_start_options_are_checked_before_any_work(arguments, message, tmp_path):
    with pytest.raises(SystemExit, match=message):
        train.main([*arguments, "--output_dir", str(tmp_path / "run"), "--do_train", "--use_cpu"])
    assert not (tmp_path / "run").exists()


def test_an_init_from_that_is_no_checkpoint_or_sizes_or_method_settings_it_refuses_are_named_before_any_parsing(
        marian_checkpoint, model_folder, checkpoint_tokenizers, tmp_path):  # noqa: F811
    with pytest.raises(SystemExit, match="--init_from starts a run that trains"):
        train.main(["--init_from", str(marian_checkpoint), "--output_dir", str(tmp_path / "run"), "--do_predict",
                    "--use_cpu"])
    for arguments, message in (
            (["--init_from", str(tmp_path / "nowhere")], "no such folder, and it does not load as a Hub id"),
            (["--init_from", str(model_folder)], "is a model of this library .*continue training it with "
                                                 "--model_name_or_path"),
            (["--init_from", str(marian_checkpoint), "--d_model", "512"], "--d_model: a model started from "
                                                                          "--init_from has the checkpoint's sizes"),
            (["--init_from", str(marian_checkpoint), "--model_type", "deps_san", "--config_overrides",
              '{"deps_san_layers": [7]}'], "with --model_type deps_san: .*deps_san_layers"),
            (["--init_from", str(marian_checkpoint), "--model_type", "deps_san", "--config_overrides",
              '{"deps_san_mode": "sideways"}'], "with --model_type deps_san: .*sideways"),
            (["--init_from", str(marian_checkpoint), "--model_type", "deps_san", "--config_overrides",
              '{"d_model": 64}'], "d_model: a model started from a checkpoint has the checkpoint's sizes"),
            (["--init_from", str(marian_checkpoint), "--config_overrides", '{"encoder_layers": 3}'],
             "encoder_layers: a model started from a checkpoint has the checkpoint's sizes"),
            (["--init_from", str(marian_checkpoint), "--model_type", "diverse_input", "--config_overrides",
              '{"graft_gates": false}'], "diverse_input with graft_gates=False cannot start as the pretrained model"),
            (["--init_from", str(marian_checkpoint), "--target_lang_code", "de_DE"],
             "--target_lang_code: --init_from .* is a marian checkpoint, which takes no language codes"),
            (["--init_from", str(tiny_checkpoint("nllb", checkpoint_tokenizers["nllb"], tmp_path / "nllb")),
              "--target_lang_code", "deu_Latn"], "is a multilingual checkpoint \\(m2m_100\\): give --source_lang_code "
                                                "and --target_lang_code"),
            (["--init_from", str(tmp_path)], "is a folder without a config.json: not a checkpoint"),
            (["--init_from", str(marian_checkpoint), "--early_stopping"],
             "--early_stopping stops beam search, and the run decodes with 1 beam")):
        with pytest.raises(SystemExit, match=message):
            train.main([*arguments, "--output_dir", str(tmp_path / "run"), "--do_train", "--use_cpu",
                        "--stanza_dir", str(tmp_path / "no_stanza_here")])
        assert not (tmp_path / "run").exists()
    copy = shutil.copytree(marian_checkpoint, tmp_path / "copy")
    with pytest.raises(SystemExit, match="is also --init_from .*: --overwrite_output_dir would remove what the run"):
        train.main(["--init_from", str(copy), "--output_dir", str(copy), "--overwrite_output_dir", "--do_train",
                    "--use_cpu", "--stanza_dir", str(tmp_path / "no_stanza_here")])
    assert sorted(path.name for path in copy.iterdir()) == sorted(path.name for path in marian_checkpoint.iterdir())


@pytest.mark.slow
def test_a_grafted_model_keeps_the_checkpoints_decoding_settings_and_resumes_only_as_the_same_method(
        marian_checkpoint, tmp_path):
    from transformers import GenerationConfig

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(marian_checkpoint, checkpoint)
    GenerationConfig.from_dict({**GenerationConfig.from_pretrained(checkpoint).to_dict(), "num_beams": 5,
                                "max_length": 77}).save_pretrained(checkpoint)
    run = [arguments for arguments in RUN if arguments not in ("--generation_num_beams", "2",
                                                                "--generation_max_length", "12",
                                                                "--predict_with_generate", "--do_predict")]
    run[run.index("no")] = "steps"  # --save_strategy steps
    train.main(["--init_from", str(checkpoint), "--model_type", "deps_san", "--output_dir", str(tmp_path / "run"),
                "--max_steps", "2", "--save_steps", "2", *run])
    saved = GenerationConfig.from_pretrained(tmp_path / "run")
    assert (saved.num_beams, saved.max_length) == (5, 77), "the checkpoint's own settings"
    with pytest.raises(SystemExit, match="is a deps_san model, this run grafts relevance_features"):
        train.main(["--init_from", str(checkpoint), "--model_type", "relevance_features", "--output_dir",
                    str(tmp_path / "run"), "--max_steps", "4", "--resume_from_checkpoint", "True", *run])
    # The same method with other settings: its saved gates would load into other layers without a word
    with pytest.raises(SystemExit, match=r"is another model than this run builds: deps_san_layers \[1\] \(the "
                                         r"checkpoint's: None\)"):
        train.main(["--init_from", str(checkpoint), "--model_type", "deps_san", "--config_overrides",
                    '{"deps_san_layers": [1]}', "--output_dir", str(tmp_path / "run"), "--max_steps", "4",
                    "--resume_from_checkpoint", "True", *run])


@pytest.mark.slow
@pytest.mark.parametrize(("family", "model_type", "extra"), [
    ("marian", "srcfeat_transformer", []),
    ("nllb", "relevance_features", ["--config_overrides", '{"source_factors": ["pos", "deprel"]}',
                                    "--source_lang_code", "eng_Latn", "--target_lang_code", "deu_Latn"]),
])
def test_a_run_from_a_checkpoint_exports_to_ctranslate2_and_translates_as_it_does(family, model_type, extra,
                                                                                  checkpoint_tokenizers,  # noqa: F811
                                                                                  test_sentences, tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_srcfeat.commands.export_ct2 import main as export_main
    from hf_srcfeat.commands.translate import main as translate_main

    checkpoint = tiny_checkpoint(family, checkpoint_tokenizers[family], tmp_path / "checkpoint")
    train.main(["--init_from", str(checkpoint), "--model_type", model_type, *extra, "--output_dir",
                str(tmp_path / "run"), "--max_steps", "3", *RUN])
    assert export_main([str(tmp_path / "run"), str(tmp_path / "ct2")]) == 0
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in test_sentences[:6]), encoding="utf-8")
    outputs = {}
    for backend, model in (("transformers", tmp_path / "run"), ("ctranslate2", tmp_path / "ct2")):
        assert translate_main(["--model", str(model), "--backend", backend, "--input", str(source), "--output",
                               str(tmp_path / f"{backend}.de"), "--num_beams", "1", "--max_new_tokens", "10",
                               "--quiet", "--device", "cpu"]) == 0
        outputs[backend] = (tmp_path / f"{backend}.de").read_text(encoding="utf-8").splitlines()
    assert outputs["ctranslate2"] == outputs["transformers"] and len(outputs["transformers"]) == 6


@pytest.mark.slow
def test_torchrun_grafts_and_trains_one_shared_model_with_token_batches(marian_checkpoint, multi30k_dir, tmp_path):
    import json
    import os
    import subprocess
    import sys

    from .helpers import REPO

    output_dir = tmp_path / "ddp"
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_SRCFEAT_MULTI30K_DIR": str(multi30k_dir)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29535",
               "-m", "hf_srcfeat.commands.train", "--init_from", str(marian_checkpoint), "--model_type", "deps_san",
               "--output_dir", str(output_dir), "--max_steps", "4", "--max_tokens_per_batch", "400",
               "--ddp_backend", "gloo",
               *[argument for argument in RUN if argument not in ("--predict_with_generate", "--do_predict")]]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    fingerprints = [json.loads((output_dir / f"parameters_rank{rank}.json").read_text())["fingerprint"]
                    for rank in (0, 1)]
    assert fingerprints[0] == fingerprints[1]
    assert json.loads((output_dir / "results.json").read_text())["config"]["converted_from"] == "marian"


@pytest.mark.slow
def test_the_score_command_scores_given_targets_with_a_grafted_model(grafted_run, multi30k_dir, tmp_path):
    from hf_srcfeat.commands.score import main as score_main
    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.metrics.forced_decoding import score_targets

    folder, _ = grafted_run
    pairs = load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=4)
    (tmp_path / "src.en").write_text("".join(line + "\n" for line in pairs["source"]), encoding="utf-8")
    (tmp_path / "tgt.de").write_text("".join(line + "\n" for line in pairs["target"]), encoding="utf-8")
    assert score_main(["--model", str(folder), "--source", str(tmp_path / "src.en"), "--target",
                       str(tmp_path / "tgt.de"), "--output", str(tmp_path / "scores.tsv"), "--device", "cpu"]) == 0
    lines = (tmp_path / "scores.tsv").read_text().splitlines()
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    expected = score_targets(model, PretrainedSourceFeatureTokenizer.from_pretrained(folder), list(pairs["source"]),
                             list(pairs["target"]))
    assert len(lines) == 4
    assert [float(line.split("\t")[0]) for line in lines] == pytest.approx([s.total for s in expected], abs=1e-3)


@pytest.mark.slow
def test_a_grafted_run_publishes_and_loads_through_remote_code_alone(grafted_run, test_sentences, tmp_path):
    """The repository folder ships the wrapped tokenizer's code; a fresh interpreter without hf_srcfeat loads model
    and tokenizer with trust_remote_code=True and translates as the run does."""
    import json
    import subprocess
    import sys

    from hf_srcfeat.commands import publish

    from .test_hub_publishing import REMOTE_CODE_LOADER

    folder, _ = grafted_run
    repository = publish.main([str(folder), "--repo_id", "test/opus-mt-tiny-deps-san", "--output",
                               str(tmp_path / "repository"), "--dry-run"])
    assert (repository / "checkpoint_tokenizer" / "source.spm").exists()
    assert (repository / "tokenization_pretrained_source_features.py").exists()
    card = (repository / "README.md").read_text()
    assert "Started from a pretrained marian checkpoint" in card
    assert "AutoTokenizer.from_pretrained(" in card and ", trust_remote_code=True)" in card.split(
        "AutoTokenizer.from_pretrained(", 1)[1].split("\n", 1)[0], "the card's tokenizer line loads the wrapped class"
    sentences = test_sentences[:2]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = PretrainedSourceFeatureTokenizer.from_pretrained(folder)
    with torch.no_grad():
        expected = model.generate(**tokenizer(sentences, padding=True, return_tensors="pt"), num_beams=4,
                                  min_new_tokens=8, max_new_tokens=8).tolist()
    completed = subprocess.run([sys.executable, "-c", REMOTE_CODE_LOADER],
                               input=json.dumps([{"deps_san": str(repository)}, sentences]), capture_output=True,
                               text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == {"deps_san": expected}


@pytest.mark.slow
def test_the_grafting_experiment_pretrains_a_marian_stand_in_checks_its_conversion_and_runs_the_arms(
        multi30k_dir, tmp_path):
    """benchmarks/pretrained_grafts.py at a smoke-test size: the stand-in is a real MarianMTModel with a real
    MarianTokenizer, its conversion translates exactly as it does, and each arm writes a result naming its set-up."""
    import json

    from benchmarks import pretrained_grafts

    folders = ["--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results")]
    tiny = json.dumps({"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 64,
                       "decoder_ffn_dim": 64, "encoder_attention_heads": 2, "decoder_attention_heads": 2})
    pretrained_grafts.main(["pretrain", *folders, "--size", tiny, "--pretrain_max_steps", "12", "--eval_steps", "6",
                            "--max_train_samples", "200", "--max_eval_samples", "16", "--max_test_samples", "12",
                            "--vocab_size", "400"])
    pretrained = json.loads((tmp_path / "results" / "pretrained.json").read_text())
    assert pretrained["conversion_check"] == {"sentences": 12, "identical_beam4_translations": 12}
    assert 0 <= pretrained["test_scores"]["bleu"] <= 100 and pretrained["test_scores"]["sentences"] == 12
    assert pretrained["marian_config"]["model_type"] == "marian" and pretrained["vocab_size"] <= 402
    (tmp_path / "runs" / "marian_multi30k" / "model.safetensors").unlink()  # as if stopped before the end
    pretrained_grafts.main(["adopt", *folders, "--max_test_samples", "12", "--pretrain_max_steps", "12"])
    adopted = json.loads((tmp_path / "results" / "pretrained.json").read_text())
    assert adopted["stopped_by_hand"].startswith("at step 12 of at most 12")
    assert adopted["conversion_check"] == {"sentences": 12, "identical_beam4_translations": 12}
    budget = json.dumps({"max_steps": 2, "max_train_samples": 32, "max_predict_samples": 6,
                         "per_device_train_batch_size": 16, "generation_max_length": 8})
    pretrained_grafts.main(["run", *folders, "--seeds", "1", "--arms", "continued", "deps_san_frozen",
                            "--overrides", budget, "--blind_dir", ""])
    frozen = json.loads((tmp_path / "results" / "deps_san_frozen_seed1.json").read_text())
    assert frozen["freeze_pretrained"] and frozen["model_type"] == "deps_san" and frozen["code_version"]
    assert "test_bleu" in frozen["test_metrics"] and "p_value" in frozen["significance_vs_continued"]
    kept = (tmp_path / "results" / "predictions" / "deps_san_frozen_seed1.test_2016_flickr.de").read_text()
    assert len(kept.splitlines()) == 6  # significance can be computed again without the run folders
    pretrained_grafts.main(["report", *folders, "--docs_page", "", "--readme", ""])
    table = (tmp_path / "results" / "README.md").read_text()
    assert "| continued | `srcfeat_transformer` | all parameters |" in table
    assert "| the stand-in, not fine-tuned | `marian` | – |" in table
    assert "| deps_san_frozen | `deps_san` | added parameters only |" in table
    assert list(frozen["graft_gates"]) == ["model.encoder.deps_san_gates.values"]  # how far the graft opened
    assert "The gates that mix each grafted part in" in table
    earlier = tmp_path / "results" / "earlier_stand_in"  # runs from another stand-in are reported apart
    earlier.mkdir()
    for name in ("pretrained.json", "continued_seed1.json", "deps_san_frozen_seed1.json"):
        (earlier / name).write_text((tmp_path / "results" / name).read_text())
    pretrained_grafts.main(["report", *folders, "--docs_page", "", "--readme", ""])
    page = (tmp_path / "results" / "README.md").read_text()
    assert "## Runs from a first stand-in" in page and page.count("| deps_san_frozen | `deps_san` |") == 2
    assert "| continued |" in (earlier / "README.md").read_text()


def test_overwrite_output_dir_removes_a_wrapped_tokenizer_so_a_new_start_builds_its_own(tmp_path):
    """Left behind, the earlier run's settings would make the new --init_from run reuse its tokenizer."""
    from hf_srcfeat.tokenization_pretrained_source_features import BASE_FOLDER, SETTINGS_FILE

    run = tmp_path / "run"
    (run / BASE_FOLDER).mkdir(parents=True)
    (run / BASE_FOLDER / "vocab.json").write_text("{}")
    for name in (SETTINGS_FILE, "feature_vocab.json", "notes.txt"):
        (run / name).write_text("{}")
    removed = train.clear_previous_run(run)
    assert {SETTINGS_FILE, BASE_FOLDER, "feature_vocab.json"} <= set(removed)
    assert sorted(path.name for path in run.iterdir()) == ["notes.txt"]
