"""benchmarks/benchmark.py on a tiny set-up: result files with everything the report needs, significance against
the baseline of the same seed, finished runs never redone, interrupted runs resumed from their checkpoint."""

from __future__ import annotations

import gzip
import json
import os
import string
from pathlib import Path

import pytest

from benchmarks import benchmark
from hf_srcfeat.data.multi30k import BLIND_SPLITS

from .conftest import BLIND_SOURCE_LINES

TINY = {"d_model": 32, "ffn_dim": 64, "attention_heads": 4, "encoder_layers": 1, "decoder_layers": 1,
        "max_steps": 12, "save_steps": 6, "eval_steps": 6, "logging_steps": 3, "warmup_steps": 2,
        "per_device_train_batch_size": 16, "per_device_eval_batch_size": 16, "max_train_samples": 200,
        "max_eval_samples": 20, "max_predict_samples": 20, "generation_max_length": 20}


@pytest.fixture(scope="module")
def blind_dir() -> Path:
    """The slices of the blind sources that conftest.py points $HF_SRCFEAT_MULTI30K_BLIND_DIR at."""
    return Path(os.environ["HF_SRCFEAT_MULTI30K_BLIND_DIR"])


@pytest.fixture(scope="module")
def tiny_benchmark(feature_tokenizer, tmp_path_factory, multi30k_dir, blind_dir):
    folder = tmp_path_factory.mktemp("benchmark")
    feature_tokenizer.save_pretrained(folder / "tokenizer")

    def run(systems: list[str], command: str = "run", **overrides) -> None:
        benchmark.main([command, "--systems", *systems, "--seeds", "1", "--runs_dir", str(folder / "runs"),
                        "--results_dir", str(folder / "results"), "--tokenizer", str(folder / "tokenizer"),
                        "--max_test_samples", "20", "--blind_dir", str(blind_dir),
                        "--shared_overrides", json.dumps({**TINY, **overrides})])

    run(["baseline", "relevance_self", "lfe_dae"])
    return folder, run


@pytest.mark.slow
def test_every_run_writes_a_complete_result_file(tiny_benchmark):
    folder, _ = tiny_benchmark
    result = json.loads((folder / "results" / "relevance_self_seed1.json").read_text())
    assert result["system"] == "relevance_self" and result["seed"] == 1
    assert result["config"]["relevance_combine"] == "self_relevance" and result["code_version"]
    assert any(path.endswith("test_2016_flickr.de.gz") for path in result["data_files"])
    assert len(set(result["data_files"])) == len(result["data_files"]), "each file once"
    for key in ("train_seconds", "train_target_tokens_per_second", "decode_beam4_sentences_per_second",
                "decode_greedy_sentences_per_second", "num_parameters"):
        assert result[key] > 0, key
    assert [point["step"] for point in result["validation_loss_curve"]] == [6, 12]
    test = result["test"]
    assert test["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert {"bleu", "bleu_lowercase", "chrf", "chrf_signature", "bleu_lowercase_moses_tokenized"} <= set(test)
    assert result["test_sentences"] == 20
    significance = test["significance_vs_baseline"]
    assert 0 <= significance["p_value"] <= 1 and significance["samples"] == 1000
    baseline = json.loads((folder / "results" / "baseline_seed1.json").read_text())
    assert "significance_vs_baseline" not in baseline["test"]


@pytest.mark.slow
def test_every_finished_run_translates_the_blind_sets_as_it_decodes_the_test_set(tiny_benchmark, blind_dir):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder, run = tiny_benchmark
    run_folder = folder / "runs" / "relevance_self" / "seed1"
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(run_folder), AutoTokenizer.from_pretrained(run_folder)
    for split in BLIND_SPLITS:
        with gzip.open(blind_dir / f"{split}.en.gz", "rt", encoding="utf-8") as handle:
            sources = handle.read().splitlines()
        assert len(sources) == BLIND_SOURCE_LINES
        output = folder / "results" / "blind" / f"relevance_self_seed1.{split}.de"
        expected, _ = benchmark.translate(model, tokenizer, sources, num_beams=benchmark.TEST_NUM_BEAMS)
        assert output.read_text(encoding="utf-8").splitlines() == expected
    (folder / "results" / "blind" / "baseline_seed1.test_2017_mscoco.de").unlink()
    run(["baseline"], command="blind")
    assert (folder / "results" / "blind" / "baseline_seed1.test_2017_mscoco.de").exists(), "written again"


@pytest.mark.slow
def test_a_rerun_translates_the_blind_sets_a_finished_run_lacks(tiny_benchmark, capsys):
    folder, run = tiny_benchmark
    missing = folder / "results" / "blind" / "relevance_self_seed1.test_2018_flickr.de"
    missing.unlink()  # stands for a run cut after its result was written
    benchmark.main(["status", "--systems", "relevance_self", "--seeds", "1", "--runs_dir", str(folder / "runs"),
                    "--results_dir", str(folder / "results")])
    assert "blind translations are missing (test_2018_flickr)" in capsys.readouterr().out
    run(["relevance_self"])
    assert len(missing.read_text(encoding="utf-8").splitlines()) == BLIND_SOURCE_LINES


@pytest.mark.slow
def test_the_blind_command_names_finished_runs_whose_model_is_gone(tiny_benchmark, tmp_path):
    folder, _ = tiny_benchmark
    results = tmp_path / "results"
    results.mkdir()
    (results / "baseline_seed1.json").write_text((folder / "results" / "baseline_seed1.json").read_text())
    with pytest.raises(SystemExit, match=r"baseline seed 1: no trained model in .*gone"):
        benchmark.main(["blind", "--systems", "baseline", "--seeds", "1", "--runs_dir", str(tmp_path / "gone"),
                        "--results_dir", str(results)])


@pytest.mark.slow
def test_the_pretrained_lfe_system_trains_its_autoencoder_first(tiny_benchmark):
    folder, _ = tiny_benchmark
    result = json.loads((folder / "results" / "lfe_dae_seed1.json").read_text())
    autoencoder = folder / "runs" / "dae" / "seed1"
    assert result["config"]["lfe_pretrained_from"] == str(autoencoder)
    assert (autoencoder / "dae_results.json").exists() and (autoencoder / "model.safetensors").exists()
    pretraining = json.loads((autoencoder / "dae_results.json").read_text())
    assert result["pretraining"]["train_seconds"] == pretraining["train_seconds"] > 0, "its cost is on record"
    assert result["pretraining"]["reconstruction"] == pretraining["reconstruction"]


@pytest.mark.slow
def test_finished_runs_are_not_redone(tiny_benchmark):
    folder, run = tiny_benchmark
    path = folder / "results" / "baseline_seed1.json"
    before = path.stat().st_mtime_ns
    run(["baseline"])
    assert path.stat().st_mtime_ns == before


@pytest.mark.slow
def test_an_interrupted_run_continues_from_its_last_checkpoint(tiny_benchmark):
    folder, run = tiny_benchmark
    run(["fusing_diverse"], max_steps=6)  # stands for a run stopped after its checkpoint at step 6
    (folder / "results" / "fusing_diverse_seed1.json").unlink()
    run(["fusing_diverse"])
    result = json.loads((folder / "results" / "fusing_diverse_seed1.json").read_text())
    assert result["resumed_from_step"] == 6
    assert [point["step"] for point in result["validation_loss_curve"]] == [6, 12]



@pytest.mark.slow
def test_a_longer_budget_continues_the_shorter_run_and_equals_training_it_from_the_start(tiny_benchmark):
    folder, _ = tiny_benchmark

    def run_18_steps(name: str, *extra: str) -> dict:
        benchmark.main(["run", "--systems", "baseline", "--seeds", "1", "--runs_dir", str(folder / name),
                        "--results_dir", str(folder / f"{name}_results"), "--tokenizer", str(folder / "tokenizer"),
                        "--max_test_samples", "20", "--shared_overrides", json.dumps({**TINY, "max_steps": 18}),
                        *extra])
        return json.loads((folder / f"{name}_results" / "baseline_seed1.json").read_text())

    continued = run_18_steps("continued", "--continue_from", str(folder / "runs"))
    assert continued["resumed_from_step"] == 12
    assert continued["continued_from"] == str(folder / "runs" / "baseline" / "seed1" / "checkpoint-12")
    from_scratch = run_18_steps("from_scratch")
    assert continued["validation_loss_curve"] == from_scratch["validation_loss_curve"]
    assert [point["step"] for point in continued["validation_loss_curve"]] == [6, 12, 18]
    assert continued["test"]["bleu"] == from_scratch["test"]["bleu"]


@pytest.mark.slow
def test_continuing_a_run_trained_with_another_set_up_is_refused(tiny_benchmark):
    folder, _ = tiny_benchmark
    with pytest.raises(SystemExit, match="different set-up.*d_model.*tokenizer_name_or_path"):
        benchmark.main(["run", "--systems", "baseline", "--seeds", "1", "--runs_dir", str(folder / "wider"),
                        "--results_dir", str(folder / "wider_results"), "--tokenizer", str(folder / "runs"),
                        "--shared_overrides", json.dumps({**TINY, "max_steps": 18, "d_model": 64}),
                        "--continue_from", str(folder / "runs")])


def test_tokenized_bleu_compares_words_and_punctuation_the_way_published_multi30k_scores_do(multi30k_dir):
    from hf_srcfeat.data.multi30k import load_multi30k

    references = list(load_multi30k("test_2016_flickr", "en", "de", multi30k_dir)["target"])[:50]
    spaced = [reference.rstrip(".") + " ." if reference.endswith(".") else reference for reference in references]
    assert spaced != references
    shouted = [text.translate(str.maketrans(string.ascii_lowercase, string.ascii_uppercase)) for text in spaced]
    assert benchmark.moses_tokenized_lowercase_bleu(shouted, references) == 100.0
    assert benchmark.score(shouted, references)["bleu"] < 100.0, "cased BLEU sees the difference"


@pytest.mark.slow
def test_rescore_adds_a_new_metric_to_finished_runs_from_their_saved_translations(tiny_benchmark):
    folder, _ = tiny_benchmark
    path = folder / "results" / "baseline_seed1.json"
    finished = json.loads(path.read_text())
    expected = finished["test"].pop("bleu_lowercase_moses_tokenized")
    path.write_text(json.dumps(finished))  # a result file written before the metric existed
    arguments = ["--systems", "baseline", "--seeds", "1", "--runs_dir", str(folder / "runs"), "--results_dir",
                 str(folder / "results"), "--max_test_samples", "20"]
    benchmark.main(["rescore", *arguments])
    rescored = json.loads(path.read_text())
    assert rescored["test"]["bleu_lowercase_moses_tokenized"] == expected
    assert {key: rescored["test"][key] for key in finished["test"]} == finished["test"], "nothing else changes"
    assert list(rescored["metrics_added_later"]) == ["bleu_lowercase_moses_tokenized"]
    before = path.stat().st_mtime_ns
    benchmark.main(["rescore", *arguments])
    assert path.stat().st_mtime_ns == before, "a complete file is left alone"



@pytest.mark.slow
def test_significance_is_retested_against_a_retrained_baseline(tiny_benchmark, tmp_path):
    import shutil

    from hf_srcfeat.data.multi30k import load_multi30k

    folder, _ = tiny_benchmark
    for name in ("runs", "results"):
        shutil.copytree(folder / name, tmp_path / name)
    references = list(load_multi30k("test_2016_flickr", "en", "de")["target"])[:20]
    retrained = references[:10] + ["Ein Hund."] * 10  # stands for the translations of a retrained baseline
    (tmp_path / "runs" / "baseline" / "seed1" / "test_predictions.beam4.txt").write_text("\n".join(retrained) + "\n")
    arguments = ["--seeds", "1", "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results"),
                 "--max_test_samples", "20"]
    benchmark.main(["significance", *arguments])

    path = tmp_path / "results" / "relevance_self_seed1.json"
    result = json.loads(path.read_text())
    system = (tmp_path / "runs" / "relevance_self" / "seed1" / "test_predictions.beam4.txt").read_text().splitlines()
    assert result["test"]["significance_vs_baseline"] == benchmark.paired_bootstrap(retrained, system, references)
    assert result["significance_retested"]
    before = path.stat().st_mtime_ns
    benchmark.main(["significance", *arguments])
    assert path.stat().st_mtime_ns == before, "a test against the baseline in place is left alone"


@pytest.mark.slow
def test_the_report_tabulates_every_system_against_the_baseline_and_plots_the_curves(tiny_benchmark):
    from benchmarks import benchmark_report

    folder, _ = tiny_benchmark
    readme = folder / "README.md"
    readme.write_text(f"# Results\n{benchmark_report.README_START}\nold\n{benchmark_report.README_END}\nrest\n")
    text = benchmark_report.main(["--results_dir", str(folder / "results"), "--output", str(folder / "report.md"),
                                  "--update_readme", "--readme", str(readme), "--allow_other_setup",
                                  "--speed_results", str(folder / "no_speed_run.json"),
                                  "--longer_budget_dir", str(folder / "no_longer_runs")])
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert {"baseline", "relevance_self", "lfe_dae"} <= set(rows)
    baseline = json.loads((folder / "results" / "baseline_seed1.json").read_text())
    system = json.loads((folder / "results" / "relevance_self_seed1.json").read_text())
    assert f"{system['test']['bleu'] - baseline['test']['bleu']:+.2f}" in rows["relevance_self"]
    assert f"{system['test']['significance_vs_baseline']['p_value']:.3f}" in rows["relevance_self"]
    assert (folder / "report.png").read_bytes()[:4] == b"\x89PNG"
    verdicts = [line for line in text.splitlines() if line.startswith("- `relevance_self`")]
    assert len(verdicts) == 1 and "BLEU" in verdicts[0]
    assert f"our baseline scores {baseline['test']['bleu_lowercase_moses_tokenized']:.2f}" in text
    assert "Not finished yet" in text and "deps_san seed 1" in text and "relevance_self seed 1," not in text
    assert "Speed overheads: not measured yet" in text and "trained on" not in text
    assert rows["relevance_self"].endswith("| not measured | not measured | not measured |")
    assert "`lfe_dae` first pre-trains its latent feature encoder as a denoising autoencoder" in text
    extra = system["num_parameters"] / baseline["num_parameters"]
    assert f"`relevance_self` {extra:.2f}x: a source embedding of its own" in text
    updated = readme.read_text()
    assert "old" not in updated and updated.endswith("rest\n") and "| relevance_self |" in updated


@pytest.mark.slow
def test_the_report_compares_overheads_measured_in_one_interleaved_run_with_the_papers(tiny_benchmark, tmp_path):
    from benchmarks import benchmark_report, benchmark_speed

    folder, _ = tiny_benchmark
    speed_file = tmp_path / "speed.json"
    benchmark_speed.main(["--benchmark_systems", "--tokenizer", str(folder / "tokenizer"), "--d_model", "32",
                          "--ffn_dim", "64", "--layers", "1", "--batch_size", "4", "--batches", "1", "--rounds", "2",
                          "--steps_per_round", "1", "--decode_beams", "1", "4", "--decode_tokens", "2",
                          "--output", str(speed_file)])
    speed = json.loads(speed_file.read_text())
    assert set(speed["models"]) == {*benchmark.SYSTEMS, *benchmark.COMPOSED_SYSTEMS} - {"lfe_dae"}
    text = benchmark_report.main(["--results_dir", str(folder / "results"), "--output", str(folder / "report.md"),
                                  "--speed_results", str(speed_file)])
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    phrase = speed["models"]["phrase_max_attn_ta"]
    train_time = speed["models"]["baseline"]["target_tokens_per_second"] / phrase["target_tokens_per_second"]
    assert rows["phrase_max_attn_ta"].split(" | ")[1].startswith(f"{train_time:.2f}x")
    joint, baseline = speed["models"]["lfe_joint"], speed["models"]["baseline"]
    decode_rates = [f"decode_beam{beams}_sentences_per_second" for beams in (4, 1)]
    lfe_times = [baseline[rate] / joint[rate] for rate in ["target_tokens_per_second", *decode_rates]]
    [results_row] = [line for line in text.splitlines() if line.startswith("| lfe_dae | ")]
    assert results_row.endswith(" | ".join(f"{time:.2f}x" for time in lfe_times) + " |"), \
        "the results table takes its times from the interleaved speed run, lfe_dae's from lfe_joint's network"
    assert "1.75x train (Table 2)" in rows["phrase_max_attn_ta"]
    assert "(lfe_joint's network)" in text and "1.12x train" in rows["lfe_dae (lfe_joint's network)"]
    assert rows["relevance_concat+deps_san"].endswith("| not reported |")  # measured; no paper combines methods


@pytest.mark.parametrize(("p_values", "verdict"), [
    ((0.001, 0.02), "beats the baseline by +1.00 BLEU, significant (p < 0.05) in each of its 2 seeds"),
    ((0.003, 0.314), "differs from the baseline by +1.00 BLEU, significantly (p < 0.05) in only 1 of 2 seeds"),
    ((0.2, 0.314), "does not differ significantly from the baseline at this scale (+1.00 BLEU; p = 0.200, 0.314)"),
])
def test_a_method_is_called_better_only_when_it_is_significant_in_every_seed(p_values, verdict):
    from benchmarks import benchmark_report

    baseline = [{"seed": seed, "test": {"bleu": 30.0}} for seed in (1, 2)]
    method = [{"seed": seed, "test": {"bleu": 31.0, "significance_vs_baseline": {"p_value": p}}}
              for seed, p in zip((1, 2), p_values, strict=True)]
    [line] = benchmark_report.outcomes({"baseline": baseline, "method": method})
    assert line.startswith(f"- `method` {verdict}")


def test_a_composed_system_has_its_parts_settings_and_is_tested_against_each_part(tmp_path, capsys):
    from argparse import Namespace

    from hf_srcfeat.data.multi30k import load_multi30k

    model_type, settings = benchmark.COMPOSED_SYSTEMS["relevance_concat+deps_san"]
    assert model_type == "srcfeat_composed" and settings["components"] == ["relevance_features", "deps_san"]
    for part in benchmark.COMPOSED_PARTS["relevance_concat+deps_san"]:
        assert benchmark.SYSTEMS[part][1].items() <= settings.items()

    references = list(load_multi30k("test_2016_flickr", "en", "de")["target"])[:30]
    translations = {"baseline": ["Ein Hund."] * 30, "relevance_concat": references[:20] + ["Ein Hund."] * 10,
                    "relevance_concat+deps_san": references[:25] + ["Ein Hund."] * 5}
    for system, lines in translations.items():
        (tmp_path / system / "seed1").mkdir(parents=True)
        (tmp_path / system / "seed1" / "test_predictions.beam4.txt").write_text("\n".join(lines) + "\n")
    args = Namespace(runs_dir=tmp_path, shared_overrides={}, data_dir=None, max_test_samples=30)
    result = {"system": "relevance_concat+deps_san", "seed": 1, "test": {}}
    benchmark.add_significance(args, result)
    assert result["test"]["significance_vs_parts"] == {"relevance_concat": benchmark.paired_bootstrap(
        translations["relevance_concat"], translations["relevance_concat+deps_san"], references)}
    assert "not tested against ['deps_san'] (no run folder)" in capsys.readouterr().out


def test_the_report_gives_a_composed_systems_difference_to_each_part():
    from benchmarks import benchmark_report

    def runs(bleu: float, **tests) -> list[dict]:
        return [{"seed": seed, "test": {"bleu": bleu, **tests}} for seed in (1, 2)]

    parts = {"relevance_concat": {"p_value": 0.01}, "deps_san": {"p_value": 0.3}}
    by_system = {"baseline": runs(30.0), "relevance_concat": runs(31.0), "deps_san": runs(30.5),
                 "relevance_concat+deps_san": runs(32.0, significance_vs_baseline={"p_value": 0.001},
                                                   significance_vs_parts=parts)}
    line = benchmark_report.outcomes(by_system)[-1]
    assert line.endswith("Against its parts: `relevance_concat` +1.00 BLEU (p = 0.010, 0.010); `deps_san` +1.50 BLEU "
                         "(p = 0.300, 0.300, not significant in every seed).")


@pytest.mark.slow
def test_the_report_sets_a_baseline_trained_longer_next_to_the_benchmark_baseline(tiny_benchmark, tmp_path):
    from benchmarks import benchmark_report

    folder, _ = tiny_benchmark
    benchmark.main(["run", "--systems", "baseline", "--seeds", "1", "--runs_dir", str(tmp_path / "runs"),
                    "--results_dir", str(tmp_path / "results"), "--tokenizer", str(folder / "tokenizer"),
                    "--max_test_samples", "20", "--shared_overrides", json.dumps({**TINY, "max_steps": 18}),
                    "--continue_from", str(folder / "runs")])
    longer = json.loads((tmp_path / "results" / "baseline_seed1.json").read_text())
    text = benchmark_report.main(["--results_dir", str(folder / "results"), "--output", str(tmp_path / "report.md"),
                                  "--speed_results", str(tmp_path / "no_speed_run.json"),
                                  "--longer_budget_dir", str(tmp_path / "results")])
    [paragraph] = [line for line in text.splitlines() if line.startswith("The baseline trained on")]
    assert f"seed 1: BLEU {longer['test']['bleu']:.2f}" in paragraph and "after 18 steps" in paragraph
    assert "after 12 steps" in paragraph and "the gap to the reference's 41.0 shrinks from" in paragraph
    assert '--shared_overrides \'{"max_steps": 18}\'' in paragraph


@pytest.mark.slow
def test_runs_on_pre_parsed_sources_side_by_side_with_significance_added_later(
        feature_tokenizer, stanza_annotator, multi30k_dir, blind_dir, tmp_path):
    """As on a GPU machine without Stanza: every source comes parsed from CoNLL-U files, and a method trains before
    the baseline of its seed is done; the significance command then adds its test."""
    from hf_srcfeat.conllu import write_conllu
    from hf_srcfeat.data.multi30k import load_multi30k

    parses = tmp_path / "parses"
    parses.mkdir()
    for split, count in (("train", 200), ("val", 20), ("test_2016_flickr", 20)):
        sources = list(load_multi30k(split, data_dir=multi30k_dir, limit=count)["source"])
        write_conllu(stanza_annotator.annotate(sources, show_progress=False), parses / f"{split}.en.conllu.gz")
    for split in BLIND_SPLITS:
        with gzip.open(blind_dir / f"{split}.en.gz", "rt", encoding="utf-8") as handle:
            sources = handle.read().splitlines()
        write_conllu(stanza_annotator.annotate(sources, show_progress=False), parses / f"{split}.en.conllu.gz")
    feature_tokenizer.save_pretrained(tmp_path / "tokenizer")
    arguments = ["--seeds", "1", "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results"),
                 "--tokenizer", str(tmp_path / "tokenizer"), "--max_test_samples", "20", "--source_parses",
                 str(parses), "--shared_overrides", json.dumps({**TINY, "stanza_dir": str(tmp_path / "no_stanza")})]
    with pytest.raises(SystemExit, match="--defer_significance"):
        benchmark.main(["run", "--systems", "relevance_concat", *arguments])
    benchmark.main(["run", "--systems", "relevance_concat", "--defer_significance", *arguments])
    result = json.loads((tmp_path / "results" / "relevance_concat_seed1.json").read_text())
    assert "significance_vs_baseline" not in result["test"] and result["source_parses"] == str(parses)
    assert str(parses / "train.en.conllu.gz") in result["data_files"]
    benchmark.main(["run", "--systems", "baseline", *arguments])
    benchmark.main(["significance", "--systems", "relevance_concat", *arguments])
    result = json.loads((tmp_path / "results" / "relevance_concat_seed1.json").read_text())
    assert 0 <= result["test"]["significance_vs_baseline"]["p_value"] <= 1
    for split in BLIND_SPLITS:
        output = tmp_path / "results" / "blind" / f"relevance_concat_seed1.{split}.de"
        assert len(output.read_text(encoding="utf-8").splitlines()) == BLIND_SOURCE_LINES


@pytest.mark.parametrize(("arguments", "message"), [
    (["--max_test_samples", "-995"], "--max_test_samples must be at least 1, got -995"),
    (["--max_test_samples", "0"], "--max_test_samples must be at least 1, got 0"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    (["--data_dir", "/nonexistent"], "--data_dir: /nonexistent is not a folder"),
    (["--shared_overrides", '{"max_steps": -1}'], "--shared_overrides: max_steps must be a whole number of at least "
                                                  "1, got -1"),
    (["--shared_overrides", '{"d_model": 0.5}'], "--shared_overrides: d_model must be a whole number"),
    (["--shared_overrides", "[20]"], "--shared_overrides must be a JSON object"),
])
def test_impossible_arguments_are_refused_in_one_line_before_anything_runs(tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit):
        # A tokenizer that is not there: were an argument let through, the run would stop at once, not train.
        benchmark.main(["run", "--systems", "baseline", "--seeds", "1", "--runs_dir", str(tmp_path / "runs"),
                        "--results_dir", str(tmp_path / "results"), "--tokenizer", str(tmp_path / "no_tokenizer"),
                        *arguments])
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error, error
    assert list(tmp_path.iterdir()) == [], "nothing trained or written"


def test_a_missing_blind_source_is_named_before_any_system_trains(tmp_path, multi30k_dir):
    empty = tmp_path / "blind"
    empty.mkdir()
    with pytest.raises(SystemExit, match=r"blind test source .*blind/test_2017_flickr.en.gz is missing"):
        benchmark.main(["run", "--systems", "baseline", "deps_san", "--seeds", "1", "--runs_dir", str(tmp_path / "runs"),
                        "--results_dir", str(tmp_path / "results"), "--data_dir", str(multi30k_dir),
                        "--blind_dir", str(empty), "--tokenizer", str(tmp_path / "no_tokenizer"),
                        "--shared_overrides", json.dumps(TINY)])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["blind"], "nothing trained or written"


def test_status_says_when_a_scored_run_lacks_blind_translations(tmp_path, capsys):
    (tmp_path / "results" / "blind").mkdir(parents=True)
    for system in ("baseline", "deps_san"):
        (tmp_path / "results" / f"{system}_seed1.json").write_text("{}")
    for split in BLIND_SPLITS:
        (tmp_path / "results" / "blind" / f"baseline_seed1.{split}.de").write_text("Ein Hund.\n")
    for split in BLIND_SPLITS[:2]:
        (tmp_path / "results" / "blind" / f"deps_san_seed1.{split}.de").write_text("Ein Hund.\n")
    benchmark.main(["status", "--systems", "baseline", "deps_san", "--seeds", "1", "--runs_dir", str(tmp_path / "runs"),
                    "--results_dir", str(tmp_path / "results")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("seed 1: done") and lines[0].startswith("baseline ")
    assert lines[1].startswith("deps_san ") and "done" not in lines[1]
    assert f"blind translations are missing ({BLIND_SPLITS[2]})" in lines[1]


def test_a_result_lists_each_data_file_once_in_the_order_read():
    training = ["train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz", "test_2016_flickr.en.gz",
                "test_2016_flickr.de.gz"]
    assert benchmark.recorded_data_files(training, ["test_2016_flickr.en.gz", "test_2016_flickr.de.gz"]) == training
    assert benchmark.recorded_data_files(training[:4], ["t.en.gz"]) == [*training[:4], "t.en.gz"]


def write_results(folder: Path, systems, seeds, shared: dict, test_sentences: int = 1000) -> None:
    """Result files with what the set-up check reads (a report needs more)."""
    folder.mkdir(parents=True, exist_ok=True)
    for system in systems:
        for seed in seeds:
            (folder / f"{system}_seed{seed}.json").write_text(json.dumps(
                {"system": system, "seed": seed, "shared_arguments": shared, "test_sentences": test_sentences}))


def test_the_docs_are_not_updated_from_results_of_another_set_up(tmp_path, capsys):
    from benchmarks import benchmark_report

    results, page = tmp_path / "smoke", tmp_path / "benchmark.md"
    write_results(results, ["baseline", "deps_san"], [1], {**benchmark.SHARED_ARGUMENTS, "max_steps": 4}, 20)
    page.write_text(f"# Results\n{benchmark_report.README_START}\npublished\n{benchmark_report.README_END}\n")
    with pytest.raises(SystemExit):
        benchmark_report.main(["--results_dir", str(results), "--output", str(tmp_path / "report.md"),
                               "--update_docs", "--docs_page", str(page)])
    error = capsys.readouterr().err
    assert "--update_docs: " in error and "is not the benchmark's set-up: trained with shared_overrides (max_steps 4)" \
        in error and "seeds 1 (the benchmark's: 1, 2)" in error and "no result of relevance_concat" in error \
        and "scored on 20 test sentences (the benchmark: all 1000)" in error and "--allow_other_setup" in error, error
    assert "published" in page.read_text() and not (tmp_path / "report.md").exists(), "nothing written"


def test_results_of_every_system_and_seed_in_the_shared_set_up_are_the_benchmarks(tmp_path):
    from benchmarks import benchmark_report

    pre_parsed = {**benchmark.SHARED_ARGUMENTS, "train_source_conllu": "parses/train.en.conllu.gz"}
    write_results(tmp_path, [*benchmark.SYSTEMS, *benchmark.COMPOSED_SYSTEMS], benchmark.SEEDS, pre_parsed)
    assert benchmark_report.setup_differences(benchmark_report.load_results(tmp_path)) == []
    write_results(tmp_path, ["lfe_dae"], [2], {**pre_parsed, "use_cpu": False})
    assert benchmark_report.setup_differences(benchmark_report.load_results(tmp_path)) == [
        "trained with shared_overrides (use_cpu false)"]


def test_the_report_claims_nothing_about_how_runs_were_scheduled():
    from benchmarks import benchmark_report

    text = benchmark_report.hardware({"torch_threads": 1}, benchmark.SHARED_ARGUMENTS)
    assert "1 torch thread(s) per run" in text
    assert "two ran at a time" not in text and "2-core" not in text, "the result files do not say so"


def test_a_run_that_trained_to_the_end_is_scored_not_retrained(tmp_path):
    """Scoring cut after training (a crash, a missing baseline folder) must not cost the training again."""
    results = {"global_step": 1200, "train_metrics": {"train_runtime": 2933.6}, "train_seconds": 2933.8}
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert benchmark.finished_training(tmp_path, 1200) == results
    assert benchmark.finished_training(tmp_path, 2400) is None, "a longer budget trains on"
    (tmp_path / "results.json").write_text(json.dumps({**results, "global_step": 800}))
    assert benchmark.finished_training(tmp_path, 1200) is None
    assert benchmark.finished_training(tmp_path / "missing", 1200) is None
