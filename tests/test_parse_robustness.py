"""The corruption of benchmarks/parse_robustness.py: on real parses, a share of the words gets a random head and random
tags, every sentence stays one tree with its root, and the same seed gives the same corruption; benchmarks/parser_value.py
reads a model's BLEU per point of parser accuracy off the resulting curve."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

from benchmarks.parse_robustness import corrupt
from hf_srcfeat.dependency_tree import top_down_order


def is_one_tree(heads: list[int]) -> bool:
    """One root, and every word reached from it (`top_down_order` raises on a cycle or a detached word)."""
    try:
        return heads.count(0) == 1 and len(top_down_order(heads)) == len(heads)
    except ValueError:
        return False


def test_corrupted_parses_stay_trees_and_change_about_the_share_asked(stanza_annotator, test_sentences):
    parses = stanza_annotator.annotate(test_sentences[:30])
    labels = {name: sorted({getattr(w, name) for s in parses for w in s.words}) for name in ("upos", "xpos", "deprel")}
    assert [corrupt(s, 0.0, random.Random(1), labels) for s in parses] == parses
    corrupted = [corrupt(s, 0.5, random.Random(f"1-{i}"), labels) for i, s in enumerate(parses)]
    assert corrupted == [corrupt(s, 0.5, random.Random(f"1-{i}"), labels) for i, s in enumerate(parses)]
    changed = words = 0
    for before, after in zip(parses, corrupted, strict=True):
        assert is_one_tree([word.head for word in after.words]), after
        assert [word.text for word in after.words] == [word.text for word in before.words]
        changed += sum(a.upos != b.upos or a.head != b.head for a, b in zip(after.words, before.words, strict=True))
        words += len(before.words)
    assert 0.25 < changed / words < 0.55, changed / words


def test_a_parsers_value_is_the_bleu_lost_per_point_of_head_accuracy_the_corruption_takes():
    from benchmarks import parser_value

    def curve(bleu_per_point: float) -> dict:
        entry = {rate_name: {"bleu": 30.0 - bleu_per_point * 79.5 * rate} for rate, rate_name in
                 ((0.0, "parsed"), (0.1, "corrupted_0.1"), (0.25, "corrupted_0.25"), (0.5, "corrupted_0.5"))}
        return {"model_type": "deps_san", "feature_dropout": {}, **entry, "no_parse": {"bleu": 20.0}}

    values = parser_value.parser_value({"runs": {"sensitive": curve(0.02), "flat": curve(0.0),
                                                 "unfinished": {"parsed": {"bleu": 30.0}}}}, uas=79.5)
    assert set(values) == {"sensitive", "flat"}  # a run without the whole curve is left out
    assert values["sensitive"]["bleu_per_uas_point"] == pytest.approx(0.02)
    assert values["sensitive"]["bleu_change_uas_+10"] == pytest.approx(0.2)
    assert values["flat"]["bleu_change_uas_-10"] == 0.0


@pytest.mark.slow
def test_processes_adding_results_to_one_file_side_by_side_keep_each_others(tmp_path):
    """Two parse-robustness lanes write one results file: each write re-reads it under a lock, so none is lost."""
    import subprocess

    writer = (
        "import sys; from pathlib import Path; from benchmarks import benchmark\n"
        "name, output = sys.argv[1], Path(sys.argv[2])\n"
        "for index in range(25):\n"
        "    benchmark.update_json(output, lambda data: data['runs'].__setitem__(f'{name}{index}', index),\n"
        "                          lambda: {'runs': {}})\n"
    )
    output = tmp_path / "parse_robustness.json"
    repo = Path(__file__).resolve().parents[1]
    writers = [subprocess.Popen([sys.executable, "-c", writer, name, str(output)], cwd=repo) for name in "ab"]
    assert [process.wait(timeout=120) for process in writers] == [0, 0]
    import json

    assert json.loads(output.read_text())["runs"] == {f"{name}{index}": index for name in "ab" for index in range(25)}
    assert [path.name for path in tmp_path.iterdir() if path.name.endswith(".partial")] == []


def test_parser_value_names_the_file_and_the_key_it_lacks(tmp_path):
    from benchmarks import parser_value

    robustness, accuracy = tmp_path / "robustness.json", tmp_path / "accuracy.json"
    robustness.write_text('{"runs": {}}')
    accuracy.write_text('{"ewt_test": {"upos": 90.7}}')
    with pytest.raises(SystemExit, match=r"accuracy.json: no 'ewt_test.uas'"):
        parser_value.main(["--robustness", str(robustness), "--annotator_accuracy", str(accuracy),
                           "--output", str(tmp_path / "value.json")])
    robustness.write_text('{"runs": ')
    accuracy.write_text('{"ewt_test": {"uas": 79.5}}')
    with pytest.raises(SystemExit, match=r"robustness.json: cannot read it as JSON"):
        parser_value.main(["--robustness", str(robustness), "--annotator_accuracy", str(accuracy),
                           "--output", str(tmp_path / "value.json")])


def test_parser_value_records_the_code_that_computed_it(tmp_path):
    from benchmarks import parser_value

    robustness, accuracy = tmp_path / "robustness.json", tmp_path / "accuracy.json"
    robustness.write_text('{"runs": {}}')
    accuracy.write_text('{"ewt_test": {"uas": 79.5}}')
    result = parser_value.main(["--robustness", str(robustness), "--annotator_accuracy", str(accuracy),
                                "--output", str(tmp_path / "value.json")])
    assert json.loads((tmp_path / "value.json").read_text())["code_version"] == result["code_version"] != ""


def test_the_readme_table_lists_each_finished_curve_baseline_first():
    from benchmarks.parse_robustness import table

    def curve(bleu: float) -> dict:
        return {"model_type": "m", "feature_dropout": {}, "parsed": {"bleu": bleu}, "corrupted_0.1": {"bleu": bleu - 1},
                "no_parse": {"bleu": bleu - 2}}

    results = {"runs": {"deps_san/seed1": curve(30.0), "baseline/seed1": curve(29.0),
                        "phrase/seed1": {"model_type": "m", "feature_dropout": {}, "parsed": {"bleu": 28.0}}}}
    assert table(results).splitlines() == [
        "| run | parsed | 10% corrupted | no parse |", "|---|---|---|---|",
        "| baseline seed 1 | 29.00 | 28.00 | 27.00 |", "| deps_san seed 1 | 30.00 | 29.00 | 28.00 |"]


def test_the_table_of_a_missing_results_file_is_an_error_naming_it(tmp_path):
    from benchmarks.parse_robustness import main

    with pytest.raises(SystemExit, match=r"missing.json: cannot read it as JSON"):
        main(["--table", "--output", str(tmp_path / "missing.json")])


@pytest.fixture
def run_folder(tmp_path) -> Path:
    """A run folder as --runs names them (system/seedK under --runs_dir); the checks below stop before loading it."""
    folder = tmp_path / "runs" / "baseline" / "seed1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_adding_to_results_made_with_other_settings_is_refused_naming_them(tmp_path, run_folder, multi30k_dir):
    from benchmarks.parse_robustness import main

    output = tmp_path / "robustness.json"
    recorded = {"test_set": "test_2016_flickr", "sentences": 5, "corruption_seed": 1,
                "runs": {"baseline/seed1": {"model_type": "m", "feature_dropout": {}, "parsed": {"bleu": 1.0}}}}
    output.write_text(json.dumps(recorded))
    with pytest.raises(SystemExit, match=r"robustness.json holds results made with sentences 5 \(now 10\), "
                                         r"corruption_seed 1 \(now 7\)"):
        main(["--runs", "baseline/seed1", "--runs_dir", str(tmp_path / "runs"), "--data_dir", str(multi30k_dir),
              "--max_sentences", "10", "--seed", "7", "--output", str(output)])
    assert json.loads(output.read_text()) == recorded, "the results are left as they were"


@pytest.mark.parametrize(("arguments", "message"), [
    (["--corruption", "1.5"], r"--corruption: each rate must lie in \[0, 1\], got \[1.5\]"),
    (["--corruption", "0.1", "-0.1"], r"--corruption: each rate must lie in \[0, 1\]"),
    (["--max_sentences", "-3"], "--max_sentences must be at least 1, got -3"),
    (["--max_sentences", "0"], "--max_sentences must be at least 1, got 0"),
    (["--runs", "baseline/seed9"], r"--runs: no such run folder .*: baseline/seed9"),
])
def test_impossible_settings_and_unknown_runs_are_refused_in_one_line(tmp_path, run_folder, capsys, arguments,
                                                                        message):
    from benchmarks.parse_robustness import main

    with pytest.raises(SystemExit):
        main(["--runs", "baseline/seed1", "--runs_dir", str(tmp_path / "runs"),
              "--output", str(tmp_path / "robustness.json"), *arguments])
    error = capsys.readouterr().err
    assert re.search(message, error), error
    assert "Traceback" not in error and not (tmp_path / "robustness.json").exists()


def test_the_table_says_how_many_sentences_were_scored(tmp_path, capsys):
    from benchmarks.parse_robustness import main

    output = tmp_path / "robustness.json"
    output.write_text(json.dumps({"test_set": "test_2016_flickr", "sentences": 5, "corruption_seed": 1, "runs": {
        "baseline/seed1": {"model_type": "m", "feature_dropout": {}, "parsed": {"bleu": 20.0}}}}))
    main(["--table", "--output", str(output)])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "BLEU on test_2016_flickr, 5 sentences, corruption seed 1:", printed
    assert printed[-1] == "| baseline seed 1 | 20.00 |"
