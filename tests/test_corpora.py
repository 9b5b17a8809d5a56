"""Your corpus, your language pair: train.py reads JSON lines, TSV, text-file pairs and `datasets` folders as
run_translation.py users expect, scores every test set it is given, and names the file and line of bad data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from datasets import Dataset

from hf_srcfeat.data.corpora import from_dataset, load_corpora, load_file
from hf_srcfeat.data.errors import DataError
from hf_srcfeat.data.multi30k import load_multi30k

from .test_bad_input import TINY_RUN


@pytest.fixture(scope="module")
def en_fr(multi30k_dir) -> dict[str, Dataset]:
    """Multi30k's English and French sides, first 200 / 20 / 20 / 12 pairs of train, val, test, a second test."""
    return {"train": load_multi30k("train", "en", "fr", multi30k_dir, limit=200),
            "valid": load_multi30k("val", "en", "fr", multi30k_dir, limit=20),
            "flickr": load_multi30k("test_2016_flickr", "en", "fr", multi30k_dir, limit=20),
            "other": load_multi30k("val", "en", "fr", multi30k_dir).select(range(100, 112))}


def write_json_lines(path, data: Dataset) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for source, target in zip(data["source"], data["target"], strict=True):
            handle.write(json.dumps({"translation": {"en": source, "fr": target}}, ensure_ascii=False) + "\n")
    return str(path)


def test_train_py_trains_on_json_lines_of_another_language_pair_and_scores_each_test_set(en_fr, tmp_path):
    from hf_srcfeat.commands import train

    files = {name: write_json_lines(tmp_path / f"{name}.jsonl", data) for name, data in en_fr.items()}
    run = tmp_path / "run"
    results = train.main(TINY_RUN + [
        "--output_dir", str(run), "--do_train", "--source_lang", "en", "--target_lang", "fr",
        "--train_file", files["train"], "--validation_file", files["valid"], "--test_file", files["flickr"],
        files["other"], "--do_predict", "--predict_with_generate", "--generation_max_length", "16"])
    assert set(results["test_sets"]) == {"flickr", "other"}
    for name, count in (("flickr", 20), ("other", 12)):
        assert results["test_sets"][name]["setup"]["set"] == f"en→fr {name}"
        assert 0 <= results["test_sets"][name]["metrics"]["test_bleu"] <= 100
        assert len((run / f"test_{name}_predictions.txt").read_text(encoding="utf-8").splitlines()) == count
    assert sorted(path.name for path in run.glob("*predictions.txt")) == [
        "test_flickr_predictions.txt", "test_other_predictions.txt"], "one predictions file per test set"
    assert results["data_files"][:2] == [files["train"], files["valid"]]


def test_a_local_datasets_folder_is_read_by_name(en_fr, tmp_path):
    folder = tmp_path / "my_corpus"
    folder.mkdir()
    for split, name in (("train", "train"), ("validation", "valid"), ("test", "flickr")):
        write_json_lines(folder / f"{split}.jsonl", en_fr[name])
    corpora = load_corpora(str(folder), None, None, None, None, "en", "fr")
    assert corpora.train.data["source"] == en_fr["train"]["source"]
    assert corpora.validation.data["target"] == en_fr["valid"]["target"]
    assert [test.name for test in corpora.tests] == ["test"] and len(corpora.tests[0].data) == 20


def test_tsv_and_text_file_pairs_read_the_same_pairs_as_json_lines(en_fr, tmp_path):
    data = en_fr["valid"]
    expected = load_file(write_json_lines(tmp_path / "valid.jsonl", data), "en", "fr").data.to_dict()
    with gzip.open(tmp_path / "valid.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(f"{s}\t{t}\n" for s, t in zip(data["source"], data["target"], strict=True))
    (tmp_path / "corpus.en").write_text("\n".join(data["source"]) + "\n", encoding="utf-8")
    (tmp_path / "corpus.fr").write_text("\n".join(data["target"]) + "\n", encoding="utf-8")
    assert load_file(str(tmp_path / "valid.tsv.gz"), "en", "fr").data.to_dict() == expected
    pair = load_file(str(tmp_path / "corpus"), "en", "fr")
    assert pair.data.to_dict() == expected and pair.origin == [str(tmp_path / "corpus.en"), str(tmp_path / "corpus.fr")]


def test_bad_data_is_named_by_file_and_line(tmp_path):
    (tmp_path / "missing.jsonl").write_text('{"translation": {"en": "A dog.", "fr": "Un chien."}}\n'
                                            '{"translation": {"en": "A cat."}}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing.jsonl line 2: the translation has no \['fr'\]"):
        load_file(str(tmp_path / "missing.jsonl"), "en", "fr")
    (tmp_path / "empty.tsv").write_text("A dog.\tUn chien.\n \tUn chat.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty.tsv line 2: the source sentence is empty"):
        load_file(str(tmp_path / "empty.tsv"), "en", "fr")
    (tmp_path / "pair.en").write_text("A dog.\nA cat.\n", encoding="utf-8")
    (tmp_path / "pair.fr").write_text("Un chien.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"pair.en has 2 lines but .*pair.fr has 1"):
        load_file(str(tmp_path / "pair"), "en", "fr")
    with pytest.raises(DataError, match="no nothing.en and nothing.fr"):
        load_file(str(tmp_path / "nothing"), "en", "fr")
    with pytest.raises(DataError, match=r"trian.tsv: no such file\."):
        load_file(str(tmp_path / "trian.tsv"), "en", "fr")


def with_empty_pairs(data: Dataset) -> tuple[list[str], list[str], int]:
    """The pairs with a blank source after the second, an empty target after the fifth and both empty after the
    ninth, as scraped corpora have them; and how many pairs are empty."""
    sources, targets = list(data["source"]), list(data["target"])
    for index, (source, target) in ((2, (" ", "Un chien.")), (6, ("A dog.", "")), (11, ("", ""))):
        sources.insert(index, source)
        targets.insert(index, target)
    return sources, targets, 3


def test_skip_empty_pairs_drops_and_counts_them_in_every_corpus_form(en_fr, tmp_path):
    """OpenNMT-py's and Sockeye's behaviour on request: every form reads the same full pairs, in order, and says how
    many it dropped; without the option the first empty pair is an error naming its line."""
    data = en_fr["valid"]
    sources, targets, empty = with_empty_pairs(data)
    expected = {"source": list(data["source"]), "target": list(data["target"])}
    with open(tmp_path / "corpus.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"translation": {"en": s, "fr": t}}) + "\n"
                          for s, t in zip(sources, targets, strict=True))
    (tmp_path / "corpus.tsv").write_text("".join(f"{s}\t{t}\n" if (s, t) != ("", "") else "\n"
                                                 for s, t in zip(sources, targets, strict=True)), encoding="utf-8")
    (tmp_path / "corpus.en").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "corpus.fr").write_text("".join(t + "\n" for t in targets), encoding="utf-8")
    for path in ("corpus.jsonl", "corpus.tsv", "corpus"):
        with pytest.raises(DataError, match=r"line 3: the source sentence is empty"):
            load_file(str(tmp_path / path), "en", "fr")
        corpus = load_file(str(tmp_path / path), "en", "fr", skip_empty=True)
        assert corpus.data.to_dict() == expected and corpus.skipped_empty == empty, path
    folder = tmp_path / "my_corpus"
    folder.mkdir()
    (folder / "train.jsonl").write_text((tmp_path / "corpus.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "test.jsonl").write_text((tmp_path / "corpus.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(DataError, match=r"test row 3: the source sentence is empty"):
        load_corpora(str(folder), None, None, None, None, "en", "fr", skip_empty_pairs=True)
    (folder / "test.jsonl").unlink()
    corpora = load_corpora(str(folder), None, None, None, None, "en", "fr", skip_empty_pairs=True)
    assert corpora.train.data.to_dict() == expected and corpora.train.skipped_empty == empty
    rows = Dataset.from_dict({"translation": [{"en": "A dog.", "fr": "Un chien."}, None, {"en": None, "fr": "Oui."},
                                              {"en": "A cat.", "fr": "Un chat."}]})
    kept = from_dataset(rows, "hub corpus train", "en", "fr", None, None, skip_empty=True)
    assert kept.to_dict() == {"source": ["A dog.", "A cat."], "target": ["Un chien.", "Un chat."]}


def test_the_training_command_reports_skipped_pairs_and_refuses_them_beside_aligned_parses(en_fr, tmp_path):
    from hf_srcfeat.commands import train

    for folder, split in (("a", "train"), ("b", "valid")):  # two files of one name: counted by split
        sources, targets, empty = with_empty_pairs(en_fr[split])
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "corpus.en").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
        (tmp_path / folder / "corpus.fr").write_text("".join(t + "\n" for t in targets), encoding="utf-8")
    options = TINY_RUN + ["--source_lang", "en", "--target_lang", "fr", "--train_file", str(tmp_path / "a" / "corpus"),
                          "--validation_file", str(tmp_path / "b" / "corpus"), "--do_train", "--skip_empty_pairs",
                          "--max_steps", "1"]
    results = train.main(options + ["--output_dir", str(tmp_path / "run")])
    assert results["skipped_empty_pairs"] == {"train": empty, "validation": empty}
    assert results["train_examples"] == 200
    (tmp_path / "train.conllu").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit, match="--skip_empty_pairs drops pairs, and the parses of --train_source_conllu"):
        train.main(options + ["--output_dir", str(tmp_path / "run2"), "--train_source_conllu",
                              str(tmp_path / "train.conllu")])


@pytest.mark.slow
def test_a_second_run_over_the_same_corpus_and_tokenizer_reuses_the_tokenized_data(en_fr, tmp_path, monkeypatch):
    """The corpus lives in Arrow files on disk and its tokenization is cached beside them: a second run reads the
    cache files the first one wrote instead of tokenizing again."""
    import os

    from hf_srcfeat.commands import train

    files = {name: write_json_lines(tmp_path / f"{name}.jsonl", en_fr[name]) for name in ("train", "valid")}
    corpus = ["--source_lang", "en", "--target_lang", "fr", "--train_file", files["train"], "--validation_file",
              files["valid"]]
    train.main(TINY_RUN + corpus + ["--output_dir", str(tmp_path / "tokenizer"), "--do_train", "--max_steps", "1"])
    runs = [train.main(TINY_RUN + corpus + ["--output_dir", str(tmp_path / name), "--do_train",
                                            "--tokenizer_name_or_path", str(tmp_path / "tokenizer")])
            for name in ("first", "second")]
    cached = runs[0]["tokenized_cache_files"]["train"]
    assert cached and runs[1]["tokenized_cache_files"]["train"] == cached
    written = {path: os.stat(path).st_mtime_ns for path in cached}
    train.main(TINY_RUN + corpus + ["--output_dir", str(tmp_path / "third"), "--do_train",
                                    "--tokenizer_name_or_path", str(tmp_path / "tokenizer")])
    assert {path: os.stat(path).st_mtime_ns for path in cached} == written, "read, not written again"
    # ... unless the code that encodes has changed: its content is part of the encoding's fingerprint
    monkeypatch.setattr(train, "encoding_code_digest", lambda: "changed-code")
    changed = train.main(TINY_RUN + corpus + ["--output_dir", str(tmp_path / "changed"), "--do_train",
                                              "--tokenizer_name_or_path", str(tmp_path / "tokenizer")])
    assert changed["tokenized_cache_files"]["train"] != cached, "encoded again"


def test_the_encoding_code_digest_follows_the_content_of_the_modules_that_encode(tmp_path):
    import shutil

    from hf_srcfeat.commands import train

    root = Path(train.__file__).resolve().parents[2]
    for module in train.ENCODING_MODULES:
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / module, tmp_path / module)
    assert train.encoding_code_digest(tmp_path) == train.encoding_code_digest(root)
    copied = tmp_path / "moved"
    shutil.copytree(tmp_path / "hf_srcfeat", copied / "hf_srcfeat")
    with open(copied / train.ENCODING_MODULES[-1], "a") as module:
        module.write("\n# changed\n")
    assert train.encoding_code_digest(copied) != train.encoding_code_digest(root)


def test_source_parses_in_a_json_lines_field_train_without_stanza_and_are_checked(en_fr, stanza_annotator, tmp_path):
    from hf_srcfeat.commands import train
    from hf_srcfeat.conllu import conllu_lines

    def write(path, data, shift: int = 0):
        parses = stanza_annotator.annotate(list(data["source"]), show_progress=False)
        parses = parses[shift:] + parses[:shift]
        with open(path, "w", encoding="utf-8") as handle:
            for source, target, parse in zip(data["source"], data["target"], parses, strict=True):
                handle.write(json.dumps({"translation": {"en": source, "fr": target},
                                         "parse": "\n".join(conllu_lines(parse))}, ensure_ascii=False) + "\n")
        return str(path)

    train_file, valid_file = write(tmp_path / "train.jsonl", en_fr["train"]), write(tmp_path / "valid.jsonl",
                                                                                   en_fr["valid"])
    results = train.main(TINY_RUN + [
        "--output_dir", str(tmp_path / "run"), "--do_train", "--source_lang", "en", "--target_lang", "fr",
        "--train_file", train_file, "--validation_file", valid_file, "--source_parse_column", "parse",
        "--stanza_dir", str(tmp_path / "no_stanza_here")])
    assert [entry for entry in results["log_history"] if "loss" in entry or "train_loss" in entry]
    shifted = write(tmp_path / "shifted.jsonl", en_fr["valid"], shift=1)
    with pytest.raises(ValueError, match=r"shifted.jsonl row 1: the parse is of .*, the source is"):
        train.main(TINY_RUN + ["--output_dir", str(tmp_path / "bad"), "--do_train", "--source_lang", "en",
                               "--target_lang", "fr", "--train_file", train_file, "--validation_file", shifted,
                               "--source_parse_column", "parse", "--stanza_dir", str(tmp_path / "no_stanza_here")])


GOOD_LINE = '{"translation": {"en": "A dog runs.", "de": "Ein Hund rennt."}, "case": "Cap lower lower"}'


@pytest.mark.parametrize("line, message", [
    ('{"translation": {"en": 5, "de": "Fünf."}}', r"line 2: the source sentence is not text: int 5\."),
    ('{"translation": {"en": "A dog \\ud83d runs.", "de": "Ein Hund rennt."}}',
     r"line 2 holds \\ud83d, half of a UTF-16 surrogate pair without its other half"),
    ('{"translation": {"en": "A dog runs.", "de": "Ein Hund rennt."}, "case": ["Cap", "lower", "lower"]}',
     r"line 2: the 'case' field is not a string: list \['Cap', 'lower', 'lower'\]; it must hold the factor's values "
     r"separated by spaces"),
    ('{"translation": {"en": "A dog runs.", "de": "Ein Hund rennt."}}', r"line 2: no 'case' field"),
    ('{"translation": {"en": "A dog runs.", "de": "Ein Hund rennt."}, "case": "Cap lower lower",}',
     r"line 2 is not valid JSON \(.+ at column 91\)"),
    ('["A dog runs.", "Ein Hund rennt."]', r"line 2 is a JSON list, not an object"),
])
def test_json_lines_that_datasets_could_not_read_or_would_misread_are_named_by_line(line, message, tmp_path):
    """A number for a sentence, a lone surrogate escape, a factor given as a list or missing, broken JSON: each is
    named by file and line before `datasets` reads the file (which would fail without naming it, or not at all)."""
    path = tmp_path / "corpus.jsonl"
    path.write_text(f"{GOOD_LINE}\n{line}\n{GOOD_LINE}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"corpus.jsonl " + message):
        load_file(str(path), "en", "de", factor_columns=["case"])
    path.write_text(f"{GOOD_LINE}\n" + '{"translation": {"en": "A \\ud83d\\ude00 dog.", "de": "Ein Hund."}, '
                    '"case": "Cap lower lower"}\n', encoding="utf-8")
    assert load_file(str(path), "en", "de", factor_columns=["case"]).data["source"][1] == "A \U0001f600 dog.", \
        "a surrogate pair is one character"


def test_a_factor_column_of_lists_in_a_datasets_source_is_named_by_row():
    dataset = Dataset.from_dict({"translation": [{"en": "A dog runs.", "de": "Ein Hund rennt."}] * 3,
                                 "case": [["Cap", "lower", "lower"]] * 3})
    with pytest.raises(DataError, match=r"my_corpus train row 1: the 'case' field is not a string: list"):
        from_dataset(dataset, "my_corpus train", "en", "de", None, None, factor_columns=["case"])


def test_a_source_too_long_to_parse_is_named_by_row_before_any_parsing(en_fr, tmp_path):
    from hf_srcfeat.commands import train

    data = en_fr["valid"]
    sources = list(data["source"])
    sources[6] = " ".join(sources * 20)  # one 'sentence' of some 20,000 characters
    corpus = tmp_path / "train.jsonl"
    corpus.write_text("".join(json.dumps({"translation": {"en": source, "fr": target}}) + "\n"
                              for source, target in zip(sources, data["target"], strict=True)), encoding="utf-8")
    # No Stanza models there: the check comes before the parser is even loaded.
    with pytest.raises(DataError, match=r"train.jsonl row 7: the source has [\d,]+ characters, more than the parser "
                                        r"takes \(10,000"):
        train.main(TINY_RUN + ["--output_dir", str(tmp_path / "run"), "--do_train", "--source_lang", "en",
                               "--target_lang", "fr", "--train_file", str(corpus), "--stanza_dir",
                               str(tmp_path / "no_stanza_here")])
    assert not (tmp_path / "run").exists()


def test_the_training_command_reports_bad_data_and_an_interruption_in_one_line(monkeypatch, tmp_path, capsys):
    """Bad data ends the command with its message (file and line), not a traceback through datasets or torch; Ctrl-C
    with what to do next."""
    import sys

    from hf_srcfeat.commands import train

    (tmp_path / "corpus.jsonl").write_text(GOOD_LINE + "\n" + '{"translation": {"en": " ", "de": "Nichts."}}\n',
                                           encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["hf-srcfeat-train", *TINY_RUN, "--output_dir", str(tmp_path / "run"),
                                      "--do_train", "--train_file", str(tmp_path / "corpus.jsonl")])
    with pytest.raises(SystemExit) as stopped:
        train.cli()
    assert stopped.value.code == f"hf-srcfeat-train: {tmp_path / 'corpus.jsonl'} line 2: the source sentence is empty."

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "main", interrupted)
    with pytest.raises(SystemExit) as stopped:
        train.cli()
    assert stopped.value.code == 130
    assert capsys.readouterr().err == ("hf-srcfeat-train: interrupted. Resume from its newest checkpoint with the "
                                       "same options and --resume_from_checkpoint True.\n")


def test_a_carriage_return_inside_a_line_is_refused_before_it_shifts_the_pairs(tmp_path):
    (tmp_path / "pair.en").write_bytes(b"A dog.\nA cat\rsleeps.\n")
    (tmp_path / "pair.fr").write_bytes(b"Un chien.\nUn chat dort.\n")
    with pytest.raises(ValueError, match=r"pair.en line 2 holds a carriage return"):
        load_file(str(tmp_path / "pair"), "en", "fr")


@pytest.mark.slow
def test_train_py_trains_from_a_datasets_folder_and_from_tsv(en_fr, tmp_path):
    from hf_srcfeat.commands import train

    folder = tmp_path / "my_corpus"
    folder.mkdir()
    for split, name in (("train", "train"), ("validation", "valid"), ("test", "flickr")):
        write_json_lines(folder / f"{split}.jsonl", en_fr[name])
    for name in ("train", "valid"):
        with open(tmp_path / f"{name}.tsv", "w", encoding="utf-8") as handle:
            handle.writelines(f"{s}\t{t}\n" for s, t in zip(en_fr[name]["source"], en_fr[name]["target"], strict=True))
    pair = ["--source_lang", "en", "--target_lang", "fr"]
    from_folder = train.main(TINY_RUN + pair + ["--output_dir", str(tmp_path / "folder"), "--do_train",
                                                "--dataset_name", str(folder)])
    from_tsv = train.main(TINY_RUN + pair + ["--output_dir", str(tmp_path / "tsv"), "--do_train", "--train_file",
                                             str(tmp_path / "train.tsv"), "--validation_file", str(tmp_path / "valid.tsv")])
    losses = [[entry["train_loss"] for entry in run["log_history"] if "train_loss" in entry] for run in (from_folder,
                                                                                                          from_tsv)]
    assert losses[0] == losses[1] and losses[0], "the same pairs, the same seed: the same training"
    assert from_folder["data_files"][0] == f"{folder} split train"


def test_a_dataset_that_does_not_load_is_named_with_what_to_do_offline(tmp_path):
    from hf_srcfeat.data.corpora import load_named_dataset

    with pytest.raises(DataError, match="--dataset_name wmt/wmt14 --dataset_config_name de-en does not load .*; "
                                        "offline, give a local folder as --dataset_name, or the files"):
        load_named_dataset("wmt/wmt14", "de-en")  # the tests run with HF_HUB_OFFLINE
    with pytest.raises(DataError, match=f"--dataset_name {tmp_path / 'nowhere'} does not load"):
        load_named_dataset(str(tmp_path / "nowhere"))
