"""Checkpoint averaging (`hf-srcfeat-average-checkpoints`): the mean of the weights of real checkpoints of one run,
a model folder that loads and translates, and refusals of what cannot be averaged."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_srcfeat import SrcFeatTransformerForConditionalGeneration, pipeline
from hf_srcfeat.commands.average_checkpoints import main
from hf_srcfeat.provenance import code_version

from .helpers import train_briefly


@pytest.fixture(scope="module")
def run_with_checkpoints(trained_baseline, feature_tokenizer, subword_tokenizer, train_pairs, tmp_path_factory):
    """A run folder with two checkpoints of one model, 20 training steps apart, and its tokenizer."""
    model, _ = trained_baseline
    run = tmp_path_factory.mktemp("run")
    later = copy.deepcopy(model).train()
    torch.manual_seed(1)
    train_briefly(later, subword_tokenizer, train_pairs, steps=20)
    model.save_pretrained(run / "checkpoint-250")
    later.eval().save_pretrained(run / "checkpoint-270")
    feature_tokenizer.save_pretrained(run)
    return run


def test_averaging_two_checkpoints_gives_the_mean_of_their_weights(run_with_checkpoints, tmp_path):
    assert main([str(run_with_checkpoints), "--last", "2", "--output", str(tmp_path / "averaged")]) == 0
    first = load_file(run_with_checkpoints / "checkpoint-250" / "model.safetensors")
    second = load_file(run_with_checkpoints / "checkpoint-270" / "model.safetensors")
    averaged = load_file(tmp_path / "averaged" / "model.safetensors")
    assert set(averaged) == set(first)
    assert any(not torch.equal(first[key], second[key]) for key in first), "the checkpoints differ"
    for key, tensor in averaged.items():
        expected = ((first[key].double() + second[key].double()) / 2).to(first[key].dtype)
        assert tensor.dtype == first[key].dtype and torch.equal(tensor, expected), key
    record = json.loads((tmp_path / "averaged" / "averaged_from.json").read_text())
    assert [path.split("/")[-1] for path in record["checkpoints"]] == ["checkpoint-250", "checkpoint-270"]
    assert record["code_version"] == code_version(), "the record says which code averaged"


def test_the_averaged_model_loads_and_translates(run_with_checkpoints, test_sentences, tmp_path):
    main(["--checkpoints", str(run_with_checkpoints / "checkpoint-250"), str(run_with_checkpoints / "checkpoint-270"),
          "--output", str(tmp_path / "averaged")])
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "averaged").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "averaged")
    assert isinstance(model, SrcFeatTransformerForConditionalGeneration)
    translations = pipeline("translation", model=model, tokenizer=tokenizer)(test_sentences[:3], max_new_tokens=16)
    assert len(translations) == 3 and all(item["translation_text"].strip() for item in translations)


def test_the_newest_checkpoint_gives_the_configuration_whatever_the_order_and_the_record_is_absolute(
        run_with_checkpoints, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(run_with_checkpoints, run)
    for step in (250, 270):  # what each checkpoint's own files say, to tell them apart in the output
        (run / f"checkpoint-{step}" / "training_time.json").write_text(json.dumps({"step": step}))
        settings = json.loads((run / f"checkpoint-{step}" / "generation_config.json").read_text())
        (run / f"checkpoint-{step}" / "generation_config.json").write_text(json.dumps({**settings, "max_length": step}))
    monkeypatch.chdir(tmp_path)
    assert main(["--checkpoints", "run/checkpoint-270", "run/checkpoint-250", "--output", "averaged"]) == 0
    assert json.loads((tmp_path / "averaged" / "training_time.json").read_text()) == {"step": 270}
    assert json.loads((tmp_path / "averaged" / "generation_config.json").read_text())["max_length"] == 270
    assert json.loads((tmp_path / "averaged" / "averaged_from.json").read_text())["checkpoints"] == [
        str(run.resolve() / "checkpoint-250"), str(run.resolve() / "checkpoint-270")]


def test_a_checkpoint_given_twice_or_checkpoints_with_last_are_refused(run_with_checkpoints, tmp_path, capsys):
    checkpoint = run_with_checkpoints / "checkpoint-250"
    again = run_with_checkpoints / ".." / run_with_checkpoints.name / "checkpoint-250"  # the same folder, spelled apart
    with pytest.raises(SystemExit, match=f"checkpoint {again} is given twice \\(as {checkpoint} too\\)"):
        main(["--checkpoints", str(checkpoint), str(run_with_checkpoints / "checkpoint-270"), str(again),
              "--output", str(tmp_path / "out")])
    with pytest.raises(SystemExit):
        main(["--checkpoints", str(checkpoint), str(run_with_checkpoints / "checkpoint-270"), "--last", "5",
              "--output", str(tmp_path / "out")])
    assert "give a run folder (with --last N) or --checkpoints, not both" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_checkpoints_of_different_shapes_or_model_types_are_refused(run_with_checkpoints, tiny_config, tmp_path):
    other = SrcFeatTransformerForConditionalGeneration(tiny_config(d_model=16, encoder_attention_heads=2,
                                                                   decoder_attention_heads=2))
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(SystemExit, match="has shape"):
        main(["--checkpoints", str(run_with_checkpoints / "checkpoint-250"), str(tmp_path / "other"),
              "--output", str(tmp_path / "out")])
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    (tmp_path / "other" / "config.json").write_text(json.dumps({**config, "model_type": "deps_san"}))
    with pytest.raises(SystemExit, match="different model types"):
        main(["--checkpoints", str(run_with_checkpoints / "checkpoint-250"), str(tmp_path / "other"),
              "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists(), "nothing is written before the checks pass"


def test_checkpoints_trained_with_different_tokenizers_are_refused(run_with_checkpoints, tmp_path):
    """Weights of one shape over another vocabulary would average, without an error, into nonsense."""
    foreign = tmp_path / "foreign"
    shutil.copytree(run_with_checkpoints / "checkpoint-270", foreign)
    config = json.loads((foreign / "config.json").read_text())
    (foreign / "config.json").write_text(json.dumps({**config, "tokenizer_fingerprint": "0123456789abcdef"}))
    with pytest.raises(SystemExit, match="the checkpoints were trained with different tokenizers"):
        main(["--checkpoints", str(run_with_checkpoints / "checkpoint-250"), str(foreign), "--output",
              str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_pickled_weights_a_filled_output_and_too_few_checkpoints_are_refused(run_with_checkpoints, tmp_path):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((run_with_checkpoints / "checkpoint-250" / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(SystemExit, match="no model.safetensors .*pytorch_model.bin: pickled weights are not read"):
        main(["--checkpoints", str(run_with_checkpoints / "checkpoint-250"), str(pickled), "--output",
              str(tmp_path / "out")])
    filled = tmp_path / "filled"
    filled.mkdir()
    (filled / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not an empty folder"):
        main([str(run_with_checkpoints), "--last", "2", "--output", str(filled)])
    assert (filled / "keep.txt").read_text() == "mine"
    with pytest.raises(SystemExit):
        main([str(run_with_checkpoints), "--last", "3", "--output", str(tmp_path / "out")])


@pytest.mark.slow
def test_training_with_averaging_saves_and_tests_the_mean_of_its_last_checkpoints(multi30k_dir, tmp_path, caplog):
    from hf_srcfeat.commands import train

    output_dir = tmp_path / "run"
    tiny = ["--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "4",
            "--ffn_dim", "64", "--vocab_size", "1000", "--report_to", "none", "--use_cpu", "--seed", "3",
            "--disable_tqdm", "true", "--data_dir", str(multi30k_dir), "--max_train_samples", "200",
            "--per_device_train_batch_size", "16", "--learning_rate", "3e-3"]
    with caplog.at_level("INFO", logger="hf_srcfeat"):
        results = train.main(tiny + ["--output_dir", str(output_dir), "--do_train", "--max_steps", "4",
                                     "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "3",
                                     "--average_last_checkpoints", "3", "--do_eval", "--max_eval_samples", "8"])
    assert results["averaged_checkpoints"] == ["checkpoint-2", "checkpoint-3", "checkpoint-4"]
    assert "the average of checkpoint-2, checkpoint-3, checkpoint-4, validation:" in caplog.text, \
        "the final evaluation names the averaged model, not a step"
    states = [load_file(output_dir / name / "model.safetensors") for name in results["averaged_checkpoints"]]
    final = load_file(output_dir / "model.safetensors")
    for key, tensor in final.items():
        expected = (sum(state[key].double() for state in states) / 3).to(tensor.dtype)
        assert torch.equal(tensor, expected), key
    with pytest.raises(SystemExit, match="needs --save_total_limit >= 3"):
        train.main(tiny + ["--output_dir", str(tmp_path / "other"), "--do_train", "--max_steps", "4",
                           "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "2",
                           "--average_last_checkpoints", "3"])
    # Too few checkpoints for the count: refused before any work, not after training
    with pytest.raises(SystemExit, match=r"--max_steps 4 with --save_steps 2 saves 2 checkpoint\(s\)"):
        train.main(tiny + ["--output_dir", str(tmp_path / "short"), "--do_train", "--max_steps", "4",
                           "--save_strategy", "steps", "--save_steps", "2", "--average_last_checkpoints", "3"])
    assert not (tmp_path / "short").exists()
    with pytest.raises(SystemExit, match=r"--max_steps 2 with --save_steps 1 saves 2 checkpoint\(s\)"):  # 1.0 to HF
        train.main(tiny + ["--output_dir", str(tmp_path / "short"), "--do_train", "--max_steps", "2",
                           "--save_strategy", "steps", "--save_steps", "1", "--average_last_checkpoints", "3"])
    assert not (tmp_path / "short").exists()
    # The best checkpoint kept by rotation is no "last" one, and the averaged model no best one: refused together
    with pytest.raises(SystemExit, match="averages the last checkpoints, --load_best_model_at_end keeps the best one"):
        train.main(tiny + ["--output_dir", str(tmp_path / "best"), "--do_train", "--max_steps", "4",
                           "--save_strategy", "steps", "--save_steps", "1", "--average_last_checkpoints", "3",
                           "--eval_strategy", "steps", "--eval_steps", "1", "--load_best_model_at_end", "true"])
    for metric, message in (("bleu", "is computed on translations: it needs --predict_with_generate"),
                            ("eval_bleu4", "the evaluations measure loss, bleu, bleu_lowercase, chrf")):
        with pytest.raises(SystemExit, match=message):
            train.main(tiny + ["--output_dir", str(tmp_path / "best"), "--do_train", "--do_eval", "--max_steps", "4",
                               "--eval_strategy", "steps", "--save_strategy", "steps", "--load_best_model_at_end",
                               "true", "--metric_for_best_model", metric])
    assert not (tmp_path / "best").exists()
