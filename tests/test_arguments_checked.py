"""Arguments are checked when they are given, with a message naming them: devices, model locations, the
pipeline's counts; and a reader that goes away (`| head -1`) ends the translate command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .helpers import REPO


@pytest.mark.parametrize(("arguments", "message"), [
    (["--device", "tpu"], "--device must be cpu, cuda, cuda:N or auto, got 'tpu'"),
    (["--model", "/no/such/model"], "--model: no model folder or Hub id '/no/such/model'"),
    (["--model", "./typo_folder"], "--model: no model folder or Hub id './typo_folder'"),
])
def test_the_translate_command_names_a_bad_device_or_model_location(arguments, message, model_folder, tmp_path,
                                                                    capsys):
    from hf_srcfeat.commands.translate import main

    source = tmp_path / "input.en"
    source.write_text("A dog runs.\n")
    options = {"--model": str(model_folder), "--input": str(source), "--output": str(tmp_path / "out.de"),
               "--quiet": None, **dict(zip(arguments[::2], arguments[1::2], strict=True))}
    argv = [item for name, value in options.items() for item in ([name] if value is None else [name, value])]
    with pytest.raises(SystemExit, match=message.replace("(", r"\(")):
        main(argv)
    assert not (tmp_path / "out.de").exists()


def test_a_fifo_or_process_substitution_is_read_and_a_directory_named(model_folder, tmp_path, capsys):
    from hf_srcfeat.commands.translate import main

    command = (f"{sys.executable} -m hf_srcfeat.commands.translate --model {model_folder} "
               f"-i <(printf 'A dog runs.\\nA cat sleeps.\\n') -o {tmp_path / 'out.de'} --num_beams 1 --quiet "
               "--device cpu")
    subprocess.run(["bash", "-c", command], check=True, cwd=REPO, timeout=600)
    assert len((tmp_path / "out.de").read_text(encoding="utf-8").splitlines()) == 2
    with pytest.raises(SystemExit, match=f"--input {tmp_path} is a directory"):
        main(["--model", str(model_folder), "--input", str(tmp_path), "--quiet", "--device", "cpu"])


def test_a_device_may_be_both_input_and_output(model_folder):
    from hf_srcfeat.commands.translate import main

    assert main(["--model", str(model_folder), "--input", "/dev/null", "--output", "/dev/null", "--quiet",
                 "--device", "cpu"]) == 0


@pytest.mark.parametrize("options", [{"num_beams": 0}, {"max_new_tokens": -1}, {"batch_size": 0},
                                     {"num_return_sequences": 0}])
def test_the_pipeline_refuses_counts_below_one_naming_them(options, model_folder):
    import hf_srcfeat

    translator = hf_srcfeat.pipeline("translation", model=str(model_folder))
    with pytest.raises(ValueError, match=f"`{next(iter(options))}` must be an integer of at least 1"):
        translator(["A dog runs."], **options)
    with pytest.raises(ValueError, match="`num_beams` must be an integer of at least 1"):
        hf_srcfeat.pipeline("translation", model=str(model_folder), num_beams=0)


@pytest.mark.slow
def test_a_closed_pipe_ends_the_translate_command_quietly(model_folder, test_sentences, tmp_path):
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in test_sentences * 5), encoding="utf-8")
    command = (f"{sys.executable} -m hf_srcfeat.commands.translate --model {model_folder} -i {source} "
               "--batch_size 1 --buffer_size 1 --num_beams 1 --quiet --device cpu | head -1; "
               "echo status=${PIPESTATUS[0]}")
    completed = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=REPO, timeout=600)
    lines = completed.stdout.splitlines()
    assert len(lines) == 2 and lines[-1] == "status=0"
    assert "Traceback" not in completed.stderr and "BrokenPipeError" not in completed.stderr


# --- Every reader names the file and line ------------------------------------------------------------------------


def test_annotate_refuses_a_carriage_return_inside_a_line_naming_it(tmp_path, capsys):
    from hf_srcfeat.commands import annotate

    source = tmp_path / "input.en"
    source.write_bytes(b"A dog runs.\nA cat\rsleeps.\n")
    with pytest.raises(SystemExit, match=r"input.en line 2 holds a carriage return"):
        annotate.main(["--input", str(source), "--output", str(tmp_path / "out.conllu")])
    assert not (tmp_path / "out.conllu").exists()


@pytest.mark.parametrize(("device", "message"), [
    ("tpu", "--device must be cpu, cuda, cuda:N or auto, got 'tpu'"),
    pytest.param("cuda", "--device cuda: this machine has no CUDA device", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="this machine has a CUDA device")),
])
def test_annotate_names_a_device_it_cannot_parse_on_instead_of_parsing_elsewhere(device, message, tmp_path):
    from hf_srcfeat.commands import annotate

    source = tmp_path / "input.en"
    source.write_text("A dog runs.\n")
    with pytest.raises(SystemExit, match=message):
        annotate.main(["--input", str(source), "--output", str(tmp_path / "out.conllu"), "--device", device])
    assert not (tmp_path / "out.conllu").exists()


def test_the_training_command_names_an_annotation_device_it_cannot_parse_on(tmp_path):
    from hf_srcfeat.commands import train

    corpus = tmp_path / "train.tsv"
    corpus.write_text("A dog runs.\tEin Hund rennt.\nTwo men talk.\tZwei Männer reden.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--annotation_device must be cpu, cuda, cuda:N or auto, got 'tpu'"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--train_file", str(corpus),
                    "--max_steps", "1", "--annotation_device", "tpu"])


def test_a_truncated_gzip_corpus_is_named(tmp_path):
    import gzip

    from hf_srcfeat.data.corpora import load_file

    for side, text in (("en", "A dog runs.\n" * 2000), ("de", "Ein Hund rennt.\n" * 2000)):
        data = gzip.compress(text.encode())
        (tmp_path / f"corpus.{side}.gz").write_bytes(data[:len(data) // 2] if side == "de" else data)
    with pytest.raises(ValueError, match=r"corpus.de.gz is a truncated or damaged gzip file"):
        load_file(str(tmp_path / "corpus"), "en", "de")


def test_a_byte_order_mark_is_not_part_of_the_first_source(tmp_path):
    from hf_srcfeat.data.corpora import load_file

    (tmp_path / "pair.en").write_bytes("\ufeffA dog runs.\nA cat sleeps.\n".encode())
    (tmp_path / "pair.de").write_text("Ein Hund rennt.\nEine Katze schläft.\n", encoding="utf-8")
    corpus = load_file(str(tmp_path / "pair"), "en", "de")
    assert corpus.data[0]["source"] == "A dog runs." and corpus.data[1]["target"] == "Eine Katze schläft."


# --- Waits and removals say what they do ------------------------------------------------------------------------


def test_a_sharded_annotate_run_says_which_shards_it_waits_for_and_gives_up_naming_them(tmp_path, capsys):
    from hf_srcfeat.commands.annotate import DEFAULT_MERGE_TIMEOUT, merge_shards, shard_comment, shard_path

    output = str(tmp_path / "train.en.conllu")
    Path(shard_path(output, 0, 2)).write_text(shard_comment("stanza-en", ["A dog runs."]) + "\n")
    with pytest.raises(SystemExit, match=r"shards \[.*shard-1-of-2.*\] did not appear within 0 s"):
        merge_shards(output, 2, timeout=0.2, lines=["A dog runs.", "Two cats sleep."], input_name="train.en",
                     annotator_identity="stanza-en")
    assert "waiting for 1 of 2 shards" in capsys.readouterr().err
    assert DEFAULT_MERGE_TIMEOUT <= 2 * 3600  # not a day of silence


def test_overwrite_output_dir_unlinks_symlinked_run_files_without_following_them(tmp_path):
    from hf_srcfeat.commands.train import clear_previous_run

    kept = tmp_path / "elsewhere"
    (kept / "checkpoint-9").mkdir(parents=True)
    (kept / "checkpoint-9" / "model.safetensors").write_text("someone else's")
    (kept / "results.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint-1").symlink_to(kept / "checkpoint-9")
    (run / "results.json").symlink_to(kept / "results.json")
    (run / "config.json").write_text("{}")
    removed = clear_previous_run(run)
    assert {"checkpoint-1", "results.json", "config.json"} <= set(removed)
    assert (kept / "checkpoint-9" / "model.safetensors").exists() and (kept / "results.json").exists()
    assert not any(run.iterdir())


def test_publishing_into_a_mirror_unlinks_symlinked_entries_without_following_them(tmp_path):
    import subprocess as git_process

    from hf_srcfeat.commands.publish import commit_to_mirror

    kept = tmp_path / "elsewhere"
    kept.mkdir()
    (kept / "weights.bin").write_text("someone else's")
    repository = tmp_path / "mirror" / "models" / "org" / "name"
    repository.mkdir(parents=True)
    git_process.run(["git", "init", "-q", "-b", "main"], cwd=repository, check=True)
    (repository / "old_folder").symlink_to(kept)
    (repository / "old_file").symlink_to(kept / "weights.bin")
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    commit_to_mirror(folder, tmp_path / "mirror", "org/name")
    assert (kept / "weights.bin").read_text() == "someone else's"
    assert not (repository / "old_folder").exists() and not (repository / "old_file").exists()
    assert (repository / "config.json").exists()


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--per_device_train_batch_size", "0", "--per_device_train_batch_size must be 1 or more, got 0"),
    ("--max_source_length", "1", "--max_source_length must be 2 or more, got 1"),
    ("--dropout", "1.5", "--dropout must be at least 0 and below 1, got 1.5"),
    ("--generation_num_beams", "0", "--generation_num_beams must be 1 or more, got 0"),
    ("--max_tokens_per_batch", "-5", "--max_tokens_per_batch must be 1 or more, got -5"),
    ("--batch_size_multiple", "0", "--batch_size_multiple must be 1 or more, got 0"),
    ("--max_tokens_per_batch", "100", "--max_tokens_per_batch 100 is below the longest example the truncation keeps "
                                      r"\(--max_source_length 128, --max_target_length 128\)"),
    ("--learning_rate", "nan", "--learning_rate must be 0 or more, got nan"),
    ("--top_p", "0.5", "top_p only acts when sampling: add do_sample"),
    ("--label_smoothing_factor", "0.1", "the models smooth their own loss; give --label_smoothing instead"),
    ("--no_repeat_ngram_size", "-2", "--no_repeat_ngram_size must be 0 \\(off\\) or more, got -2"),
    ("--early_stopping", "true", "--early_stopping stops beam search, and the run decodes with 1 beam"),
    ("--model_name_or_path", "/no/such/run", "--model_name_or_path: no model folder or Hub id '/no/such/run'"),
    ("--model_type", "composed", "--model_type 'composed' is not a model type; choose from srcfeat_transformer, .*"
                                 "srcfeat_composed"),
    ("--config_overrides", "{'sublayer_dropout': 0.1}", "--config_overrides is not valid JSON \\(Expecting property "
                                                       "name enclosed in double quotes at column 2\\)"),
    ("--config_overrides", "[0.1]", "--config_overrides must be a JSON object of config settings"),
    ("--config_overrides", '{"attention_dropuot": 0.1}', "--config_overrides 'attention_dropuot': srcfeat_transformer "
                                                          "has no such setting \\(did you mean 'attention_dropout'"),
])
def test_the_training_command_refuses_an_option_value_it_cannot_use_before_any_work(option, value, message, tmp_path):
    from hf_srcfeat.commands import train

    with pytest.raises(SystemExit, match=message):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--dataset_name", "multi30k",
                    "--max_steps", "1", option, value])
    assert not (tmp_path / "run").exists(), "refused before anything was written"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="bf16 training needs no GPU check there")
def test_a_training_argument_transformers_refuses_is_one_line_naming_the_recipe(tmp_path):
    from hf_srcfeat.commands import train

    recipe = REPO / "examples" / "recipes" / "paper" / "deps_san_wmt16_de_en.json"  # bf16, for a GPU
    with pytest.raises(SystemExit, match=f"^the training arguments \\(--config {recipe} or the flags\\): .*bf16"):
        train.main([str(recipe), "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def test_an_unknown_option_is_named_with_the_closest_ones_and_a_missing_parse_file_before_any_work(tmp_path):
    from hf_srcfeat.commands import train

    with pytest.raises(SystemExit, match=r"^unknown option\(s\) --max_stepz \(did you mean --max_steps\?\)"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--max_stepz", "20"])
    with pytest.raises(SystemExit, match=f"--train_source_conllu {tmp_path / 'trian.conllu'}: no such file"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--max_steps", "1", "--train_source_conllu",
                    str(tmp_path / "trian.conllu")])
    assert not (tmp_path / "run").exists()


def test_sources_in_a_language_without_parser_models_are_named_in_one_line(tmp_path):
    from hf_srcfeat.commands import train

    corpus = tmp_path / "train.tsv"
    corpus.write_text("Un chien court.\tA dog runs.\nDeux chats dorment.\tTwo cats sleep.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="the sources need parsing, but the stanza annotator cannot be made: No "
                                         "Stanza models for 'fr'"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--max_steps", "1", "--source_lang", "fr",
                    "--target_lang", "en", "--train_file", str(corpus), "--report_to", "none", "--use_cpu"])


def test_a_tokenizer_folder_that_is_not_there_is_named_before_any_parsing(tmp_path):
    from hf_srcfeat.commands import train

    missing = tmp_path / "runs" / "latent_feedback_dae"
    with pytest.raises(SystemExit, match=f"--tokenizer_name_or_path {missing}: no such folder, and it does not load "
                                         "as a Hub id"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--dataset_name", "multi30k",
                    "--max_steps", "1", "--tokenizer_name_or_path", str(missing)])
    assert not (tmp_path / "run").exists()


def test_averaging_checkpoints_refuses_a_count_below_two(tmp_path, capsys):
    from hf_srcfeat.commands.average_checkpoints import main

    (tmp_path / "checkpoint-1").mkdir()
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--last", "0", "--output", str(tmp_path / "averaged")])
    assert "--last must be an integer of at least 2 with a run folder, got 0" in capsys.readouterr().err


def test_evaluating_without_validation_data_is_refused_before_any_parsing(tmp_path):
    from hf_srcfeat.commands import train

    corpus = tmp_path / "train.tsv"
    corpus.write_text("A dog runs.\tEin Hund rennt.\nTwo men talk.\tZwei Männer reden.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--do_eval, --eval_strategy.* needs validation data: give --validation_file"):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--do_eval", "--train_file", str(corpus),
                    "--max_steps", "1", "--annotation_cache", str(tmp_path / "never_made.sqlite")])
    assert not (tmp_path / "never_made.sqlite").exists(), "refused before any parsing"
