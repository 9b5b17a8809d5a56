"""Scoring given targets (`hf-srcfeat-score`, `score_targets`): the log-probability of a model's own greedy output
is what `generate` reported for it, sources parsed or given as CoNLL-U score alike, and the command keeps its output
aligned with its input."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from hf_srcfeat.commands.score import main
from hf_srcfeat.conllu import conllu_lines
from hf_srcfeat.metrics.forced_decoding import score_targets


@pytest.fixture(scope="module")
def greedy(trained_baseline, feature_tokenizer, test_sentences):
    """Greedy translations of 16 real test sources with the per-token log-probabilities generate reports."""
    model, _ = trained_baseline
    sources = test_sentences[:16]
    encoded = feature_tokenizer(sources, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**encoded, num_beams=1, do_sample=False, max_new_tokens=48, output_scores=True,
                                return_dict_in_generate=True)
    transition = model.compute_transition_scores(output.sequences, output.scores, normalize_logits=True)
    generated = output.sequences[:, 1:]
    present = generated != feature_tokenizer.pad_token_id
    totals = (transition * present).sum(dim=-1).tolist()
    texts = feature_tokenizer.batch_decode(output.sequences, skip_special_tokens=True)
    ids = [row[mask].tolist() for row, mask in zip(generated, present, strict=True)]
    return sources, texts, ids, totals


def test_the_score_of_the_models_own_greedy_output_is_what_generate_reported(trained_baseline, feature_tokenizer,
                                                                             greedy):
    model, _ = trained_baseline
    sources, texts, ids, totals = greedy
    scores = score_targets(model, feature_tokenizer, sources, ids, batch_size=5)
    for index, score in enumerate(scores):
        assert score.total == pytest.approx(totals[index], abs=1e-4)
        assert score.tokens == len(ids[index]) and score.per_token == pytest.approx(score.total / score.tokens)
    # An output given as text is scored as its text encodes; where that gives the generated subwords, the same score.
    same = [index for index, text in enumerate(texts)
            if feature_tokenizer(text_target=[text])["input_ids"][0] == ids[index]]
    assert same, "some greedy outputs encode back to their own subwords"
    from_text = score_targets(model, feature_tokenizer, [sources[i] for i in same], [texts[i] for i in same])
    assert [score.total for score in from_text] == pytest.approx([totals[i] for i in same], abs=1e-4)


def test_parsed_and_conllu_sources_score_alike_and_a_worse_target_scores_lower(trained_baseline, feature_tokenizer,
                                                                            stanza_annotator, greedy):
    model, _ = trained_baseline
    sources, texts, _, _ = greedy
    parses = stanza_annotator.annotate(sources[:4], show_progress=False)
    from_text = score_targets(model, feature_tokenizer, sources[:4], texts[:4])
    from_parses = score_targets(model, feature_tokenizer, parses, texts[:4])
    assert [score.total for score in from_parses] == pytest.approx([score.total for score in from_text], abs=1e-5)
    shuffled = score_targets(model, feature_tokenizer, sources[:4], texts[1:4] + texts[:1])
    assert sum(score.total for score in shuffled) < sum(score.total for score in from_text)
    with pytest.raises(ValueError, match="4 sources but 3 targets"):
        score_targets(model, feature_tokenizer, sources[:4], texts[:3])


def write_lines(path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_the_command_writes_one_aligned_line_per_pair_and_marks_the_unscorable(
        model_folder, trained_baseline, feature_tokenizer, greedy, tmp_path, capsys):
    model, _ = trained_baseline
    sources, texts, _, _ = greedy
    source_lines = [sources[0], sources[1], "", sources[2]]
    target_lines = [texts[0], "", texts[1], texts[2]]
    output = tmp_path / "scores.tsv"
    assert main(["--model", str(model_folder), "--source", write_lines(tmp_path / "src.en", source_lines),
                 "--target", write_lines(tmp_path / "tgt.de", target_lines), "--output", str(output),
                 "--batch_size", "2"]) == 0
    lines = output.read_text().splitlines()
    assert len(lines) == 4 and lines[1] == lines[2] == "nan\tnan\t0"
    assert "pair 2 not scored: target line 2 is empty" in capsys.readouterr().err
    expected = score_targets(model, feature_tokenizer, [sources[0], sources[2]], [texts[0], texts[2]])
    for line, score in zip([lines[0], lines[3]], expected, strict=True):
        total, per_token, tokens = line.split("\t")
        assert math.isclose(float(total), score.total, abs_tol=1e-5) and int(tokens) == score.tokens


def test_a_pair_longer_than_the_model_takes_is_not_scored_cut_and_the_others_keep_their_lines(
        model_folder, trained_baseline, greedy, tmp_path, capsys):
    model, _ = trained_baseline
    sources, texts, _, _ = greedy
    limit = model.config.max_position_embeddings
    long_target = " ".join([texts[1]] * (limit // 4 + 1))
    output = tmp_path / "scores.tsv"
    assert main(["--model", str(model_folder), "--source", write_lines(tmp_path / "src.en", sources[:3]),
                 "--target", write_lines(tmp_path / "tgt.de", [texts[0], long_target, texts[2]]),
                 "--output", str(output)]) == 0
    lines = output.read_text().splitlines()
    assert lines[1] == "nan\tnan\t0" and "nan" not in lines[0] + lines[2]
    assert re.search(rf"pair 2 not scored: its target has \d+ tokens, more than the model's "
                     rf"max_position_embeddings \({limit}\)", capsys.readouterr().err)
    long_source = " ".join([sources[1]] * 200)  # some 12,000 characters: more than the parser takes
    assert main(["--model", str(model_folder), "--source", write_lines(tmp_path / "long.en", [long_source]),
                 "--target", write_lines(tmp_path / "long.de", [texts[1]])]) == 0
    assert re.search(r"pair 1 not scored: the source has [\d,]+ characters, more than max_characters=10,000",
                     capsys.readouterr().err)


def test_conllu_sources_are_read_one_sentence_per_target_and_mismatched_files_are_refused(
        model_folder, stanza_annotator, greedy, tmp_path, capsys):
    sources, texts, _, _ = greedy
    parses = stanza_annotator.annotate(sources[:3], show_progress=False)
    conllu = tmp_path / "src.conllu"
    conllu.write_text("".join("\n".join(conllu_lines(parse)) + "\n" for parse in parses), encoding="utf-8")
    target = write_lines(tmp_path / "tgt.de", texts[:3])
    from_text = tmp_path / "text.tsv"
    main(["--model", str(model_folder), "--source", write_lines(tmp_path / "src.en", sources[:3]), "--target",
          target, "--output", str(from_text)])
    from_conllu = tmp_path / "conllu.tsv"
    main(["--model", str(model_folder), "--source", str(conllu), "--source_format", "conllu", "--target", target,
          "--output", str(from_conllu)])
    for text_line, conllu_line in zip(from_text.read_text().splitlines(), from_conllu.read_text().splitlines(),
                                      strict=True):
        assert float(text_line.split("\t")[0]) == pytest.approx(float(conllu_line.split("\t")[0]), abs=1e-5)
    with pytest.raises(SystemExit, match="has 3 sentences, --target .* has 2 lines"):
        main(["--model", str(model_folder), "--source", str(conllu), "--source_format", "conllu", "--target",
              write_lines(tmp_path / "short.de", texts[:2])])
    with pytest.raises(SystemExit):
        main(["--model", str(model_folder), "--source", str(conllu), "--target", target, "--output", target])
    assert f"--output {target} is the --target file; it would be overwritten" in capsys.readouterr().err


def test_a_missing_source_or_target_file_is_named_by_its_option(model_folder, tmp_path):
    present = write_lines(tmp_path / "present.txt", ["A dog runs."])
    for source, target, option in ((str(tmp_path / "nosuch.en"), present, "--source"),
                                   (present, str(tmp_path / "nosuch.de"), "--target")):
        with pytest.raises(SystemExit, match=f"^{option} .*nosuch.*: no such file"):
            main(["--model", str(model_folder), "--source", source, "--target", target])


def test_a_model_that_is_not_there_or_a_ctranslate2_export_is_named_in_one_line(tmp_path, capsys):
    import huggingface_hub.constants

    assert huggingface_hub.constants.HF_HUB_OFFLINE  # conftest's: the lookups below fail at once
    files = ["--source", write_lines(tmp_path / "src.en", ["A dog runs."]),
             "--target", write_lines(tmp_path / "tgt.de", ["Ein Hund läuft."])]
    for missing in ("nosuch", "runs_nowhere/baseline"):  # the second is spelled like a Hub id
        with pytest.raises(SystemExit, match=f"^hf-srcfeat-score: --model {missing}: no such folder here, and it "
                                             r"does not load from the Hub \(.*\)\.$"):
            main(["--model", missing, *files])
    export = tmp_path / "model-ct2"
    export.mkdir()
    (export / "hf_srcfeat_export.json").write_text("{}")  # the file hf-srcfeat-export-ct2 writes
    with pytest.raises(SystemExit):
        main(["--model", str(export), *files])
    assert f"--model {export} is a CTranslate2 export (hf-srcfeat-export-ct2)" in capsys.readouterr().err


def test_quiet_keeps_the_loading_progress_bar_off_stderr(model_folder, greedy, tmp_path, capsys):
    sources, texts, _, _ = greedy
    files = ["--source", write_lines(tmp_path / "src.en", sources[:2]),
             "--target", write_lines(tmp_path / "tgt.de", texts[:2]), "--output", str(tmp_path / "scores.tsv")]
    assert main(["--model", str(model_folder), *files]) == 0
    assert "Loading weights" in capsys.readouterr().err
    assert main(["--model", str(model_folder), *files, "--quiet"]) == 0
    assert capsys.readouterr().err == "" and len((tmp_path / "scores.tsv").read_text().splitlines()) == 2


def test_a_gzip_output_records_its_own_name(model_folder, greedy, tmp_path):
    from .test_safe_writing import gzip_header_name

    sources, texts, _, _ = greedy
    output = tmp_path / "scores.tsv.gz"
    assert main(["--model", str(model_folder), "--source", write_lines(tmp_path / "src.en", sources[:2]),
                 "--target", write_lines(tmp_path / "tgt.de", texts[:2]), "--output", str(output), "-q"]) == 0
    assert gzip_header_name(output) == b"scores.tsv"


def test_the_contrastive_script_writes_both_candidates_scores_per_item(model_folder, trained_baseline,
                                                                       feature_tokenizer, multi30k_dir, tmp_path):
    """On a stand-in set made of Multi30k pairs (the real set is blind): one line per item, `score_a<TAB>score_b`,
    each the forced-decoding score of that candidate."""
    import gzip

    from benchmarks import contrastive_agreement
    from hf_srcfeat.data.multi30k import load_multi30k

    pairs = load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=6)
    sources, references = list(pairs["source"]), list(pairs["target"])
    data = tmp_path / "set"
    data.mkdir()
    for name, lines in (("source.en", sources), ("candidate_a.de", references),
                        ("candidate_b.de", references[1:] + references[:1])):
        with gzip.open(data / f"{name}.gz", "wt", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
    (tmp_path / "runs" / "baseline").mkdir(parents=True)
    (tmp_path / "runs" / "baseline" / "seed1").symlink_to(model_folder)
    assert contrastive_agreement.main(["--runs", "baseline/seed1", "--runs_dir", str(tmp_path / "runs"),
                                       "--data_dir", str(data), "--output_dir", str(tmp_path / "out")]) == 0
    rows = [line.split("\t") for line in (tmp_path / "out" / "baseline_seed1.tsv").read_text().splitlines()]
    assert len(rows) == 6 and all(len(row) == 2 for row in rows)
    model, _ = trained_baseline
    for column, targets in enumerate((references, references[1:] + references[:1])):
        expected = score_targets(model, feature_tokenizer, sources, targets)
        assert [float(row[column]) for row in rows] == pytest.approx([score.total for score in expected], abs=1e-3)
    record = json.loads((tmp_path / "out" / "baseline_seed1.json").read_text())
    assert record["items"] == 6 and record["code_version"]
    assert record["data_dir"] == str(data) and record["data_sha256"] == contrastive_agreement.read_set(data)[1]
    index = (tmp_path / "out" / "README.md").read_text()
    assert "| `baseline_seed1.tsv` |" in index and "Which candidate is correct is not known here" in index
    assert f"each item of `{data.resolve()}/`" in index and "contrastive_agreement_blind" not in index


def write_stand_in_set(folder, multi30k_dir, count: int = 3):
    """A made-up contrastive set of Multi30k validation pairs (the real set is blind): candidate b is a's neighbour."""
    import gzip

    from hf_srcfeat.data.multi30k import load_multi30k

    pairs = load_multi30k("val", data_dir=multi30k_dir, limit=count)
    sources, references = list(pairs["source"]), list(pairs["target"])
    folder.mkdir()
    for name, lines in (("source.en", sources), ("candidate_a.de", references),
                        ("candidate_b.de", references[1:] + references[:1])):
        with gzip.open(folder / f"{name}.gz", "wt", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
    return folder


def test_the_contrastive_sets_hash_follows_its_text_not_its_gzip_bytes(multi30k_dir, tmp_path):
    import gzip

    from benchmarks import contrastive_agreement

    data = write_stand_in_set(tmp_path / "set", multi30k_dir)
    lines, digest = contrastive_agreement.read_set(data)
    assert len(lines["source.en.gz"]) == 3 and len(digest) == 64
    with gzip.open(data / "candidate_b.de.gz", "wt", encoding="utf-8", compresslevel=1) as handle:
        handle.write("".join(line + "\n" for line in lines["candidate_b.de.gz"]))
    assert contrastive_agreement.read_set(data)[1] == digest, "recompressed, same text"
    with gzip.open(data / "candidate_b.de.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines["candidate_a.de.gz"]))
    assert contrastive_agreement.read_set(data)[1] != digest


def test_the_contrastive_script_names_a_missing_data_folder_or_run_before_scoring(multi30k_dir, tmp_path, capsys):
    from benchmarks import contrastive_agreement

    run = tmp_path / "runs" / "baseline" / "seed1"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")  # never loaded: the checks come first
    arguments = ["--runs_dir", str(tmp_path / "runs"), "--output_dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match=r"--data_dir: .*missing is not a folder"):
        contrastive_agreement.main(["--runs", "baseline/seed1", "--data_dir", str(tmp_path / "missing"), *arguments])
    data = write_stand_in_set(tmp_path / "set", multi30k_dir)
    (data / "candidate_b.de.gz").unlink()
    with pytest.raises(SystemExit, match=r"--data_dir: .*set has no candidate_b.de.gz"):
        contrastive_agreement.main(["--runs", "baseline/seed1", "--data_dir", str(data), *arguments])
    with pytest.raises(SystemExit):  # the runs are checked before the data folder is even looked at
        contrastive_agreement.main(["--runs", "baseline/seed1", "baseline/seed9", "--data_dir",
                                    str(tmp_path / "missing"), *arguments])
    error = capsys.readouterr().err
    assert "--runs: no trained model folder for baseline/seed9" in error and "Traceback" not in error, error
    assert not (tmp_path / "out").exists()


def test_the_contrastive_index_leaves_out_json_files_that_are_not_its_records(tmp_path):
    from benchmarks import contrastive_agreement

    out = tmp_path / "out"
    out.mkdir()
    (out / "baseline_seed1.tsv").write_text("-1.0\t-2.0\n")
    (out / "baseline_seed1.json").write_text(json.dumps({
        "model": "runs/benchmark/baseline/seed1", "items": 1, "code_version": "abc", "data_dir": str(tmp_path / "set"),
        "run_test_scores": {"bleu": 30.3, "chrf": 55.1}}))
    (out / "accuracy.json").write_text(json.dumps({"baseline_seed1": 0.8}))  # e.g. computed elsewhere
    (out / "notes.json").write_text("[1, 2]")
    contrastive_agreement.main(["--index_only", "--output_dir", str(out)])
    rows = [line for line in (out / "README.md").read_text().splitlines() if line.startswith("| `")]
    assert rows == ["| `baseline_seed1.tsv` | `runs/benchmark/baseline/seed1` | 30.3 | 55.1 |  | abc |"]
    assert f"each item of `{(tmp_path / 'set').resolve()}/`" in (out / "README.md").read_text()


def test_paired_bootstrap_gives_identical_translations_no_significance_and_counts_what_differs(multi30k_dir):
    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.metrics.translation_scores import paired_bootstrap

    test = load_multi30k("test_2016_flickr", "en", "de", multi30k_dir, 200)
    references = list(test["target"])
    system = [" ".join(reference.split()[:-2]) for reference in references]  # two words short of each reference
    assert paired_bootstrap(system, list(system), references) == {
        "test": "paired bootstrap resampling (sacrebleu)", "samples": 0, "p_value": 1.0,
        "baseline_bleu": paired_bootstrap(system, references, references)["baseline_bleu"], "differing_sentences": 0}
    better = paired_bootstrap(system, references, references, samples=200)
    assert better["differing_sentences"] == 200 and better["p_value"] < 0.05
