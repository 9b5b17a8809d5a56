"""What ordinary use and bad input get: the promises of the reliability issue, one test per failure found by trying
to break the library (each failed before its fix). Translation-command input (bad lines, bad options) is in
test_translate_command.py; half precision in test_half_precision.py."""

from __future__ import annotations

import json
import re
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from transformers import AutoTokenizer

from hf_srcfeat import StanzaAnnotator, pipeline

from .conftest import STANZA_DIR


@pytest.fixture
def translator_with_cache(trained_baseline, feature_tokenizer, tmp_path):
    """The pipeline over a tokenizer whose annotator has a cache of its own (created in this thread)."""
    model, _ = trained_baseline
    tokenizer = AutoTokenizer.from_pretrained(_saved(feature_tokenizer, tmp_path))
    tokenizer.annotator = StanzaAnnotator(model_dir=STANZA_DIR, cache_path=tmp_path / "cache.sqlite")
    return pipeline("translation", model=model, tokenizer=tokenizer, num_beams=2, max_new_tokens=12)


def _saved(tokenizer, folder):
    tokenizer.save_pretrained(folder)
    return folder


def test_a_tokenizer_saved_after_a_truncating_call_encodes_long_sources_with_every_feature(
        feature_tokenizer, ewt_dev_sample, tmp_path):
    feature_tokenizer(text_target=["Zwei Hunde spielen im Schnee."], truncation=True, max_length=16)
    feature_tokenizer.save_pretrained(tmp_path)
    state = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert state["truncation"] is None and state["padding"] is None
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    longest = max(ewt_dev_sample, key=lambda sentence: len(sentence.words))
    for tokenizer in (feature_tokenizer, loaded):
        encoded = tokenizer(annotations=longest)
        assert len(encoded["input_ids"]) > 16
        for name in ("pos_ids", "lemma_ids", "deprel_ids", "subword_tag_ids", "word_ids", "phrase_ids"):
            assert len(encoded[name]) == len(encoded["input_ids"]), name
        assert len(encoded["dep_distance"]) == len(encoded["input_ids"])


@pytest.mark.slow
def test_the_tokenizer_and_pipeline_serve_four_threads_at_once(translator_with_cache, test_sentences):
    translator, sentences = translator_with_cache, test_sentences[:8]
    expected = [translator(sentence)[0] for sentence in sentences]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda sentence: translator(sentence)[0], sentences))
        fresh = list(pool.map(lambda text: translator.tokenizer.annotate([text])[0], [s + " Again." for s in sentences]))
    assert results == expected
    assert [sentence.text for sentence in fresh] == [s + " Again." for s in sentences]


@pytest.mark.parametrize("repo_id", ["org/..", "../..", "org/../other", "org/name/extra", "org--x/name", "name"])
def test_publishing_refuses_repo_ids_the_hub_would_refuse_and_deletes_nothing(repo_id, tmp_path):
    from hf_srcfeat.commands import publish

    mirror = tmp_path / "mirror"
    other = mirror / "models" / "org" / "other"
    other.mkdir(parents=True)
    (other / "model.safetensors").write_text("another published model")
    (tmp_path / "sibling").mkdir()
    registry = tmp_path / "published_models.json"
    with pytest.raises(SystemExit, match=repr(repo_id)):
        publish.main([str(tmp_path / "run"), "--repo_id", repo_id, "--output", str(tmp_path / "out"), "--mirror",
                      str(mirror), "--registry", str(registry)])
    with pytest.raises(SystemExit, match=repr(repo_id)):
        publish.commit_to_mirror(tmp_path / "run", mirror, repo_id)
    assert (other / "model.safetensors").read_text() == "another published model"
    assert (tmp_path / "sibling").is_dir() and not registry.exists()


def test_publishing_into_a_mirror_folder_that_is_not_a_repository_is_refused(tmp_path):
    from hf_srcfeat.commands import publish

    folder = tmp_path / "mirror" / "models" / "org" / "name"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("user data")
    with pytest.raises(SystemExit, match="not a mirror repository"):
        publish.commit_to_mirror(tmp_path / "built", tmp_path / "mirror", "org/name")
    assert (folder / "notes.txt").read_text() == "user data"


TINY_RUN = ["--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "4",
            "--ffn_dim", "64", "--vocab_size", "1000", "--report_to", "none", "--use_cpu", "--seed", "3",
            "--save_strategy", "no", "--disable_tqdm", "true", "--max_train_samples", "200", "--max_eval_samples", "20",
            "--max_steps", "4", "--per_device_train_batch_size", "16"]


@pytest.mark.slow
def test_evaluating_a_finished_run_scores_its_model_and_keeps_its_training_results(multi30k_dir, tmp_path):
    from hf_srcfeat.commands import train

    run = tmp_path / "run"
    trained = train.main(TINY_RUN + ["--output_dir", str(run), "--do_train", "--do_eval", "--generation_num_beams",
                                     "2"])
    saved = (run / "results.json").read_text()
    train.main(["--output_dir", str(run), "--do_eval", "--max_eval_samples", "20", "--report_to", "none",
                "--use_cpu", "--disable_tqdm", "true", "--do_predict", "--max_predict_samples", "3"])
    assert (run / "results.json").read_text() == saved, "the run's training results are kept"
    evaluations = json.loads((run / "eval_results.json").read_text())
    assert evaluations[0]["eval_metrics"]["eval_loss"] == trained["eval_metrics"]["eval_loss"], \
        "the trained model was evaluated, not a new one"
    assert evaluations[0]["test_setup"]["num_beams"] == 2, "the run's beams, not one (translate decodes with them)"
    recorded = evaluations[0]["model_args"]
    assert (recorded["d_model"], recorded["encoder_layers"], recorded["ffn_dim"]) == (32, 1, 64), \
        "the evaluated model's sizes, not the options' defaults"
    for options, message in ((["--config_overrides", '{"dropout": 0.1}'], "--config_overrides: an evaluation-only"),
                             (["--model_type", "deps_san"], "--model_type deps_san \\(the model's: srcfeat_transformer")):
        with pytest.raises(SystemExit, match=message):  # dropped without a word, before
            train.main(["--output_dir", str(run), "--do_eval", "--max_eval_samples", "20", "--use_cpu", *options])


def test_evaluating_without_a_trained_model_is_refused(multi30k_dir, tmp_path):
    from hf_srcfeat.commands import train

    with pytest.raises(SystemExit, match="nothing to evaluate"):
        train.main(TINY_RUN + ["--output_dir", str(tmp_path / "empty"), "--do_eval"])


@pytest.mark.slow
def test_overwrite_output_dir_starts_a_clean_run_and_keeps_other_files(multi30k_dir, tmp_path):
    from hf_srcfeat.commands import train

    run = tmp_path / "run"
    train.main(TINY_RUN + ["--output_dir", str(run), "--do_train"])
    first = json.loads((run / "tokenizer.json").read_text())["model"]["vocab"]
    (run / "checkpoint-99").mkdir()
    (run / "notes.txt").write_text("user data")
    # A corpus that fails its checks leaves the previous run as it was
    (tmp_path / "broken.tsv").write_text("A dog runs.\tEin Hund rennt.\nno tab here\n")
    with pytest.raises(ValueError, match="broken.tsv line 2"):
        train.main(TINY_RUN + ["--output_dir", str(run), "--do_train", "--overwrite_output_dir",
                               "--train_file", str(tmp_path / "broken.tsv")])
    assert (run / "model.safetensors").exists() and (run / "checkpoint-99").exists()
    train.main(TINY_RUN + ["--output_dir", str(run), "--do_train", "--overwrite_output_dir", "--vocab_size", "600"])
    second = json.loads((run / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(second) < len(first), "a new tokenizer of the new size, not the old one"
    assert not (run / "checkpoint-99").exists() and (run / "notes.txt").read_text() == "user data"
    # The folder a run starts from, or one inside the output folder (a checkpoint), is never cleared for it
    checkpoint = run / "checkpoint-5"
    checkpoint.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if (run / name).exists():
            (checkpoint / name).write_bytes((run / name).read_bytes())
    for option, source, where in (("--model_name_or_path", run, "is also"), ("--tokenizer_name_or_path", run, "is also"),
                                  ("--model_name_or_path", checkpoint, "holds")):
        with pytest.raises(SystemExit, match=f"{where} {option} {source}: --overwrite_output_dir would remove what "
                                             "the run starts from"):
            train.main(TINY_RUN + ["--output_dir", str(run), "--do_train", "--overwrite_output_dir", option,
                                   str(source)])
    assert (run / "model.safetensors").exists() and (checkpoint / "model.safetensors").exists()


@pytest.mark.parametrize(("bad", "error", "message"), [
    ({"text": "A dog."}, TypeError, "input 0 is a dict"),
    (None, TypeError, "text 0 is NoneType"),
    (42, TypeError, "text 0 is int"),
    (b"A dog.", TypeError, "text 0 is bytes, not str: decode it first"),
    (["A dog runs.", None], TypeError, "text 1 is NoneType"),
    (["A dog runs.", ["nested"]], TypeError, "text 1 is list"),
    (["A dog runs.", "\ud800 lone"], ValueError, "text 1 has a lone surrogate"),
])
def test_the_pipeline_names_the_input_that_is_not_a_sentence(trained_baseline, feature_tokenizer, bad, error, message):
    model, _ = trained_baseline
    translator = pipeline("translation", model=model, tokenizer=feature_tokenizer, max_new_tokens=8)
    with pytest.raises(error, match=message):
        translator(bad)


def test_the_tokenizer_names_bytes_and_lone_surrogates(feature_tokenizer):
    with pytest.raises(TypeError, match="text 0 is bytes, not str"):
        feature_tokenizer(b"A dog runs.")
    with pytest.raises(ValueError, match="text 0 has a lone surrogate"):
        feature_tokenizer(["A dog \udc80 runs."])


def test_text_and_annotations_of_different_sentences_are_refused(feature_tokenizer, test_sentences):
    parsed = feature_tokenizer.annotate(test_sentences[:2])
    assert feature_tokenizer(test_sentences[:2], annotations=parsed)["input_ids"] == \
        feature_tokenizer(annotations=parsed)["input_ids"]
    with pytest.raises(ValueError, match="text 1 .* is not the sentence its annotation parses"):
        feature_tokenizer([test_sentences[0], test_sentences[2]], annotations=parsed)
    with pytest.raises(TypeError, match="annotation 0 is str"):
        feature_tokenizer(annotations=["A dog runs."])


def test_a_token_of_a_thousand_characters_keeps_its_text(feature_tokenizer):
    long_token = "x" * 1200
    sentence = feature_tokenizer.annotate([f"A {long_token} dog runs."])[0]
    assert [word.text for word in sentence.words][:3] == ["A", long_token, "dog"]
    assert "<UNK>" not in feature_tokenizer.decode(feature_tokenizer(annotations=sentence)["input_ids"])


@pytest.mark.parametrize(("config_class", "arguments", "message"), [
    ("DepsSanConfig", {"deps_san_variance": float("nan")}, "deps_san_variance"),
    ("DepsSanConfig", {"deps_san_variance": float("inf")}, "deps_san_variance"),
    ("DepsSanConfig", {"deps_san_layers": 1}, "deps_san_layers"),
    ("SrcFeatTransformerConfig", {"init_std": float("nan")}, "init_std"),
])
def test_configs_refuse_nan_infinity_and_a_bare_integer_for_a_list(config_class, arguments, message):
    import hf_srcfeat

    with pytest.raises(ValueError, match=message):
        getattr(hf_srcfeat, config_class)(**arguments)


@pytest.mark.parametrize(("config_class", "arguments", "message"), [
    ("SrcFeatTransformerConfig", {"share_embeddings": "no"}, "`share_embeddings` must be true or false, got 'no'"),
    ("SrcFeatTransformerConfig", {"tie_word_embeddings": "no"}, "`tie_word_embeddings` must be true or false"),
    ("SrcFeatTransformerConfig", {"use_cache": "x"}, "`use_cache` must be true or false"),
    ("SrcFeatTransformerConfig", {"is_encoder_decoder": False}, "`is_encoder_decoder` must be True"),
    ("LatentFeedbackConfig", {"share_lfe_parameters": "no"}, "`share_lfe_parameters` must be true or false"),
    ("RelevanceFeaturesConfig", {"factor_embedding_sizes": [8, 8]}, "`factor_embedding_sizes` must be a mapping"),
    ("RelevanceFeaturesConfig", {"extra_factors": ["ner"]}, "`extra_factors` must be a mapping"),
    ("DiverseInputConfig", {"feature_group_widths": [8, 8]}, "`feature_group_widths` must be a mapping"),
])
def test_configs_refuse_a_flag_that_is_not_a_boolean_and_a_list_for_a_mapping(config_class, arguments, message):
    """A truthy string would silently act as True (sharing the embeddings, the LFE); a list would fail inside
    `dict()` without the argument's name."""
    import hf_srcfeat

    with pytest.raises(ValueError, match=message):
        getattr(hf_srcfeat, config_class)(**arguments)


def test_a_corrupt_annotation_cache_is_an_error_naming_the_file(tmp_path):
    from hf_srcfeat.annotation_cache import AnnotationCacheError

    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(b"not a database " * 100)
    annotator = StanzaAnnotator(model_dir=STANZA_DIR, cache_path=cache)
    with pytest.raises(AnnotationCacheError, match=f"annotation cache {cache} is unreadable.*delete it"):
        annotator.annotate(["A dog runs."])


def test_a_locked_annotation_cache_is_warned_about_and_parsing_goes_on(stanza_annotator, tmp_path, monkeypatch):
    import sqlite3

    from hf_srcfeat.annotation_cache import AnnotationCache

    cache = tmp_path / "cache.sqlite"
    annotator = StanzaAnnotator(model_dir=STANZA_DIR, cache_path=cache)
    annotator.annotate(["A dog runs."])
    monkeypatch.setattr(AnnotationCache, "lock_timeout", 0.1)
    annotator = StanzaAnnotator(model_dir=STANZA_DIR, cache_path=cache)
    holder = sqlite3.connect(cache)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing: the file is locked
    try:
        with pytest.warns(UserWarning, match=f"annotation cache {cache} cannot be used"):
            parsed = annotator.annotate(["Two cats sleep."])
    finally:
        holder.rollback()
        holder.close()
    assert parsed == stanza_annotator.annotate(["Two cats sleep."])


def conllu(*rows: str) -> str:
    return "\n".join(rows) + "\n\n"


@pytest.mark.parametrize(("content", "message"), [
    (conllu("1-2\tdu\t_\t_\t_\t_\t_\t_\t_\t_", "1\tde\tde\tADP\tIN\t_\t0\troot\t_\t_"),
     r"line 3: the sentence ends inside the multi-word token 1-2"),
    (conllu("x\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_"), r"line 1: id 'x' is not an integer"),
    (conllu("1\tdog\tdog\tNOUN\tNN\t_\troot\t0\t_\t_"), r"line 1: head 'root' is not an integer"),
])
def test_conllu_errors_name_the_file_and_line(content, message, tmp_path):
    from hf_srcfeat import read_conllu

    path = tmp_path / "bad.conllu"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=f"bad.conllu: CoNLL-U {message}"):
        list(read_conllu(path))


def test_conllu_with_a_byte_order_mark_reads_and_latin1_is_named(tmp_path):
    from hf_srcfeat import read_conllu

    text = conllu("1\tCafé\tcafé\tNOUN\tNN\t_\t0\troot\t_\t_")
    (tmp_path / "bom.conllu").write_text("\ufeff" + text, encoding="utf-8")
    assert [word.text for word in next(read_conllu(tmp_path / "bom.conllu")).words] == ["Café"]
    (tmp_path / "latin1.conllu").write_text(text, encoding="latin-1")
    with pytest.raises(ValueError, match=r"latin1.conllu is not UTF-8 text"):
        list(read_conllu(tmp_path / "latin1.conllu"))


@pytest.fixture
def short_translator(trained_baseline, feature_tokenizer, tmp_path):
    """The pipeline with a tokenizer whose model_max_length is 16 tokens."""
    model, _ = trained_baseline
    feature_tokenizer.save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, model_max_length=16)
    tokenizer.annotator = feature_tokenizer.annotator
    return pipeline("translation", model=model, tokenizer=tokenizer, max_new_tokens=8)


def test_a_sentence_cut_to_model_max_length_is_warned_about_and_can_be_kept_whole(short_translator, test_sentences):
    long = " ".join(test_sentences[:3])
    assert len(short_translator.tokenizer(long)["input_ids"]) > 16
    with pytest.warns(UserWarning, match=r"has \d+ tokens; only its first 16 .* truncation=False"):
        short_translator(long)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kept whole: nothing cut, nothing to warn about
        assert short_translator(long, truncation=False)[0]["translation_text"]
    short_translator.model.config.max_position_embeddings, before = 20, short_translator.model.config.max_position_embeddings
    try:
        with pytest.raises(ValueError, match=r"more than the model's max_position_embeddings \(20\)"):
            short_translator(long, truncation=False)
    finally:
        short_translator.model.config.max_position_embeddings = before


def test_a_sentence_translated_without_a_parse_is_cut_with_the_same_warning(short_translator, test_sentences):
    long = " ".join(test_sentences[:3])
    with pytest.warns(UserWarning, match=r"has \d+ tokens; only its first 16 .* truncation=False"):
        short_translator(long, parse=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*tokens; only its first")
        assert short_translator(long, parse=False, truncation=False)[0]["translation_text"]


def test_parse_false_given_when_the_pipeline_is_created_holds_for_every_call(trained_baseline, feature_tokenizer,
                                                                            test_sentences, monkeypatch):
    model, _ = trained_baseline
    unparsed = pipeline("translation", model=model, tokenizer=feature_tokenizer, max_new_tokens=8, parse=False)

    def no_parser(*args, **kwargs):
        raise AssertionError("parse=False was given: the annotator must not run")

    monkeypatch.setattr(feature_tokenizer, "annotate", no_parser)
    expected = feature_tokenizer(test_sentences[0], source_features=False, return_tensors="pt")
    generated = model.generate(**expected, max_new_tokens=8)
    assert unparsed(test_sentences[0])[0]["translation_text"] == feature_tokenizer.decode(
        generated[0], skip_special_tokens=True).strip()


def test_a_text_too_long_to_parse_is_refused_before_the_parser(feature_tokenizer):
    with pytest.raises(ValueError, match=r"text 1 has 12,000 characters, more than max_characters=10,000"):
        feature_tokenizer.annotate(["A dog runs.", "a " * 6000])


def tokenizer_with(feature_tokenizer, **changes):
    """The feature tokenizer with some feature vocabularies replaced (label lists without the reserved entries)."""
    from hf_srcfeat import FeatureVocabularies, SourceFeatureTokenizer
    from hf_srcfeat.subword_training import SPECIAL_TOKENS

    data = feature_tokenizer.feature_vocabularies.to_dict()
    return SourceFeatureTokenizer(tokenizer_object=feature_tokenizer.backend_tokenizer,
                                  feature_vocabularies=FeatureVocabularies.from_dict({**data, **changes}),
                                  model_max_length=256, **SPECIAL_TOKENS)


def test_a_tokenizer_the_model_was_not_trained_with_is_refused_where_they_meet(feature_tokenizer):
    from hf_srcfeat import (
        RelevanceFeaturesConfig,
        RelevanceFeaturesForConditionalGeneration,
        SrcFeatTransformerConfig,
        SrcFeatTransformerForConditionalGeneration,
    )

    from .end_to_end import tiny_method_config

    sizes = feature_tokenizer.feature_vocabularies.sizes()
    relevance = tiny_method_config(RelevanceFeaturesConfig, feature_tokenizer, **sizes)
    baseline = tiny_method_config(SrcFeatTransformerConfig, feature_tokenizer)
    for config in (relevance, baseline):
        config.tokenizer_fingerprint = feature_tokenizer.fingerprint()
    relevance_model, baseline_model = (RelevanceFeaturesForConditionalGeneration(relevance),
                                       SrcFeatTransformerForConditionalGeneration(baseline))
    pipeline("translation", model=relevance_model, tokenizer=feature_tokenizer)  # its own tokenizer: accepted
    labels = feature_tokenizer.feature_vocabularies.to_dict()
    cut_lemmas = tokenizer_with(feature_tokenizer, lemma=labels["lemma"][:50])
    with pytest.raises(ValueError, match=r"does not belong to this model: num_lemmas: the tokenizer has 50"):
        pipeline("translation", model=relevance_model, tokenizer=cut_lemmas)
    permuted = tokenizer_with(feature_tokenizer, deprel=labels["deprel"][:3] + labels["deprel"][3:][::-1])
    with pytest.raises(ValueError, match="the model was trained with tokenizer"):
        pipeline("translation", model=baseline_model, tokenizer=permuted)
    baseline_model.config.vocab_size = len(feature_tokenizer) - 10
    with pytest.raises(ValueError, match=r"the tokenizer has \d+ subwords, the model's embeddings"):
        pipeline("translation", model=baseline_model, tokenizer=feature_tokenizer)


def test_train_py_records_the_tokenizer_the_model_is_trained_with(multi30k_dir, tmp_path):
    from hf_srcfeat import SourceFeatureTokenizer
    from hf_srcfeat.commands import train

    train.main(TINY_RUN + ["--output_dir", str(tmp_path / "run"), "--do_train"])
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["tokenizer_fingerprint"] == SourceFeatureTokenizer.from_pretrained(tmp_path / "run").fingerprint()


def test_a_sharded_save_over_a_single_file_save_loads_the_new_weights_and_back(tiny_config, tmp_path):
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat import SrcFeatTransformerForConditionalGeneration

    torch.manual_seed(0)
    first, second = (SrcFeatTransformerForConditionalGeneration(tiny_config()) for _ in range(2))
    first.save_pretrained(tmp_path)
    second.save_pretrained(tmp_path, max_shard_size="20KB")
    assert not (tmp_path / "model.safetensors").exists()
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), second.state_dict().values(), strict=True))
    first.save_pretrained(tmp_path)
    assert sorted(path.name for path in tmp_path.glob("model*")) == ["model.safetensors"]


@pytest.mark.parametrize(("word", "error", "message"), [
    ({"head": 2.0}, TypeError, r"word 1 \('A'\) has head 2.0 of type float"),
    ({"head": "2"}, TypeError, r"word 1 \('A'\) has head '2' of type str"),
    ({"text": None}, ValueError, r"word 1 has text None"),
])
def test_annotated_words_with_a_head_or_text_of_the_wrong_type_are_named(word, error, message):
    from hf_srcfeat import AnnotatedSentence, AnnotatedWord

    fields = {"text": "A", "upos": "DET", "xpos": "DT", "lemma": "a", "deprel": "det", "head": 2, **word}
    with pytest.raises(error, match=message):
        AnnotatedSentence(words=[AnnotatedWord(**fields), AnnotatedWord("dog", "NOUN", "NN", "dog", "root", 0)])


@pytest.mark.parametrize(("content", "message"), [("{not json", "is not valid JSON"),
                                                  ('{"format": 1, "pos": []}', r"lacks \['lemma', 'deprel'")])
def test_a_broken_feature_vocabulary_file_is_named(content, message, tmp_path):
    from hf_srcfeat import FeatureVocabularies

    (tmp_path / "feature_vocab.json").write_text(content)
    with pytest.raises(ValueError, match=f"feature vocabulary file .*feature_vocab.json {message}"):
        FeatureVocabularies.load(tmp_path / "feature_vocab.json")


def test_a_missing_autoencoder_folder_is_named(feature_tokenizer, tmp_path):
    from hf_srcfeat import LatentFeedbackConfig, LatentFeedbackForConditionalGeneration

    from .end_to_end import tiny_method_config

    config = tiny_method_config(LatentFeedbackConfig, feature_tokenizer, lfe_mode="fine_tuned",
                                lfe_pretrained_from=str(tmp_path / "no_dae_here"))
    with pytest.raises(ValueError, match=r"lfe_pretrained_from=.*no_dae_here.*no such folder"):
        LatentFeedbackForConditionalGeneration(config).load_pretrained_parts()


def test_publishing_to_an_output_that_is_a_file_is_refused(tmp_path):
    from hf_srcfeat.commands import publish

    (tmp_path / "out").write_text("a file")
    with pytest.raises(SystemExit, match="is a file; name a folder"):
        publish.build_repository(tmp_path / "run", "org/name", tmp_path / "out", None)
    assert (tmp_path / "out").read_text() == "a file"


def test_ids_of_the_wrong_type_or_beyond_the_vocabulary_are_named(trained_baseline, feature_tokenizer, test_sentences):
    import torch

    model, _ = trained_baseline
    batch = dict(feature_tokenizer(test_sentences[:2], text_target=test_sentences[2:4], padding=True,
                                   return_tensors="pt"))
    with pytest.raises(TypeError, match="`pos_ids` has dtype torch.float32"):
        model(**{**batch, "pos_ids": batch["pos_ids"].float()})
    with pytest.raises(ValueError, match=r"`input_ids` holds ids from \d+ to 5000, but the model has \d+ token"):
        model(**{**batch, "input_ids": batch["input_ids"].clone().fill_(5000)})
    for fast in (True, False):  # generate runs the encoder without the model's forward
        with pytest.raises(ValueError, match=r"`input_ids` holds ids from 2 to 5000"):
            model.generate(input_ids=torch.tensor([[5000, 2]]), max_new_tokens=3, fast_decoding=fast)
    labels = batch["labels"].clone()
    labels[0, 0] = model.config.vocab_size
    with pytest.raises(ValueError, match="`labels` holds ids"):
        model(**{**batch, "labels": labels})
    labels[0, 0] = -100
    assert torch.isfinite(model(**{**batch, "labels": labels}).loss)


def test_the_parse_cache_key_follows_the_default_download_and_its_resources_file(tmp_path, monkeypatch):
    import shutil

    folder = tmp_path / "stanza_resources"
    shutil.copytree(STANZA_DIR, folder)
    monkeypatch.delenv("HF_SRCFEAT_STANZA_DIR", raising=False)
    monkeypatch.setenv("STANZA_RESOURCES_DIR", str(folder))
    default = StanzaAnnotator(cache_path=tmp_path / "cache.sqlite")
    assert default.models_folder == folder
    assert default.identity == StanzaAnnotator(model_dir=folder, use_cache=False).identity
    before = default.identity
    (folder / "resources.json").write_text((folder / "resources.json").read_text() + " ")
    assert StanzaAnnotator(cache_path=tmp_path / "cache.sqlite").identity != before, "an updated download re-parses"


@pytest.mark.slow
def test_a_card_states_what_was_measured_set_size_beams_and_signature(multi30k_dir, tmp_path):
    from hf_srcfeat.commands import publish, train

    run = tmp_path / "run"
    train.main(TINY_RUN + ["--output_dir", str(run), "--do_train", "--do_predict",
                           "--predict_with_generate", "--generation_num_beams", "2", "--generation_max_length", "20",
                           "--max_predict_samples", "20"])
    setup = json.loads((run / "results.json").read_text())["test_setup"]
    assert (setup["sentences"], setup["num_beams"]) == (20, 2)
    assert setup["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    text = publish.results_section(publish.run_results(run, None, None))
    assert "Multi30k en→de test_2016_flickr (20 sentences), beam 2:" in text
    assert setup["bleu_signature"] in text and "beam 4" not in text


def test_a_truncated_weights_file_is_an_error_naming_it(model_folder, tmp_path):
    import shutil

    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat.damaged_files import DamagedFileError

    copy = shutil.copytree(model_folder, tmp_path / "model")
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut off half-way
    with pytest.raises(DamagedFileError, match=rf"{weights} is truncated or damaged"):
        AutoModelForSeq2SeqLM.from_pretrained(copy)


def test_a_truncated_tokenizer_file_is_an_error_naming_it(model_folder, tmp_path):
    import shutil

    from hf_srcfeat.damaged_files import DamagedFileError
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    copy = shutil.copytree(model_folder, tmp_path / "model")
    saved = copy / "tokenizer.json"
    saved.write_text(saved.read_text(encoding="utf-8")[:1000], encoding="utf-8")
    with pytest.raises(DamagedFileError, match=rf"{saved} is truncated or damaged"):
        load_tokenizer(copy)


@pytest.mark.parametrize(("options", "message"), [
    ({"repetition_penalty": 0}, "`repetition_penalty` must be a number above 0, got 0"),
    ({"no_repeat_ngram_size": -1}, "`no_repeat_ngram_size` must be 0 (off) or more, got -1"),
    ({"temperature": 0.5}, "temperature only acts when sampling"),
])
def test_the_pipeline_refuses_decoding_options_outside_their_values(options, message, trained_baseline,
                                                                    feature_tokenizer):
    model, _ = trained_baseline
    translator = pipeline("translation", model=model, tokenizer=feature_tokenizer, max_new_tokens=8)
    with pytest.raises(ValueError, match=re.escape(message)):
        translator("A dog runs.", **options)


def test_inputs_that_are_not_one_batch_of_token_tensors_are_named(trained_baseline, feature_tokenizer, test_sentences):

    model, _ = trained_baseline
    as_numpy = feature_tokenizer(test_sentences[:2], padding=True, return_tensors="np")
    with pytest.raises(TypeError, match=r"`input_ids` is a ndarray, not a torch tensor: encode with return_tensors"):
        model.generate(**as_numpy, max_new_tokens=3)
    as_lists = feature_tokenizer(test_sentences[:2], padding=True)
    with pytest.raises(TypeError, match="`input_ids` is a list, not a torch tensor"):
        model.generate(**as_lists, max_new_tokens=3)
    one_row = feature_tokenizer(test_sentences[:1], return_tensors="pt")["input_ids"]
    with pytest.raises(ValueError, match=r"`input_ids` has shape \(\d+,\); token ids are \[sentences, tokens\]"):
        model.generate(input_ids=one_row[0], max_new_tokens=3)
    with pytest.raises(ValueError, match="`input_ids` holds no sentence"):
        model.generate(input_ids=one_row[:0], max_new_tokens=3)


def test_word_and_phrase_indices_beyond_the_sentence_are_named(feature_tokenizer, test_sentences, tiny_config):

    from hf_srcfeat import PhraseRepConfig, PhraseRepForConditionalGeneration

    from .helpers import random_model

    config = PhraseRepConfig(**{**tiny_config().to_diff_dict(), "phrase_segmentation": "parse"})
    model = random_model(PhraseRepForConditionalGeneration, config).eval()
    batch = dict(feature_tokenizer(test_sentences[:2], padding=True, return_tensors="pt"))
    for name, value, found in (("phrase_ids", 1000, "-1 to 1000"), ("word_ids", -5, "-5 to")):
        beyond = batch[name].clone()
        beyond[0, 0] = value
        with pytest.raises(ValueError, match=rf"`{name}` holds indices from {found}.*, but a sentence of \d+ tokens"):
            model.get_encoder()(**{**batch, name: beyond})
    model.get_encoder()(**batch)


def test_a_left_truncated_sentence_trains_with_feature_dropout(feature_tokenizer, tiny_config, test_sentences):
    import torch

    from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration

    from .helpers import random_model

    long = " ".join(test_sentences[:6])
    feature_tokenizer.truncation_side = "left"
    try:
        batch = feature_tokenizer([long], text_target=[test_sentences[0]], truncation=True, max_length=20,
                                  return_tensors="pt")
    finally:
        feature_tokenizer.truncation_side = "right"
    assert batch["word_ids"].max() >= 20, "the kept words keep their places in the whole sentence"
    config = DepsSanConfig(**{**tiny_config().to_diff_dict(), "feature_dropout": {"dep_distance": 0.5}})
    model = random_model(DepsSanForConditionalGeneration, config).train()
    assert torch.isfinite(model(**batch).loss)


def test_a_config_given_another_methods_argument_or_a_near_miss_says_so():
    from hf_srcfeat import DepsSanConfig

    with pytest.raises(ValueError, match="`relevance_combine` is an argument of RelevanceFeaturesConfig, not of "
                                         "DepsSanConfig; several methods on one model are a SrcFeatComposedConfig"):
        DepsSanConfig(relevance_combine="concat")
    with pytest.warns(UserWarning, match="DepsSanConfig has no argument `deps_san_layer`.*Did you mean "
                                         "`deps_san_layers`"):
        DepsSanConfig(deps_san_layer=[1])
    DepsSanConfig(num_pos_tags=20)  # the tokenizer's sizes, given to every method by the training command


def test_feature_dropout_of_a_feature_the_model_does_not_read_is_refused_where_the_model_is_built(tiny_config):
    from hf_srcfeat import (
        DepsSanConfig,
        DepsSanForConditionalGeneration,
        SrcFeatTransformerForConditionalGeneration,
    )

    with pytest.raises(ValueError, match=r"`feature_dropout` names pos_ids, which the model of a DepsSanConfig does "
                                         r"not read \(it reads dep_distance\)"):
        DepsSanForConditionalGeneration(DepsSanConfig(**tiny_config(feature_dropout={"pos_ids": 0.1}).to_diff_dict()))
    with pytest.raises(ValueError, match="which the model of a SrcFeatTransformerConfig does not read"):
        SrcFeatTransformerForConditionalGeneration(tiny_config(feature_dropout={"pos_ids": 0.1}))
    DepsSanForConditionalGeneration(DepsSanConfig(**tiny_config(feature_dropout={"dep_distance": 0.1}).to_diff_dict()))


def test_a_saved_model_with_a_setting_now_refused_still_loads_with_a_warning(tiny_config, tmp_path):
    """Accepted when it was saved (through the Python API): refused for a new config or model, warned about when
    the saved one loads."""
    import json

    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration

    model = DepsSanForConditionalGeneration(DepsSanConfig(**tiny_config().to_diff_dict()))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "relevance_combine": "concat",
                                                      "feature_dropout": {"pos_ids": 0.1}}))
    with pytest.warns(UserWarning) as warned:
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    messages = " ".join(str(warning.message) for warning in warned)
    assert "`relevance_combine` is an argument of RelevanceFeaturesConfig" in messages and "(loaded as saved)" in messages
    assert "`feature_dropout` names pos_ids" in messages
    assert isinstance(loaded, DepsSanForConditionalGeneration)
    with pytest.raises(ValueError, match="relevance_combine"):
        DepsSanConfig(**{**tiny_config().to_diff_dict(), "relevance_combine": "concat"})
