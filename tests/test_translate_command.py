"""`hf-srcfeat-translate`: files and streams translated line for line, with the pipeline's output, n-best lists
in the documented format, pre-parsed CoNLL-U input, and bad lines reported without shifting the rest."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_srcfeat import SrcFeatTransformerForConditionalGeneration, pipeline
from hf_srcfeat.commands.translate import main
from hf_srcfeat.conllu import conllu_lines
from hf_srcfeat.file_digests import file_digest

from .helpers import REPO, annotator_fails_on

SETTINGS = ["--num_beams", "4", "--max_new_tokens", "24"]


@pytest.fixture(scope="module")
def translator(trained_baseline, feature_tokenizer):
    model, _ = trained_baseline
    return pipeline("translation", model=model, tokenizer=feature_tokenizer, num_beams=4, max_new_tokens=24)


def write_lines(path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def translate(model_folder, tmp_path, *options: str, lines: list[str] | None = None, input_path=None) -> list[str]:
    source = input_path or write_lines(tmp_path / "input.en", lines)
    output = tmp_path / "output.de"
    assert main(["--model", str(model_folder), "--input", str(source), "--output", str(output), *SETTINGS,
                 "--quiet", *options]) == 0
    return output.read_text(encoding="utf-8").splitlines()


def test_output_equals_the_pipelines_line_for_line_and_empty_lines_stay_empty(model_folder, translator,
                                                                              test_sentences, tmp_path):
    lines = [test_sentences[0], "", test_sentences[1], "   ", *test_sentences[2:6]]
    output = translate(model_folder, tmp_path, "--batch_size", "1", "--no_sort", lines=lines)
    expected = [result["translation_text"] for result in translator([line for line in lines if line.strip()])]
    assert len(output) == len(lines)
    assert output[1] == "" and output[3] == ""
    assert [line for index, line in enumerate(output) if index not in (1, 3)] == expected


def test_batches_sorted_by_length_give_the_same_translations(model_folder, translator, test_sentences, tmp_path):
    output = translate(model_folder, tmp_path, "--batch_size", "3", lines=test_sentences)
    assert output == [result["translation_text"] for result in translator(test_sentences)]


def test_gzip_input_is_read_as_text(model_folder, translator, test_sentences, tmp_path):
    path = tmp_path / "input.en.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(test_sentences[:3]) + "\n")
    assert translate(model_folder, tmp_path, input_path=path) == \
        [result["translation_text"] for result in translator(test_sentences[:3])]


def test_a_gz_output_is_written_as_gzip_and_scored_from_it_and_a_fake_gz_is_named(model_folder, translator,
                                                                                   test_sentences, tmp_path):
    from hf_srcfeat.commands.score import main as score

    source = write_lines(tmp_path / "input.en", test_sentences[:3])
    assert main(["--model", str(model_folder), "--input", source, "--output", str(tmp_path / "output.de.gz"),
                 "--quiet", *SETTINGS]) == 0
    with gzip.open(tmp_path / "output.de.gz", "rt", encoding="utf-8") as handle:
        assert handle.read().splitlines() == [result["translation_text"] for result in translator(test_sentences[:3])]
    assert score(["--model", str(model_folder), "--source", source, "--target", str(tmp_path / "output.de.gz"),
                  "--output", str(tmp_path / "scores.tsv")]) == 0
    assert len((tmp_path / "scores.tsv").read_text().splitlines()) == 3
    (tmp_path / "plain.de.gz").write_text("Ein Hund.\nZwei Hunde.\nEine Katze.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--target .*plain.de.gz is not a whole gzip file"):
        score(["--model", str(model_folder), "--source", source, "--target", str(tmp_path / "plain.de.gz")])


def test_a_run_where_every_sentence_failed_exits_non_zero_and_text_given_as_conllu_is_named(model_folder,
                                                                                             tmp_path, capsys):
    (tmp_path / "broken.en").write_bytes(b"A dog \xff runs.\n\nTwo cats \xfe sleep.\n")
    assert main(["--model", str(model_folder), "--input", str(tmp_path / "broken.en"), "--output",
                 str(tmp_path / "broken.de"), "--quiet", *SETTINGS]) == 1
    assert "nothing was translated: every one of the 2 non-empty sentences failed" in capsys.readouterr().err
    assert (tmp_path / "broken.de").read_text() == "\n\n\n", "still one line per input line"
    text = write_lines(tmp_path / "plain.en", ["A dog runs.", "Two cats sleep."])
    with pytest.raises(SystemExit, match=r"plain.en line 1 \('A dog runs.'\) is not CoNLL-U \(no tab-separated "
                                         r"columns\); plain sentences, one a line, are --input_format text"):
        main(["--model", str(model_folder), "--input", text, "--output", str(tmp_path / "plain.de"),
              "--input_format", "conllu", "--quiet", *SETTINGS])
    assert not (tmp_path / "plain.de").exists()


def test_nbest_lists_give_n_scored_entries_per_sentence_best_first(model_folder, translator, test_sentences,
                                                                   tmp_path):
    lines = [test_sentences[0], "", test_sentences[1]]
    output = translate(model_folder, tmp_path, "--num_return_sequences", "3", lines=lines)
    entries = [line.split(" ||| ") for line in output]
    assert [int(index) for index, _, _ in entries] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    best = translator([test_sentences[0], test_sentences[1]])
    assert entries[0][1] == best[0]["translation_text"] and entries[6][1] == best[1]["translation_text"]
    for first in (0, 6):
        scores = [float(score) for _, _, score in entries[first:first + 3]]
        assert scores == sorted(scores, reverse=True) and all(score < 0 for score in scores)
    assert [(text, float(score)) for _, text, score in entries[3:6]] == [("", -math.inf)] * 3


def test_do_sample_with_n_sequences_gives_n_scored_samples_per_sentence_best_first(model_folder, test_sentences,
                                                                                   tmp_path):
    """fairseq's `--sampling --nbest N`: N draws of each sentence in the n-best format, ranked by their score, the
    same draws for the same seed."""
    sampling = ["--do_sample", "--num_beams", "1", "--num_return_sequences", "4", "--temperature", "1.5",
                "--seed", "5"]
    runs = [translate(model_folder, tmp_path, *sampling, lines=test_sentences[:3]) for _ in range(2)]
    assert runs[0] == runs[1]
    entries = [line.split(" ||| ") for line in runs[0]]
    assert [int(index) for index, _, _ in entries] == [0] * 4 + [1] * 4 + [2] * 4
    for first in (0, 4, 8):
        scores = [float(score) for _, _, score in entries[first:first + 4]]
        assert scores == sorted(scores, reverse=True) and all(score < 0 for score in scores)
    assert len({text for _, text, _ in entries}) > 3, "draws, not one translation repeated"


def test_a_model_saved_with_sampling_translates_by_search_unless_told_to_sample(model_folder, translator,
                                                                                test_sentences, tmp_path):
    """A model trained with sampled evaluations keeps do_sample in its generation config; the command still
    searches (fairseq's and Marian's decoders sample only when asked)."""
    sampled_config = shutil.copytree(model_folder, tmp_path / "sampled_config")
    settings = json.loads((sampled_config / "generation_config.json").read_text())
    (sampled_config / "generation_config.json").write_text(json.dumps({**settings, "do_sample": True, "top_k": 10}))
    runs = [translate(sampled_config, tmp_path, lines=test_sentences[:4]) for _ in range(2)]
    assert runs[0] == runs[1] == [result["translation_text"] for result in translator(test_sentences[:4])]


def test_a_line_that_is_not_utf8_is_reported_and_does_not_shift_the_rest(model_folder, translator, test_sentences,
                                                                         tmp_path, capsys):
    path = tmp_path / "input.en"
    path.write_bytes(b"".join(line.encode() + b"\n" for line in test_sentences[:2])
                     + b"Caf\xe9 au lait.\n" + test_sentences[2].encode() + b"\n")
    output = translate(model_folder, tmp_path, input_path=path)
    expected = [result["translation_text"] for result in translator(test_sentences[:3])]
    assert output == [expected[0], expected[1], "", expected[2]]
    assert "line 3: not valid UTF-8" in capsys.readouterr().err


def conllu_block(sentence) -> str:
    return "\n".join(conllu_lines(sentence)) + "\n"


def test_conllu_input_translates_the_parses_and_reports_an_invalid_tree_by_line(model_folder, translator,
                                                                                feature_tokenizer, test_sentences,
                                                                                tmp_path, capsys):
    parsed = feature_tokenizer.annotate(test_sentences[:3])
    broken = conllu_block(parsed[1]).replace("\t0\t", "\t1\t")  # the root now heads itself: no root, a cycle
    text = "# newdoc\n\n" + conllu_block(parsed[0]) + broken + conllu_block(parsed[2])
    path = tmp_path / "input.conllu"
    path.write_text(text, encoding="utf-8")
    output = translate(model_folder, tmp_path, "--input_format", "conllu", input_path=path)
    expected = [result["translation_text"] for result in translator([parsed[0], parsed[2]])]
    assert output == [expected[0], "", expected[1]]
    broken_first_line = text.splitlines().index(broken.splitlines()[0]) + 1
    assert f"line {broken_first_line}: invalid CoNLL-U sentence" in capsys.readouterr().err
    # A malformed line is named by its line in the file; a sentence with a line that is not UTF-8 is reported,
    # not translated with replacement characters
    malformed = conllu_block(parsed[1]).splitlines()
    head_line = next(index for index, line in enumerate(malformed) if not line.startswith("#"))
    malformed[head_line] = "\t".join(value if column != 6 else "X"
                                     for column, value in enumerate(malformed[head_line].split("\t")))
    latin1 = conllu_block(parsed[2]).replace("\t", "\tcafé ", 1).encode("latin-1", errors="replace")
    path.write_bytes(conllu_block(parsed[0]).encode() + "\n".join(malformed).encode() + b"\n\n" + latin1)
    output = translate(model_folder, tmp_path, "--input_format", "conllu", input_path=path)
    assert output == [expected[0], "", ""]
    errors = capsys.readouterr().err
    first_of_malformed = len(conllu_block(parsed[0]).splitlines()) + 1
    assert f"line {first_of_malformed}: invalid CoNLL-U sentence: CoNLL-U line " \
           f"{first_of_malformed + head_line}: head 'X' is not an integer" in errors
    assert "invalid CoNLL-U sentence: line " in errors and "is not valid UTF-8" in errors


def test_report_separates_parsing_from_translation(model_folder, test_sentences, tmp_path):
    report = tmp_path / "report.json"
    translate(model_folder, tmp_path, "--report_json", str(report), lines=[*test_sentences[:3], ""])
    statistics = json.loads(report.read_text())
    assert (statistics["sentences"], statistics["translated"], statistics["empty"], statistics["failed"]) == \
        (4, 3, 1, 0)
    assert statistics["parse_seconds"] > 0 and statistics["translate_seconds"] > 0 and statistics["parsed"] is True
    assert statistics["code_version"], "which code translated"
    assert statistics["model_weights"] == {"model.safetensors": file_digest(Path(model_folder) / "model.safetensors")}, \
        "which weights translated, not only the folder's name"
    assert statistics["arguments"]["num_beams"] == 4
    assert (statistics["arguments"]["device"], statistics["arguments"]["buffer_size"]) == ("cpu", 1000), \
        "what was used, not auto and unset"


def test_a_cut_short_gzip_input_is_named_and_nothing_is_written(model_folder, test_sentences, tmp_path):
    whole = gzip.compress("".join(line + "\n" for line in test_sentences[:200]).encode())
    (tmp_path / "cut.en.gz").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(SystemExit, match=r"--input .*cut.en.gz is a truncated or damaged gzip file"):
        main(["--model", str(model_folder), "--input", str(tmp_path / "cut.en.gz"), "--output",
              str(tmp_path / "out.de")])
    assert not (tmp_path / "out.de").exists()


def test_quiet_writes_nothing_to_stderr_and_leaves_transformers_progress_bars_as_they_were(
        model_folder, test_sentences, tmp_path, capsys):
    from transformers.utils import logging as transformers_logging

    assert transformers_logging.is_progress_bar_enabled()
    capsys.readouterr()
    # --quiet, parsing with a cold cache
    translate(model_folder, tmp_path, "--annotation_cache", str(tmp_path / "cold.sqlite"), lines=test_sentences[:2])
    assert capsys.readouterr().err == "", "no bar, loading the weights and parsing included"
    assert transformers_logging.is_progress_bar_enabled()


@pytest.mark.slow
def test_stdin_to_stdout_prints_only_translations(model_folder, translator, test_sentences, tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "hf_srcfeat.commands.translate", "--model", str(model_folder), *SETTINGS],
        input="\n".join(test_sentences[:2]) + "\n", capture_output=True, text=True, cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [result["translation_text"] for result in translator(test_sentences[:2])]
    assert "2 sentences (2 translated, 0 empty, 0 failed)" in completed.stderr
    assert "sentences/s" in completed.stderr


@pytest.mark.parametrize(("options", "message"), [
    (["--num_return_sequences", "5"], "needs --num_beams >= 5 (n-best lists come from beam search; or draw that many samples"),
    (["--batch_size", "0"], "--batch_size must be at least 1"),
    (["--output", "SAME"], "is the input file"),
    (["--top_p", "0"], "--top_p must be a number in (0, 1], got 0.0"),
    (["--top_k", "5"], "top_k only acts when sampling: add do_sample"),
    (["--do_sample"], "--do_sample draws each translation token by token: give --num_beams 1"),
    (["--repetition_penalty", "-1"], "--repetition_penalty must be a number above 0, got -1.0"),
    (["--seed", "3"], "--seed makes sampling reproducible: it needs --do_sample"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    (["--backend", "ctranslate2", "--tokenizer", "runs/other"], "--tokenizer applies to --backend transformers"),
])
def test_bad_options_are_refused_with_a_message_naming_them(model_folder, tmp_path, capsys, options, message):
    source = write_lines(tmp_path / "input.en", ["A dog runs."])
    options = [source if option == "SAME" else option for option in options]
    with pytest.raises(SystemExit):
        main(["--model", str(model_folder), "--input", source, *SETTINGS, *options])
    assert message in capsys.readouterr().err
    assert (tmp_path / "input.en").read_text() == "A dog runs.\n"


def test_a_tokenizer_of_another_model_is_refused_in_one_line_by_translate_and_score(model_folder, tmp_path):
    from hf_srcfeat.commands.score import main as score

    other = tmp_path / "other_model"
    shutil.copytree(model_folder, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "tokenizer_fingerprint": "0123456789abcdef"}))
    source = write_lines(tmp_path / "input.en", ["A dog runs."])
    target = write_lines(tmp_path / "input.de", ["Ein Hund rennt."])
    for command, arguments in ((main, ["--input", source, "--output", str(tmp_path / "output.de"), *SETTINGS]),
                               (score, ["--source", source, "--target", target])):
        with pytest.raises(SystemExit, match="this tokenizer does not belong to this model"):
            command(["--model", str(other), "--tokenizer", str(model_folder), *arguments])
    assert not (tmp_path / "output.de").exists()


def test_threads_set_pytorchs_and_the_blass_threads_and_translate_as_the_pipeline(model_folder, translator,
                                                                                   test_sentences, tmp_path):
    import torch
    from threadpoolctl import threadpool_info

    from hf_srcfeat.single_row_products import set_cpu_threads

    try:
        output = translate(model_folder, tmp_path, "--threads", "2", "--device", "cpu", lines=test_sentences[:4])
        assert torch.get_num_threads() == 2
        assert all(library["num_threads"] == 2 for library in threadpool_info() if library["user_api"] == "blas")
    finally:
        set_cpu_threads(1)  # as conftest set them
    assert output == [result["translation_text"] for result in translator(test_sentences[:4])]


def test_cuda_on_a_machine_without_it_is_a_clear_error(model_folder, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="no CUDA device"):
        main(["--model", str(model_folder), "--input", write_lines(tmp_path / "in.en", ["A dog."]), "--device", "cuda"])


def test_a_sentence_the_annotator_fails_on_is_translated_without_a_parse(model_folder, test_sentences, tmp_path,
                                                                         monkeypatch, capsys):
    annotator_fails_on(monkeypatch)
    report = tmp_path / "report.json"
    lines = [test_sentences[0], "FAIL " + test_sentences[1], test_sentences[2]]
    output = translate(model_folder, tmp_path, "--report_json", str(report), lines=lines)
    assert len(output) == 3 and all(output), "every line translated, the failed parse too"
    assert output[0] == translate(model_folder, tmp_path, lines=lines[:1])[0], "the others as before"
    assert "line 2: the annotator failed: RuntimeError: the parser gave up; translated without a parse" in \
        capsys.readouterr().err
    statistics = json.loads(report.read_text())
    assert statistics["failed"] == 0 and len(statistics["unparsed"]) == 1


def test_the_length_penalty_reaches_beam_search(model_folder, translator, test_sentences, tmp_path):
    penalised = translate(model_folder, tmp_path, "--length_penalty", "0.6", lines=test_sentences[:6])
    assert penalised == [result["translation_text"] for result in translator(test_sentences[:6], length_penalty=0.6)]


def test_an_unreadable_annotation_cache_is_said_once_and_the_run_parses_without_it(model_folder, test_sentences,
                                                                                   tmp_path, capsys):
    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(b"not a database " * 100)
    report = tmp_path / "report.json"
    lines = test_sentences[:4]
    output = translate(model_folder, tmp_path, "--annotation_cache", str(cache), "--buffer_size", "2",
                       "--report_json", str(report), lines=lines)
    assert output == translate(model_folder, tmp_path, lines=lines)
    error = capsys.readouterr().err
    assert error.count(f"annotation cache {cache} is unreadable") == 1, error
    assert "parsing without the annotation cache" in error and "without a parse" not in error
    assert json.loads(report.read_text())["unparsed"] == [], "every line was parsed"
    assert cache.read_bytes() == b"not a database " * 100, "the user's file is left as it was"


def test_a_parser_that_cannot_load_stops_the_run_instead_of_translating_everything_unparsed(
        model_folder, test_sentences, tmp_path, monkeypatch):
    from hf_srcfeat import StanzaAnnotator

    monkeypatch.setattr(StanzaAnnotator, "load", lambda self: (_ for _ in ()).throw(OSError("depparse.pt damaged")))
    source = write_lines(tmp_path / "input.en", test_sentences[:3])
    with pytest.raises(SystemExit, match=r"the stanza annotator \(en\) cannot load: OSError: depparse.pt damaged\. "
                                         r"Nothing can be parsed.*--no_parse"):
        main(["--model", str(model_folder), "--input", source, "--output", str(tmp_path / "output.de"), *SETTINGS,
              "--quiet", "--annotation_cache", str(tmp_path / "cold.sqlite")])
    assert not (tmp_path / "output.de").exists()


def test_a_stanza_folder_without_the_models_language_is_named_by_translate_and_score(model_folder, test_sentences,
                                                                                     tmp_path):
    from hf_srcfeat.commands.score import main as score_main

    (tmp_path / "stanza_fr_only" / "fr").mkdir(parents=True)
    source = write_lines(tmp_path / "input.en", test_sentences[:2])
    target = write_lines(tmp_path / "input.de", ["Zwei Hunde.", "Ein Mann."])
    expected = r"the tokenizer's stanza annotator \(en\) cannot be made: No Stanza models for 'en' in .*stanza_fr_only"
    with pytest.raises(SystemExit, match=expected + r".*Nothing can be parsed, so nothing is translated; give "
                                                    r"Stanza's models \(--stanza_dir"):
        main(["--model", str(model_folder), "--input", source, "--output", str(tmp_path / "output.de"), *SETTINGS,
              "--quiet", "--stanza_dir", str(tmp_path / "stanza_fr_only")])
    with pytest.raises(SystemExit, match=expected + r".*nothing is scored.*--source_format conllu"):
        score_main(["--model", str(model_folder), "--source", source, "--target", target, "--quiet",
                    "--stanza_dir", str(tmp_path / "stanza_fr_only")])
    assert not (tmp_path / "output.de").exists()


def test_decoding_options_reach_generate_and_sampling_with_a_seed_is_reproducible(model_folder, translator,
                                                                                 test_sentences, tmp_path):
    lines = test_sentences[:6]
    blocked = translate(model_folder, tmp_path, "--no_repeat_ngram_size", "2", "--repetition_penalty", "1.3",
                        lines=lines)
    assert blocked == [result["translation_text"] for result in translator(lines, no_repeat_ngram_size=2,
                                                                          repetition_penalty=1.3)]
    for line in blocked:
        words = line.split()
        bigrams = list(zip(words, words[1:], strict=False))
        assert len(bigrams) == len(set(bigrams)), f"a repeated bigram in {line!r}"
    searched = []
    search = SrcFeatTransformerForConditionalGeneration._beam_search

    def recorded_search(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs):
        searched.append(generation_config.early_stopping)
        return search(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SrcFeatTransformerForConditionalGeneration, "_beam_search", recorded_search)
        assert translate(model_folder, tmp_path, "--early_stopping", lines=lines) == \
            [result["translation_text"] for result in translator(lines, early_stopping=True)]
        translate(model_folder, tmp_path, lines=lines[:1])
    assert searched[0] is True and searched[-1] is False, "--early_stopping reaches the beam search, else its default"
    with pytest.raises(SystemExit):
        translate(model_folder, tmp_path, "--early_stopping", "--num_beams", "1", lines=lines)
    sampling = ["--do_sample", "--top_k", "20", "--temperature", "1.5", "--seed", "7", "--num_beams", "1"]
    settings = ["--max_new_tokens", "24", "--quiet"]
    outputs = []
    for run in range(2):
        output = tmp_path / f"sampled{run}.de"
        assert main(["--model", str(model_folder), "--input", write_lines(tmp_path / "in.en", lines), "--output",
                     str(output), *settings, *sampling]) == 0
        outputs.append(output.read_text(encoding="utf-8").splitlines())
    assert outputs[0] == outputs[1], "the same seed gives the same samples"
    assert outputs[0] != translate(model_folder, tmp_path, lines=lines), "sampling is not beam search"


def test_int8_quantization_translates_mostly_as_float32_and_is_refused_where_it_cannot_run(
        model_folder, translator, test_sentences, tmp_path, capsys):
    lines = test_sentences[:12]
    quantized = translate(model_folder, tmp_path, "--quantize", "int8", lines=lines)
    expected = [result["translation_text"] for result in translator(lines)]
    assert len(quantized) == len(lines) and all(quantized)
    # How many translations stay identical depends on the processor's int8 kernels (VNNI or not) on a model this
    # small; their characters stay close to float32's everywhere.
    import sacrebleu

    closeness = sacrebleu.corpus_chrf(quantized, [expected]).score
    assert closeness >= 60, (closeness, quantized, expected)
    source = write_lines(tmp_path / "input.en", ["A dog runs."])
    for options, named in ((["--dtype", "bfloat16"], "--dtype bfloat16"),
                           (["--backend", "ctranslate2"], "--compute_type int8")):
        with pytest.raises(SystemExit):
            main(["--model", str(model_folder), "--input", source, "--quantize", "int8", *options])
        assert named in capsys.readouterr().err


def test_quantization_covers_the_linear_layers_but_leaves_tied_embeddings():
    import torch

    from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration
    from hf_srcfeat.linear import Linear
    from hf_srcfeat.quantization import quantize_linear_layers

    def config() -> DepsSanConfig:
        return DepsSanConfig(vocab_size=100, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)

    model = DepsSanForConditionalGeneration(config()).eval()
    linear_count = sum(isinstance(module, torch.nn.Linear) for module in model.modules())
    embedding = model.get_input_embeddings().weight
    quantize_linear_layers(model)
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    assert sum(isinstance(module, dynamic) for module in model.modules()) >= linear_count - 1
    assert model.get_input_embeddings().weight is embedding
    assert type(model.get_output_embeddings()) is Linear, "the float32 output layer keeps the backbone's kernels"
    assert model.get_output_embeddings().weight is embedding
    with pytest.raises(ValueError, match="float32 weights"):
        quantize_linear_layers(DepsSanForConditionalGeneration(config()).to(torch.bfloat16))


@pytest.mark.parametrize("command", ["translate", "score", "export_ct2", "average_checkpoints"])
def test_ctrl_c_ends_a_command_with_a_line_and_the_shells_status_not_a_traceback(command, monkeypatch, capsys):
    import importlib

    module = importlib.import_module(f"hf_srcfeat.commands.{command}")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module.argparse.ArgumentParser, "parse_args", interrupted)
    with pytest.raises(SystemExit) as ended:
        module.main(["--help"])
    assert ended.value.code == 130
    assert capsys.readouterr().err.strip().endswith("interrupted.")
