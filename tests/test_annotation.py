"""Annotation: the CoNLL-U reader on gold UD EWT trees, Stanza on real Multi30k text, the on-disk cache,
and errors that name the bad sentence."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from hf_srcfeat.annotation import (
    AnnotatedSentence,
    StanzaAnnotator,
    annotation_scores,
    read_conllu,
    write_conllu,
)


def test_conllu_reader_reads_every_gold_ewt_dev_sentence_as_one_tree(ewt_dir):
    sentences = list(read_conllu(ewt_dir / "en_ewt-ud-dev.conllu.gz"))
    assert len(sentences) == 2001
    first = sentences[0]
    assert first.sentence_id and first.text
    assert all(sum(word.head == 0 for word in sentence.words) == 1 for sentence in sentences)


def test_conllu_reader_keeps_syntactic_words_and_skips_multiword_token_lines():
    lines = [
        "# sent_id = mwt-1", "# text = I don't know.",
        "1\tI\tI\tPRON\tPRP\t_\t4\tnsubj\t_\t_",
        "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_",
        "2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_",
        "3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_",
        "4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_",
        "5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_", "",
    ]
    (sentence,) = read_conllu(lines)
    assert [word.text for word in sentence.words] == ["I", "do", "n't", "know", "."]
    assert sentence.heads == [4, 4, 4, 0, 4] and sentence.words[2].lemma == "not"
    assert [word.space_after for word in sentence.words] == [True, False, True, True, True]


def spell(sentence: AnnotatedSentence) -> str:
    return "".join(word.text + (" " if word.space_after else "") for word in sentence.words).strip()


def test_written_conllu_reads_back_to_the_same_sentences(ewt_dev_sample, tmp_path):
    path = tmp_path / "parsed.conllu.gz"
    assert write_conllu(ewt_dev_sample, path) == len(ewt_dev_sample)
    again = list(read_conllu(path))
    assert again == ewt_dev_sample
    assert [s.text for s in again] == [s.text for s in ewt_dev_sample]
    assert [s.sentence_id for s in again] == [s.sentence_id for s in ewt_dev_sample]


def test_morphological_features_are_read_from_conllu_and_from_the_parser(ewt_dev_sample, stanza_annotator):
    first = ewt_dev_sample[0]
    assert any(word.feats not in ("_", "") and "=" in word.feats for word in first.words), "EWT gold FEATS"
    parsed = stanza_annotator.annotate(["The dogs were running."], show_progress=False)[0]
    by_text = {word.text: word.feats for word in parsed.words}
    assert "Number=Plur" in by_text["dogs"] and "Tense=Past" in by_text["were"]


def test_an_error_in_a_conllu_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_text("1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.conllu: CoNLL-U line 2 has 4 columns"):
        list(read_conllu(path))


def test_word_spacing_from_conllu_reproduces_the_raw_text_of_every_gold_ewt_dev_sentence(ewt_dir):
    sentences = list(read_conllu(ewt_dir / "en_ewt-ud-dev.conllu.gz"))
    assert [spell(sentence) for sentence in sentences] == [sentence.text for sentence in sentences]


@pytest.mark.parametrize(("heads", "message"), [
    ([2, 0, 5], "outside 0..3"),
    ([0, 0, 2], "2 roots"),
    ([2, 3, 2], "0 roots"),
    ([0, 3, 2], "cycle"),
])
def test_malformed_trees_raise_errors_naming_the_sentence(heads, message):
    with pytest.raises(ValueError, match=message) as error:
        AnnotatedSentence.from_features(["a", "b", "c"], ["X"] * 3, ["a", "b", "c"], ["dep"] * 3, heads,
                                         sentence_id="train-17")
    assert "train-17" in str(error.value)


def test_pre_parsed_features_of_the_wrong_length_raise_an_error_naming_the_sentence():
    with pytest.raises(ValueError, match=r"train-4: features do not match its words.*'upos': 2"):
        AnnotatedSentence.from_features(["Dogs", "bark", "."], ["NOUN", "VERB"], ["dog", "bark", "."],
                                         ["nsubj", "root", "punct"], [2, 0, 2], sentence_id="train-4")


def test_stanza_annotates_each_raw_text_as_one_sentence_with_all_features(stanza_annotator, test_sentences):
    texts = test_sentences[:4] + ["Two dogs play. They don't bite."]
    sentences = stanza_annotator.annotate(texts, show_progress=False)
    assert len(sentences) == len(texts)
    for text, sentence in zip(texts, sentences, strict=True):
        assert sentence.text == text
        assert all(word.upos and word.lemma and word.deprel for word in sentence.words)
    assert [w.text for w in sentences[-1].words][-4:] == ["do", "n't", "bite", "."]
    assert [spell(sentence) for sentence in sentences] == texts, "spacing is kept, multi-word tokens touch"
    dogs = sentences[-1].words[1]
    assert (dogs.text, dogs.upos, dogs.lemma) == ("dogs", "NOUN", "dog")


def test_words_only_segments_into_the_parsers_words_without_tagging_or_parsing(stanza_annotator, multi30k_dir,
                                                                               tmp_path):
    from hf_srcfeat.data.multi30k import load_multi30k

    texts = list(load_multi30k("val", "en", "de", data_dir=multi30k_dir, limit=200)["source"])
    texts.append("Two dogs play. They don't bite.")
    parsed = stanza_annotator.annotate(texts, show_progress=False)
    segmenter = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=tmp_path / "cache.sqlite")
    segmenter = segmenter.with_words_only()
    segmented = segmenter.annotate(texts, show_progress=False)
    for full, words in zip(parsed, segmented, strict=True):
        assert [(w.text, w.space_after) for w in words.words] == [(w.text, w.space_after) for w in full.words]
        assert {(w.upos, w.deprel) for w in words.words} == {("X", "dep")}, "no tags, no relations"
    assert set(segmenter.pipeline.processors) == {"tokenize", "mwt"}, "Stanza tokenizes only"
    assert segmenter.identity != stanza_annotator.identity, "cached apart from full parses"


def test_a_second_annotator_reads_the_cache_instead_of_parsing_again(stanza_annotator, test_sentences, tmp_path):
    first = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=tmp_path / "cache.sqlite")
    expected = first.annotate(test_sentences[:3], show_progress=False)
    second = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=tmp_path / "cache.sqlite")
    assert second.annotate(test_sentences[:3], show_progress=False) == expected
    assert second._pipeline is None, "the cached corpus must not load Stanza"
    assert len(second.cache) == 3
    other = StanzaAnnotator(model_dir=stanza_annotator.model_dir, pretokenized=True,
                            cache_path=tmp_path / "cache.sqlite")
    assert other.identity != second.identity, "a different annotator must not reuse these annotations"


def test_a_damaged_cache_row_is_parsed_again_and_replaced(stanza_annotator, test_sentences, tmp_path):
    path = tmp_path / "cache.sqlite"
    expected = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=path).annotate(
        test_sentences[:3], show_progress=False)
    with sqlite3.connect(path) as connection:  # rows cut short, as a crash mid-write could leave them
        connection.execute("UPDATE annotations SET value = substr(value, 1, 40)")
    again = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=path)
    assert again.annotate(test_sentences[:3], show_progress=False) == expected
    assert again._pipeline is not None, "the damaged rows were parsed again"
    third = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=path)
    assert third.annotate(test_sentences[:3], show_progress=False) == expected
    assert third._pipeline is None, "and their rows replaced"


def test_a_cache_folder_that_cannot_be_made_is_a_warning_and_parsing_goes_on(stanza_annotator, test_sentences):
    annotator = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path="/proc/self/no/cache.sqlite")
    with pytest.warns(UserWarning, match=r"annotation cache /proc/self/no/cache.sqlite cannot be used"):
        sentences = annotator.annotate(test_sentences[:2], show_progress=False)
    assert [sentence.text for sentence in sentences] == test_sentences[:2]


def test_a_parser_that_cannot_load_is_an_error_naming_it(stanza_annotator, test_sentences, tmp_path, monkeypatch):
    from hf_srcfeat.annotator import AnnotatorLoadError

    annotator = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=tmp_path / "cache.sqlite")
    monkeypatch.setattr(StanzaAnnotator, "load", lambda self: (_ for _ in ()).throw(OSError("depparse.pt damaged")))
    with pytest.raises(AnnotatorLoadError, match=r"the stanza annotator \(en\) cannot load: OSError: depparse.pt"):
        annotator.annotate(test_sentences[:1], show_progress=False)


def test_the_cache_follows_the_model_files_content_not_their_folder_or_dates(stanza_annotator, tmp_path):
    copied = tmp_path / "copied_models"
    shutil.copytree(stanza_annotator.model_dir, copied)  # new folder, new modification times
    original = StanzaAnnotator(model_dir=stanza_annotator.model_dir, use_cache=False)
    assert StanzaAnnotator(model_dir=copied, use_cache=False).identity == original.identity
    with open(next((copied / "en").rglob("*.pt")), "ab") as model_file:
        model_file.write(b"retrained")
    assert StanzaAnnotator(model_dir=copied, use_cache=False).identity != original.identity


def test_empty_text_and_missing_models_raise_clear_errors(stanza_annotator, tmp_path):
    with pytest.raises(ValueError, match="text 1 is empty or whitespace only"):
        stanza_annotator.annotate(["A dog.", "   "])
    with pytest.raises(FileNotFoundError, match="No Stanza models for 'en'"):
        StanzaAnnotator(model_dir=tmp_path, use_cache=False)


@pytest.mark.slow
def test_stanza_tags_gold_tokenized_ewt_test_sentences_mostly_right(ewt_dir, tmp_path):
    gold = list(read_conllu(ewt_dir / "en_ewt-ud-test.conllu.gz"))[:60]
    annotator = StanzaAnnotator(pretokenized=True, use_cache=False)
    predicted = annotator.annotate([" ".join(w.text for w in sentence.words) for sentence in gold],
                                   show_progress=False)
    scores = annotation_scores(gold, predicted)
    # The shared models measure UPOS 90.7 and UAS 79.5 on all of EWT test.
    assert scores["upos"] > 80 and scores["uas"] > 65, scores
    assert annotation_scores(gold[:2], gold[:2])["las"] == 100.0


@pytest.mark.slow
def test_two_processes_parse_as_one_does_and_the_helper_stays_up(stanza_annotator, test_sentences, tmp_path):
    texts = test_sentences[:12]
    parallel = StanzaAnnotator(model_dir=stanza_annotator.model_dir, cache_path=tmp_path / "cold.sqlite",
                               batch_size=2)  # six chunks, shared between this process and one helper
    assert parallel.annotate(texts[:8], show_progress=False, num_proc=2) == stanza_annotator.annotate(texts[:8])
    helpers = parallel._helpers
    assert parallel.annotate(texts, show_progress=False, num_proc=2) == stanza_annotator.annotate(texts)
    assert parallel._helpers is helpers, "the next call reuses the helper, whose models are loaded"
    assert len(parallel.cache) == len(texts), "every parse is cached"
    parallel.close()
    assert parallel._helpers is None


@pytest.mark.slow
def test_a_helper_that_cannot_load_its_models_fails_the_call(test_sentences, tmp_path):
    from hf_srcfeat.annotator import AnnotatorLoadError

    models = tmp_path / "stanza"
    (models / "en").mkdir(parents=True)  # a folder without the models: nothing can load
    annotator = StanzaAnnotator(model_dir=models, use_cache=False, batch_size=2)
    with pytest.raises(AnnotatorLoadError):
        annotator.annotate(test_sentences[:6], show_progress=False, num_proc=2)
    annotator.close()


def test_sharded_annotation_merges_into_what_one_process_writes(stanza_annotator, multi30k_dir, tmp_path):
    import gzip

    from hf_srcfeat.commands.annotate import main

    from .test_safe_writing import gzip_header_name

    lines = 25
    with gzip.open(multi30k_dir / "val.en.gz", "rt", encoding="utf-8") as handle, \
            gzip.open(tmp_path / "val.en.gz", "wt", encoding="utf-8") as target:
        target.writelines(line for _, line in zip(range(lines), handle, strict=False))
    common = ["--input", str(tmp_path / "val.en.gz"), "--stanza_dir", str(stanza_annotator.model_dir),
              "--annotation_cache", str(stanza_annotator.cache.path)]
    main([*common, "--output", str(tmp_path / "whole.conllu.gz")])
    for shard in ("1", "0"):
        main([*common, "--output", str(tmp_path / "sharded.conllu.gz"), "--shard_index", shard, "--num_shards", "2",
              "--report_json", str(tmp_path / "report.json")])
    reports = [json.loads((tmp_path / f"report.shard-{shard}-of-2.json").read_text()) for shard in (0, 1)]
    assert [report["sentences"] for report in reports] == [13, 12], "each shard reports its own part"
    assert reports[1]["output"].endswith("sharded.conllu.shard-1-of-2.gz") and reports[1]["code_version"]
    whole = list(read_conllu(tmp_path / "whole.conllu.gz"))
    assert list(read_conllu(tmp_path / "sharded.conllu.gz")) == whole and len(whole) == lines
    assert gzip_header_name(tmp_path / "sharded.conllu.gz") == b"sharded.conllu", "its own name, not a temporary one"
    assert not list(tmp_path.glob("*.conllu.shard-*")), "the shards are merged and removed"
    # A shard left by an earlier run (another input, or another parser) is never merged: it is waited on until its
    # rank writes it again (and named when the wait ends)
    with gzip.open(tmp_path / "other.en.gz", "wt", encoding="utf-8") as target:
        target.writelines(f"{parse.text} Again.\n" for parse in whole)
    other = [*common[2:], "--input", str(tmp_path / "other.en.gz"), "--output", str(tmp_path / "stale.conllu.gz")]
    main([*other, "--shard_index", "1", "--num_shards", "2"])
    stale = tmp_path / "stale.conllu.shard-1-of-2.gz"
    rank_0 = [*common, "--output", str(tmp_path / "stale.conllu.gz"), "--shard_index", "0", "--num_shards", "2",
              "--merge_timeout", "1"]
    with pytest.raises(SystemExit, match=f"did not appear within 1 s; not merging \\({stale}: of another input or "
                                         "parser, left by an earlier run"):
        main(rank_0)
    assert not (tmp_path / "stale.conllu.gz").exists() and stale.exists()
    main([*common, "--output", str(tmp_path / "stale.conllu.gz"), "--shard_index", "1", "--num_shards", "2"])
    main(rank_0)  # rank 1 has written it again
    assert list(read_conllu(tmp_path / "stale.conllu.gz")) == whole
    # The same lines parsed by another parser: the shard names another annotator
    main([*common, "--output", str(tmp_path / "parser.conllu.gz"), "--shard_index", "1", "--num_shards", "2"])
    parser_shard = tmp_path / "parser.conllu.shard-1-of-2.gz"
    with gzip.open(parser_shard, "rt", encoding="utf-8") as handle:
        first, rest = handle.readline(), handle.read()
    with gzip.open(parser_shard, "wt", encoding="utf-8") as handle:
        handle.write(first.replace("annotator ", "annotator another-parser-") + rest)
    with pytest.raises(SystemExit, match=f"{parser_shard}: of another input or parser"):
        main([*common, "--output", str(tmp_path / "parser.conllu.gz"), "--shard_index", "0", "--num_shards", "2",
              "--merge_timeout", "1"])
    # The merge itself still checks each parse against its line (shards without the first line, or edited)
    from hf_srcfeat.commands.annotate import checked_shard_parses

    with pytest.raises(SystemExit, match="parse 1 is of .*Again.*, but val.en line 1 is"):
        list(checked_shard_parses([iter([dataclasses.replace(whole[0], text=whole[0].text + " Again.")])],
                                  ["shard"], [whole[0].text], "val.en"))
    with pytest.raises(SystemExit, match="holds 0 parses, but shard 0 of val.en has 1 lines"):
        list(checked_shard_parses([iter([])], ["shard"], [whole[0].text], "val.en"))


def test_the_annotate_command_parses_and_writes_a_corpus_chunk_by_chunk(stanza_annotator, test_sentences, tmp_path,
                                                                       monkeypatch):
    from hf_srcfeat.commands import annotate

    lines = [*test_sentences[:7], " ".join(test_sentences[:5])]  # the last one parsed in pieces
    (tmp_path / "input.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    arguments = ["--input", str(tmp_path / "input.en"), "--stanza_dir", str(stanza_annotator.model_dir),
                 "--annotation_cache", str(stanza_annotator.cache.path), "--max_characters", "200"]
    annotate.main([*arguments, "--output", str(tmp_path / "whole.conllu")])
    calls = []
    parse = StanzaAnnotator.annotate
    monkeypatch.setattr(StanzaAnnotator, "annotate", lambda self, texts, **options: calls.append(len(texts)) or
                        parse(self, texts, **options))
    monkeypatch.setattr(annotate, "CHUNK_LINES", 4)
    annotate.main([*arguments, "--output", str(tmp_path / "chunked.conllu")])
    assert calls[0] == 4 and calls[1] > 4 and len(calls) == 2, "two chunks of four lines (the long one in pieces)"
    assert list(read_conllu(tmp_path / "chunked.conllu")) == list(read_conllu(tmp_path / "whole.conllu"))
    assert [parse.text for parse in read_conllu(tmp_path / "chunked.conllu")] == lines


def test_a_line_too_long_to_parse_at_once_is_parsed_in_pieces_and_the_rest_stays_aligned(
        stanza_annotator, test_sentences, tmp_path, capsys):
    from hf_srcfeat.commands.annotate import main

    long = " ".join(test_sentences[2:12])
    lines = [test_sentences[0], long, test_sentences[1]]
    (tmp_path / "input.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = tmp_path / "report.json"
    assert main(["--input", str(tmp_path / "input.en"), "--output", str(tmp_path / "out.conllu"),
                 "--stanza_dir", str(stanza_annotator.model_dir), "--annotation_cache", str(stanza_annotator.cache.path),
                 "--max_characters", "300", "--report_json", str(report)]) == 0
    parses = list(read_conllu(tmp_path / "out.conllu"))
    assert [parse.text for parse in parses] == lines, "one sentence per input line, in order"
    assert parses[0] == stanza_annotator.annotate(lines[:1], show_progress=False)[0]
    assert len(parses[1].words) >= len(long.split()), "every word of the long line is parsed"
    assert sum(word.head == 0 for word in parses[1].words) == 1, "the pieces form one tree"
    pieces = (len(long) + 299) // 300
    message = capsys.readouterr().err
    assert f"input.en line 2 has {len(long):,} characters, more than the parser takes at once (300)" in message
    assert json.loads(report.read_text())["long_lines"][0]["line"] == 2
    assert json.loads(report.read_text())["long_lines"][0]["pieces"] >= pieces


def test_the_annotate_command_names_a_missing_input_before_loading_a_parser(tmp_path, capsys):
    from hf_srcfeat.commands.annotate import main

    for missing, what in ((tmp_path / "nosuch.txt", "no such file"), (tmp_path, "a folder")):
        with pytest.raises(SystemExit):
            main(["--input", str(missing), "--output", str(tmp_path / "out.conllu")])
        assert f"--input {missing}: {what}" in capsys.readouterr().err
    (tmp_path / "empty.en").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit, match="empty.en holds no sentence"):
        main(["--input", str(tmp_path / "empty.en"), "--output", str(tmp_path / "out.conllu")])
    (tmp_path / "input.en").write_text("A dog runs.\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["--input", str(tmp_path / "input.en"), "--output", "-"])
    assert "give paths, not - for stdin or stdout" in capsys.readouterr().err
    assert not (tmp_path / "out.conllu").exists() and not Path("-").exists()


def test_the_annotate_command_refuses_a_cache_that_is_another_file_and_names_missing_models_in_a_line(
        stanza_annotator, test_sentences, tmp_path, capsys):
    from hf_srcfeat.commands.annotate import main

    source = tmp_path / "input.en"
    source.write_text("\n".join(test_sentences[:2]) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit):  # the input given as the cache too (a cache message would advise deleting it)
        main(["--input", str(source), "--output", str(tmp_path / "out.conllu"), "--annotation_cache", str(source)])
    assert f"annotation cache {source} is a text file, not an SQLite parse cache" in capsys.readouterr().err
    assert source.read_text(encoding="utf-8") == "\n".join(test_sentences[:2]) + "\n"
    for options, message in ((["--language", "de"], "No Stanza models for 'de' in"),
                             (["--stanza_dir", str(tmp_path / "nowhere")], "No Stanza models for 'en' in")):
        with pytest.raises(SystemExit, match=f"^hf-srcfeat-annotate: {message}"):
            main(["--input", str(source), "--output", str(tmp_path / "out.conllu"), "--stanza_dir",
                  str(stanza_annotator.model_dir), "--annotation_cache", str(tmp_path / "cache.sqlite"), *options])
    (tmp_path / "empty_models" / "en").mkdir(parents=True)  # a language folder without Stanza's resources
    with pytest.raises(SystemExit, match="^hf-srcfeat-annotate: the stanza annotator \\(en\\) cannot load"):
        main(["--input", str(source), "--output", str(tmp_path / "out.conllu"), "--stanza_dir",
              str(tmp_path / "empty_models"), "--annotation_cache", str(tmp_path / "cache.sqlite")])
    assert not (tmp_path / "out.conllu").exists()


def test_the_annotate_command_parses_without_a_damaged_cache_and_says_so(stanza_annotator, test_sentences, tmp_path,
                                                                         capsys):
    from hf_srcfeat.commands.annotate import main

    (tmp_path / "input.en").write_text("\n".join(test_sentences[:3]) + "\n", encoding="utf-8")
    (tmp_path / "damaged.sqlite").write_bytes(bytes(range(256)) * 16)  # header and all
    assert main(["--input", str(tmp_path / "input.en"), "--output", str(tmp_path / "out.conllu"), "--stanza_dir",
                 str(stanza_annotator.model_dir), "--annotation_cache", str(tmp_path / "damaged.sqlite")]) == 0
    assert "parsing without the annotation cache for this run" in capsys.readouterr().err
    assert [parse.text for parse in read_conllu(tmp_path / "out.conllu")] == test_sentences[:3]
