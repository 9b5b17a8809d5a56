"""Publishing to the Hub: hf-srcfeat-publish builds a repository folder (weights, config, tokenizer, rendered
card, remote code), commits it into a git mirror that olah serves on loopback as a Hub endpoint, and the
model loads by repo id three ways, each in a fresh process, reproducing the published translations exactly:
(a) with hf_srcfeat installed, (b) without it via trust_remote_code, (c) offline from the Hugging Face cache."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks import model_zoo
from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration
from hf_srcfeat.commands import publish

from .end_to_end import tiny_method_config, train_from_raw_text
from .helpers import REPO
from .test_half_precision import VARIANTS

REPO_ID = "hf-srcfeat/deps-san-tiny"

#: Run in a fresh interpreter: load by repo id, translate the sentences, print the translations as JSON.
LOADER = """
import json, sys
BLOCKED = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else set()
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Blocker())
mode = sys.argv[1]
if mode == "installed":
    import hf_srcfeat  # registers the classes
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
remote = mode != "installed"
if mode in ("pipeline", "installed_pipeline"):
    if mode == "pipeline":  # transformers.pipeline alone, the task read from the repository's config
        from transformers import pipeline
        translator = pipeline(model=sys.argv[3], trust_remote_code=True)
    else:  # as the docs load a published model: hf_srcfeat's pipeline, no remote code
        import hf_srcfeat
        translator = hf_srcfeat.pipeline("translation", model=sys.argv[3])
    outputs = translator(json.loads(sys.stdin.read()), num_beams=4, max_new_tokens=20)
    print(json.dumps({"module": type(translator).__module__, "class": type(translator).__name__,
                      "translations": [output["translation_text"] for output in outputs]}))
    sys.exit(0)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[3], trust_remote_code=remote)
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[3], trust_remote_code=remote).eval()
sentences = json.loads(sys.stdin.read())
batch = tokenizer(sentences, padding=True, return_tensors="pt")
output = model.generate(**batch, num_beams=4, max_new_tokens=20)
print(json.dumps({"module": type(model).__module__,
                  "translations": tokenizer.batch_decode(output, skip_special_tokens=True)}))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def published(feature_tokenizer, train_pairs, test_sentences, tmp_path_factory):
    """A briefly trained Deps-SAN model, published into a git mirror; its own translations of 3 sentences."""
    folder = tmp_path_factory.mktemp("hub")
    config = tiny_method_config(DepsSanConfig, feature_tokenizer)
    model, _ = train_from_raw_text(DepsSanForConditionalGeneration, config, feature_tokenizer, train_pairs, steps=30)
    model.save_pretrained(folder / "run")
    feature_tokenizer.save_pretrained(folder / "run")
    publish.main([str(folder / "run"), "--repo_id", REPO_ID, "--output", str(folder / "repository"),
                  "--mirror", str(folder / "mirrors"), "--registry", str(folder / "published.json")])
    batch = feature_tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = feature_tokenizer.batch_decode(model.generate(**batch, num_beams=4, max_new_tokens=20),
                                                  skip_special_tokens=True)
    return folder, expected


@pytest.fixture(scope="module")
def hub_endpoint(published):
    """olah serving the mirror on a free loopback port; always stopped afterwards."""
    folder, _ = published
    port = free_port()
    (folder / "olah.toml").write_text(
        f'[basic]\nhost = "127.0.0.1"\nport = {port}\nmirrors-path = ["{folder / "mirrors"}"]\n'
        f'repos-path = "{folder / "olah_repos"}"\n[accessibility]\noffline = true\n')
    log = open(folder / "olah.log", "w")
    olah = Path(sys.executable).parent / "olah-cli"  # installed with the dev extra, next to this Python
    server = subprocess.Popen([str(olah), "-c", str(folder / "olah.toml")], stdout=log, stderr=subprocess.STDOUT,
                              cwd=folder)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            if server.poll() is not None:
                pytest.fail(f"olah exited with {server.returncode}:\n{(folder / 'olah.log').read_text()}")
            try:
                urllib.request.urlopen(f"{url}/api/models/{REPO_ID}/revision/main", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"olah did not answer on {url} within 20 s:\n{(folder / 'olah.log').read_text()}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def load_in_fresh_process(mode: str, environment: dict, sentences: list[str], blocked: str = "") -> dict:
    completed = subprocess.run([sys.executable, "-c", LOADER, mode, blocked, REPO_ID], input=json.dumps(sentences),
                               capture_output=True, text=True, env={**os.environ, **environment}, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_repository_folder_holds_weights_tokenizer_code_and_a_rendered_card(published):
    folder, _ = published
    repository = folder / "repository"
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                 "feature_vocab.json", "tokenizer_config.json", "README.md", "modeling_deps_san.py",
                 "configuration_deps_san.py", "modeling_srcfeat_transformer.py", "tokenization_source_features.py",
                 "annotators.py", "pipeline_translation.py"):
        assert (repository / name).exists(), name
    assert json.loads((repository / "config.json").read_text())["custom_pipelines"] == {
        "source-feature-translation": {"impl": "pipeline_translation.SourceFeatureTranslationPipeline",
                                       "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}}
    assert not list(repository.glob("*.bin")) and not list(repository.glob("*.pkl")), "no pickles"
    config = json.loads((repository / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_deps_san.DepsSanForConditionalGeneration"
    card = (repository / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["license"] == "apache-2.0" and metadata["pipeline_tag"] == "translation"
    assert "<this repository>" not in card and REPO_ID in card
    assert (folder / "mirrors" / "models" / REPO_ID / ".git").exists()


@pytest.mark.slow
def test_publishing_never_overwrites_a_folder(published):
    folder, _ = published
    with pytest.raises(SystemExit, match="not empty"):
        publish.main([str(folder / "run"), "--repo_id", REPO_ID, "--output", str(folder / "repository"),
                      "--dry-run"])


def test_an_upload_without_a_token_is_refused_before_the_folder_is_built(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit, match="set HF_TOKEN"):
        publish.main([str(tmp_path / "run"), "--repo_id", REPO_ID, "--output", str(tmp_path / "repository"),
                      "--upload"])
    assert not (tmp_path / "repository").exists(), "a rerun with the token would find the folder there"


def test_a_card_takes_its_results_from_the_run_and_lists_them_in_the_model_index(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"test_metrics": {"test_bleu": 31.234, "test_chrf": 55.5}}))
    results = publish.run_results(tmp_path, None, None)
    card = publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "deps_san.md").read_text(), REPO_ID, results,
                               publish.run_facts(tmp_path))
    metadata = yaml.safe_load(card.split("---")[1])
    metrics = metadata["model-index"][0]["results"][0]["metrics"]
    assert [(m["type"], m["value"]) for m in metrics] == [("bleu", 31.23), ("chrf", 55.5)]
    assert "sacreBLEU 31.23, chrF 55.5" in card and "Not measured yet" not in card


def test_publishing_an_en_fr_run_on_an_own_corpus_gives_a_card_that_says_so_and_changes_no_tracked_file(
        multi30k_dir, tmp_path):
    """A real (tiny) run on a TSV corpus of Multi30k's English-French pairs, named as a user's own corpus."""
    import gzip

    from hf_srcfeat.commands import train

    def pairs(split: str, count: int) -> list[str]:
        with gzip.open(multi30k_dir / f"{split}.en.gz", "rt") as english, \
                gzip.open(multi30k_dir / f"{split}.fr.gz", "rt") as french:
            return [f"{en.strip()}\t{fr.strip()}" for en, fr, _ in zip(english, french, range(count), strict=False)]

    (tmp_path / "shop_reviews.train.tsv").write_text("\n".join(pairs("train", 120)) + "\n", encoding="utf-8")
    (tmp_path / "shop_reviews.test.tsv").write_text("\n".join(pairs("test_2016_flickr", 8)) + "\n", encoding="utf-8")
    tracked = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--do_predict", "--predict_with_generate",
                "--train_file", str(tmp_path / "shop_reviews.train.tsv"),
                "--test_file", str(tmp_path / "shop_reviews.test.tsv"), "--source_lang", "en", "--target_lang", "fr",
                "--model_type", "relevance_features", "--d_model", "32", "--encoder_layers", "1", "--decoder_layers",
                "1", "--attention_heads", "2", "--ffn_dim", "64", "--vocab_size", "400", "--max_steps", "2",
                "--per_device_train_batch_size", "8", "--generation_max_length", "8", "--use_cpu", "--report_to",
                "none", "--save_strategy", "no"])
    publish.main([str(tmp_path / "run"), "--repo_id", "someone/shop-en-fr", "--output", str(tmp_path / "repository"),
                  "--mirror", str(tmp_path / "mirrors")])
    card = (tmp_path / "repository" / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["language"] == ["en", "fr"] and "datasets" not in metadata
    [evaluation] = [entry for entry in metadata["model-index"][0]["results"] if entry["metrics"][0]["type"] == "bleu"]
    assert evaluation["task"]["name"] == "Translation en→fr" and "en→fr" in evaluation["dataset"]["name"]
    assert "**Language pair:** en→fr" in card and "shop_reviews.train.tsv (120 sentence pairs)" in card
    assert "multi30k" not in card.split("## This model")[1].split("\n## ")[0].lower()
    assert "BLEU+case.mixed" in card or "nrefs:1" in card, "the sacreBLEU signature is given"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                          text=True).stdout == tracked, "no tracked file changed (no registry entry)"


#: What hf-srcfeat-train records in results.json for a run on the default Multi30k (no --train_file or
#: --dataset_name), in part: its data arguments and the first test set's setup.
MULTI30K_RUN = {
    "data_args": {"dataset_name": None, "train_file": None, "data_dir": None, "source_lang": "en",
                  "target_lang": "de", "max_train_samples": 1000},
    "train_examples": 1000, "global_step": 300,
    "test_sets": {"test_2016_flickr": {
        "metrics": {"test_bleu": 2.6568, "test_chrf": 19.7838},
        "setup": {"set": "Multi30k en→de test_2016_flickr", "sentences": 40, "num_beams": 4, "length_penalty": 1.0,
                  "no_repeat_ngram_size": 3, "repetition_penalty": 1.0, "do_sample": False, "top_k": 50,
                  "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}}},
}


def this_model_section(card: str) -> str:
    return card.split("## This model")[1].split("\n## ")[0]


def test_a_run_on_the_default_multi30k_is_said_to_be_trained_on_it_with_the_decoding_its_tests_used(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(MULTI30K_RUN))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "srcfeat_transformer"}))
    card = publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "srcfeat_transformer.md").read_text(), REPO_ID,
                               None, publish.run_facts(tmp_path))
    section = this_model_section(card)
    assert "**Training data:** Multi30k train (1,000 sentence pairs)" in section
    assert "**Multi30k en→de test_2016_flickr** (40 sentences, beam 4, no_repeat_ngram_size 3)" \
        in section
    stopping = json.loads(json.dumps(MULTI30K_RUN))  # a run whose tests stopped beam search early
    for entry in stopping["test_sets"].values():
        entry["setup"]["early_stopping"] = True
    (tmp_path / "results.json").write_text(json.dumps(stopping))
    card = publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "srcfeat_transformer.md").read_text(), REPO_ID,
                               None, publish.run_facts(tmp_path))
    assert "no_repeat_ngram_size 3, early_stopping)" in this_model_section(card)


def test_an_averaged_model_folder_gets_its_runs_language_pair_and_data_and_says_it_is_an_average(tmp_path):
    """hf-srcfeat-average-checkpoints' output holds no results.json; averaged_from.json names the checkpoints,
    whose run folder has it."""
    run = tmp_path / "runs" / "rc2"
    for step in (200, 250, 300):
        (run / f"checkpoint-{step}").mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(MULTI30K_RUN))
    averaged = tmp_path / "rc2-avg"
    averaged.mkdir()
    (averaged / "config.json").write_text(json.dumps({"model_type": "srcfeat_transformer"}))
    (averaged / "tokenizer_config.json").write_text(json.dumps({"language": "en"}))
    (averaged / "averaged_from.json").write_text(json.dumps({
        "checkpoints": [str(run / f"checkpoint-{step}") for step in (200, 250, 300)], "method": "mean of the weights"}))
    card = publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "srcfeat_transformer.md").read_text(), REPO_ID,
                               publish.run_results(averaged, None, None), publish.run_facts(averaged))
    section = this_model_section(card)
    assert "**Language pair:** en→de" in section and "**Training data:** Multi30k train (1,000 sentence pairs)" in section
    assert "**Weights:** the mean of 3 checkpoints of its training run (steps 200, 250, 300" in section
    assert "sacreBLEU" not in section, "the run's scores are its last model's, not the average's"
    assert yaml.safe_load(card.split("---")[1])["language"] == ["en", "de"]
    shutil.rmtree(run)  # the run folder gone: the tokenizer still says the source language
    assert "**Language pair:** from en (the target language is not recorded)" in this_model_section(
        publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "srcfeat_transformer.md").read_text(), REPO_ID,
                            None, publish.run_facts(averaged)))


def test_a_run_folder_that_is_not_here_or_is_a_ctranslate2_export_is_refused_in_one_line(tmp_path):
    for missing in ("nosuch", "runs_nowhere/baseline"):  # the second is spelled like a Hub id
        with pytest.raises(SystemExit, match=f"^hf-srcfeat-publish: run_dir {missing}: no such folder here"):
            publish.main([missing, "--repo_id", "a/b", "--output", str(tmp_path / "p"), "--dry-run"])
    export = tmp_path / "model-ct2"
    export.mkdir()
    (export / "hf_srcfeat_export.json").write_text("{}")  # the file hf-srcfeat-export-ct2 writes
    with pytest.raises(SystemExit, match=f"run_dir {export} is a CTranslate2 export"):
        publish.main([str(export), "--repo_id", "a/b", "--output", str(tmp_path / "p"), "--dry-run"])
    (tmp_path / "run").mkdir()  # a run folder without its model (training has not saved one yet)
    with pytest.raises(SystemExit, match="has no config.json; give a trained model folder"):
        publish.main([str(tmp_path / "run"), "--repo_id", "a/b", "--output", str(tmp_path / "p"), "--dry-run"])
    assert not (tmp_path / "p").exists()


def test_an_output_inside_the_mirror_repository_or_holding_it_is_refused_before_any_work(model_folder, tmp_path):
    """Committing replaces the mirror repository's files: a folder built inside it would be deleted with them."""
    mirror = tmp_path / "mirror"
    repository = mirror / "models" / "me" / "rc"
    repository.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repository, check=True)
    (repository / "README.md").write_text("the published card\n")
    for output in (repository / "build", repository, mirror):
        with pytest.raises(SystemExit, match=f"--output {output} (is inside|holds) the mirror repository"):
            publish.main([str(model_folder), "--repo_id", "me/rc", "--output", str(output), "--mirror", str(mirror)])
    assert sorted(path.name for path in repository.iterdir()) == [".git", "README.md"]


def test_a_benchmark_run_gets_its_own_seed_scores_and_the_mean_over_seeds(tmp_path):
    benchmark_dir = REPO / "benchmarks" / "results" / "benchmark"
    by_seed = {seed: json.loads((benchmark_dir / f"baseline_seed{seed}.json").read_text())["test"] for seed in (1, 2)}
    (tmp_path / "results.json").write_text(json.dumps({"seed": 2}))
    results = publish.run_results(tmp_path, benchmark_dir, "baseline")
    assert (results["bleu"], results["chrf"]) == (by_seed[2]["bleu"], by_seed[2]["chrf"])
    assert results["mean_over_seeds"]["bleu"] == round((by_seed[1]["bleu"] + by_seed[2]["bleu"]) / 2, 2)
    card = publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "srcfeat_transformer.md").read_text(), REPO_ID, results)
    assert "python -m benchmarks.benchmark run --systems baseline --seeds 2" in card, "the exact training command"
    assert "The baseline trained with the same seed" not in card, "the baseline is not compared with itself"
    (tmp_path / "results.json").write_text(json.dumps({"seed": 7}))
    with pytest.raises(SystemExit, match="not one of the benchmark runs of 'baseline'"):
        publish.run_results(tmp_path, benchmark_dir, "baseline")
    # A run of another set-up (a smoke test's shared_overrides) says so in its training command
    smoke = tmp_path / "smoke"
    smoke.mkdir()
    result = json.loads((benchmark_dir / "baseline_seed1.json").read_text())
    result["shared_arguments"] = {**result["shared_arguments"], "max_steps": 4}
    (smoke / "baseline_seed1.json").write_text(json.dumps(result))
    (tmp_path / "results.json").write_text(json.dumps({"seed": 1}))
    assert publish.run_results(tmp_path, smoke, "baseline")["trained_by"] == \
        """python -m benchmarks.benchmark run --systems baseline --seeds 1 --shared_overrides '{"max_steps": 4}'"""


def test_a_method_card_states_the_difference_to_the_baseline_of_its_seed_and_its_significance(tmp_path):
    benchmark_dir = REPO / "benchmarks" / "results" / "benchmark"
    method = json.loads((benchmark_dir / "relevance_concat_seed1.json").read_text())["test"]
    (tmp_path / "results.json").write_text(json.dumps({"seed": 1}))
    card = publish.render_card((REPO / "hf_srcfeat" / "model_cards" / "relevance_features.md").read_text(), REPO_ID,
                               publish.run_results(tmp_path, benchmark_dir, "relevance_concat"))
    test = method["significance_vs_baseline"]
    assert (f"scores {test['baseline_bleu']} (difference {method['bleu'] - test['baseline_bleu']:+.2f} BLEU; "
            f"paired bootstrap resampling, p = {test['p_value']:.3f})") in card


@pytest.mark.slow
def test_publishing_records_the_model_and_the_docs_zoo_table_lists_it(published, tmp_path):
    folder, _ = published
    [entry] = json.loads((folder / "published.json").read_text())
    mirror_head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder / "mirrors" / "models" / REPO_ID,
                                 capture_output=True, text=True, check=True).stdout.strip()
    assert (entry["repo_id"], entry["model_type"], entry["destination"], entry["revision"]) == (
        REPO_ID, "deps_san", "local mirror", mirror_head)
    page = tmp_path / "publishing.md"
    shutil.copy(REPO / "docs" / "guides" / "publishing.md", page)
    model_zoo.main(["--registry", str(folder / "published.json"), "table", "--update_docs", "--docs_page", str(page)])
    before, rest = page.read_text().split(model_zoo.ZOO_START)
    section, after = rest.split(model_zoo.ZOO_END)
    [row] = [line for line in section.splitlines() if line.startswith(f"| `{REPO_ID}`")]
    assert "Deps-SAN" in row and "local mirror" in row and mirror_head[:7] in row
    assert f'hf_srcfeat.pipeline("translation", model="{REPO_ID}")' in row
    original = (REPO / "docs" / "guides" / "publishing.md").read_text()
    assert original.startswith(before) and original.endswith(after), "only the zoo section changes"


def test_the_zoo_table_names_the_registry_it_was_made_from(tmp_path, capsys):
    registry = tmp_path / "other_registry.json"
    registry.write_text(json.dumps([{
        "repo_id": REPO_ID, "model_type": "deps_san", "destination": "local mirror", "revision": "0123456789abcdef",
        "results": {"bleu": 30.0, "chrf": 55.0}}]))
    model_zoo.main(["--registry", str(registry), "table"])
    printed = capsys.readouterr().out
    assert f"Generated by `python -m benchmarks.model_zoo --registry {registry} table --update_docs` from " \
           f"`{registry}`." in printed
    assert "published_models.json" not in printed
    assert model_zoo.zoo_table(json.loads(registry.read_text())).endswith(
        "Generated by `python -m benchmarks.model_zoo table --update_docs` from "
        "`benchmarks/results/published_models.json`."), "the project's registry needs no --registry"


@pytest.mark.slow
def test_the_zoo_publishes_each_finished_benchmark_system_and_again_only_when_its_results_change(
        published, tmp_path):
    folder, _ = published
    benchmark_dir, run = tmp_path / "results", tmp_path / "runs" / "baseline" / "seed1"
    benchmark_dir.mkdir()
    shutil.copy(REPO / "benchmarks" / "results" / "benchmark" / "baseline_seed1.json", benchmark_dir)
    shutil.copytree(folder / "run", run)
    (run / "results.json").write_text(json.dumps({"seed": 1}))
    arguments = ["--registry", str(tmp_path / "published.json"), "publish", "--mirror", str(tmp_path / "mirrors"),
                 "--runs_dir", str(tmp_path / "runs"), "--benchmark_dir", str(benchmark_dir)]
    assert model_zoo.main(arguments) == ["hf-srcfeat/baseline-multi30k-en-de"], "only systems with results"
    [entry] = json.loads((tmp_path / "published.json").read_text())
    expected = json.loads((benchmark_dir / "baseline_seed1.json").read_text())["test"]["bleu"]
    assert entry["results"]["bleu"] == expected and entry["results"]["mean_over_seeds"]["seeds"] == [1]
    assert model_zoo.main(arguments) == [], "an up-to-date system is not published again"
    shutil.copy(REPO / "benchmarks" / "results" / "benchmark" / "baseline_seed2.json", benchmark_dir)
    assert model_zoo.main(arguments) == ["hf-srcfeat/baseline-multi30k-en-de"], "seed 2 changes the card's mean"
    [entry] = json.loads((tmp_path / "published.json").read_text())
    assert entry["results"]["mean_over_seeds"]["seeds"] == [1, 2]
    history = subprocess.run(["git", "log", "--oneline"], cwd=tmp_path / "mirrors" / "models" / entry["repo_id"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(history) == 2, "the mirror keeps both versions"
    entries = json.loads((tmp_path / "published.json").read_text())
    assert "(superseded)" not in model_zoo.zoo_table(entries, benchmark_dir)
    retrained = json.loads((benchmark_dir / "baseline_seed1.json").read_text())
    retrained["test"]["bleu"] += 1.0
    (benchmark_dir / "baseline_seed1.json").write_text(json.dumps(retrained))
    row = next(line for line in model_zoo.zoo_table(entries, benchmark_dir).splitlines() if "baseline" in line)
    assert row.count("(superseded)") == 2, "a re-trained system's old checkpoint, and the card's mean with it"


@pytest.mark.slow
def test_loads_by_repo_id_with_hf_srcfeat_installed(published, hub_endpoint, test_sentences, tmp_path):
    _, expected = published
    loaded = load_in_fresh_process("installed", {"HF_ENDPOINT": hub_endpoint, "HF_HUB_OFFLINE": "0",
                                                 "HF_HOME": str(tmp_path / "hf")}, test_sentences[:3])
    assert loaded["module"].startswith("hf_srcfeat.") and loaded["translations"] == expected


@pytest.mark.slow
def test_hf_srcfeats_pipeline_translates_by_repo_id_with_the_installed_code(published, hub_endpoint, test_sentences,
                                                                            tmp_path):
    _, expected = published
    loaded = load_in_fresh_process("installed_pipeline", {"HF_ENDPOINT": hub_endpoint, "HF_HUB_OFFLINE": "0",
                                                          "HF_HOME": str(tmp_path / "hf")}, test_sentences[:3])
    assert loaded["module"] == "hf_srcfeat.pipeline_translation"
    assert loaded["translations"] == [text.strip() for text in expected]


@pytest.mark.slow
def test_loads_by_repo_id_without_hf_srcfeat_through_remote_code(published, hub_endpoint, test_sentences, tmp_path):
    _, expected = published
    environment = {"HF_ENDPOINT": hub_endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf")}
    loaded = load_in_fresh_process("remote", environment, test_sentences[:3], blocked="hf_srcfeat")
    assert loaded["module"].startswith("transformers_modules.") and loaded["translations"] == expected
    # The tokenizer's annotator needs Stanza for raw text; without it the error says what to install.
    completed = subprocess.run([sys.executable, "-c", LOADER, "remote", "hf_srcfeat,stanza", REPO_ID], input=json.dumps(
        test_sentences[:1]), capture_output=True, text=True, env={**os.environ, **environment, "HF_HUB_OFFLINE": "1"},
        timeout=600)
    assert completed.returncode != 0 and "pip install stanza" in completed.stderr


@pytest.mark.slow
def test_transformers_pipeline_translates_by_repo_id_without_hf_srcfeat(published, hub_endpoint, test_sentences,
                                                                        tmp_path):
    _, expected = published
    environment = {"HF_ENDPOINT": hub_endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf")}
    loaded = load_in_fresh_process("pipeline", environment, test_sentences[:3], blocked="hf_srcfeat")
    assert loaded["module"].startswith("transformers_modules.")
    assert loaded["class"] == "SourceFeatureTranslationPipeline"
    assert loaded["translations"] == [text.strip() for text in expected]


@pytest.mark.slow
def test_loads_offline_from_the_hugging_face_cache(published, hub_endpoint, test_sentences, tmp_path):
    _, expected = published
    cache = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub_endpoint}
    load_in_fresh_process("remote", cache, test_sentences[:3], blocked="hf_srcfeat")  # fills the cache
    offline = {**cache, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}  # nothing there
    loaded = load_in_fresh_process("remote", offline, test_sentences[:3], blocked="hf_srcfeat")
    assert loaded["translations"] == expected


#: The start of a script run in a fresh interpreter where hf_srcfeat cannot be imported.
WITHOUT_HF_SRCFEAT = """
import json, sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hf_srcfeat":
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Blocker())
"""


#: Run in a fresh interpreter without hf_srcfeat: a published folder loaded through its shipped code, saved again
#: (as after fine-tuning), still translates through the pipeline its config names.
RESAVE_LOADER = WITHOUT_HF_SRCFEAT + """
import transformers
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder, saved, sentences = json.loads(sys.stdin.read())
AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).save_pretrained(saved)
AutoTokenizer.from_pretrained(folder, trust_remote_code=True).save_pretrained(saved)
translator = transformers.pipeline("source-feature-translation", model=saved, trust_remote_code=True, num_beams=4,
                                   max_new_tokens=20)
print(json.dumps([result["translation_text"] for result in translator(sentences)]))
"""


@pytest.mark.slow
def test_a_published_model_saved_again_through_its_shipped_code_keeps_its_pipeline(published, test_sentences,
                                                                                    tmp_path):
    folder, expected = published
    completed = subprocess.run([sys.executable, "-c", RESAVE_LOADER], capture_output=True, text=True, timeout=600,
                               input=json.dumps([str(folder / "repository"), str(tmp_path / "saved"),
                                                 test_sentences[:3]]))
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == expected


#: Run in a fresh interpreter without hf_srcfeat: load each published folder through its shipped code alone.
REMOTE_CODE_LOADER = WITHOUT_HF_SRCFEAT + """
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folders, sentences = json.loads(sys.stdin.read())
generated = {}
for model_type, folder in folders.items():
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    with torch.no_grad():
        output = model.generate(**tokenizer(sentences, padding=True, return_tensors="pt"), num_beams=4,
                                min_new_tokens=8, max_new_tokens=8)
    generated[model_type] = output.tolist()
print(json.dumps(generated))
"""


#: The code every published repository ships: the tokenizer with its annotators, and the pipeline.
SHIPPED_WITH_EVERY_MODEL = [
    "annotated_sentence.py", "annotation_cache.py", "annotator.py", "annotator_spacy.py", "annotator_stanza.py",
    "annotators.py", "configuration_srcfeat_transformer.py", "damaged_files.py", "decoding_options.py",
    "dependency_tree.py", "feature_dropout.py", "feature_vocabulary.py", "file_digests.py", "loading_saved.py",
    "parse_phrases.py",
    "pipeline_translation.py", "safe_writing.py", "sequence_scores.py", "source_features.py", "subword_training.py",
    "tokenization_pretrained_source_features.py", "tokenization_source_features.py"]
BACKBONE = ["attention.py", "decoder_step.py", "decoding.py", "dropout.py", "embeddings.py", "generation_preparation.py",
            "label_smoothed_cross_entropy.py", "linear.py", "modeling_srcfeat_transformer.py",
            "single_row_products.py"]
#: What each model type ships besides: its own configuration and modeling files on top of the backbone.
SHIPPED_PER_MODEL_TYPE = {
    "srcfeat_transformer": BACKBONE,
    **{model_type: [*BACKBONE, f"configuration_{model_type}.py", f"modeling_{model_type}.py",
                    *(["closed_gates.py"] if model_type != "relevance_features" else [])]  # the graft gates
       for model_type in ("deps_san", "relevance_features", "diverse_input", "phrase_rep", "latent_feedback")},
    "srcfeat_composed": [*BACKBONE, "configuration_composed.py", "modeling_composed.py", "closed_gates.py",
                         *(f"{kind}_{method}.py" for kind in ("configuration", "modeling") for method in
                           ("deps_san", "relevance_features", "diverse_input", "phrase_rep", "latent_feedback"))],
}


def test_the_shipped_code_loads_without_the_parsers_or_datasets_installed():
    """Transformers refuses remote code whose imports are missing (outside try blocks): loading a published model
    or tokenizer needs torch, transformers and the tokenizer's libraries, not Stanza or spaCy (only parsing raw text
    needs them)."""
    from transformers.dynamic_module_utils import get_imports, get_relative_import_files

    package = REPO / "hf_srcfeat"
    for entry in ("modeling_srcfeat_transformer.py", "tokenization_source_features.py",
                  "tokenization_pretrained_source_features.py", "pipeline_translation.py"):
        closure = [package / entry, *map(Path, get_relative_import_files(package / entry))]
        needed = {name for file in closure for name in get_imports(file)}
        assert not needed & {"stanza", "spacy", "datasets"}, (entry, sorted(needed & {"stanza", "spacy", "datasets"}))


@pytest.mark.slow
def test_every_model_type_of_the_zoo_runs_from_its_published_folder_on_shipped_code_alone(
        feature_tokenizer, test_sentences, tmp_path):
    from hf_srcfeat import MODEL_CLASSES_BY_TYPE
    from hf_srcfeat.commands.train import feature_vocabulary_arguments

    sentences, folders, expected = test_sentences[:2], {}, {}
    batch = feature_tokenizer(sentences, padding=True, return_tensors="pt")
    for model_type, model_class in MODEL_CLASSES_BY_TYPE.items():
        torch.manual_seed(0)
        config_class = model_class.config_class
        # The composed model type with all four extension points in use (the shared half-precision variant).
        composition = VARIANTS["composed"][1] if model_type == "srcfeat_composed" else {}
        config = tiny_method_config(config_class, feature_tokenizer, **composition,
                                    **feature_vocabulary_arguments(config_class, feature_tokenizer))
        model = model_class(config).eval()
        model.save_pretrained(tmp_path / model_type / "run")
        feature_tokenizer.save_pretrained(tmp_path / model_type / "run")
        folders[model_type] = str(publish.main([str(tmp_path / model_type / "run"), "--repo_id", f"test/{model_type}",
                                                "--output", str(tmp_path / model_type / "repository"), "--dry-run"]))
        shipped = sorted(path.name for path in Path(folders[model_type]).glob("*.py"))
        assert shipped == sorted({*SHIPPED_WITH_EVERY_MODEL, *SHIPPED_PER_MODEL_TYPE[model_type]}), model_type
        with torch.no_grad():
            expected[model_type] = model.generate(**batch, num_beams=4, min_new_tokens=8, max_new_tokens=8).tolist()
    completed = subprocess.run([sys.executable, "-c", REMOTE_CODE_LOADER], input=json.dumps([folders, sentences]),
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == expected


def test_a_card_names_the_checkpoint_a_run_started_from_without_the_trainers_paths(tmp_path):
    from hf_srcfeat.commands.publish import checkpoint_name

    assert checkpoint_name("Helsinki-NLP/opus-mt-en-de") == "`Helsinki-NLP/opus-mt-en-de`"
    snapshot = "/home/me/.cache/huggingface/hub/models--facebook--nllb-200-distilled-600M/snapshots/abc123"
    assert checkpoint_name(snapshot) == "`facebook/nllb-200-distilled-600M`"
    (tmp_path / "checkpoints" / "opus").mkdir(parents=True)
    assert checkpoint_name(str(tmp_path / "checkpoints" / "opus")) == "a local checkpoint (`opus`)"
    assert str(tmp_path) not in checkpoint_name(str(tmp_path / "checkpoints" / "opus"))


def test_a_card_names_a_source_parser_other_than_the_examples_english_stanza(tmp_path):
    from hf_srcfeat.commands.publish import run_facts, this_model_section

    spacy_french = {"backend": "spacy", "model": "fr_core_news_sm", "language": "fr", "model_version": "3.8.0"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"annotator_settings": spacy_french}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deps_san"}))
    section = this_model_section(run_facts(tmp_path, languages=["fr", "en"]))
    assert "- **Source parsing:** spaCy pipeline `fr_core_news_sm` (fr; install it: `python -m spacy download fr_core_news_sm`)" \
           ". The examples below show English sentences parsed by Stanza: give sentences in fr" in section
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"annotator_settings": {"backend": "stanza",
                                                                                        "language": "en"}}))
    assert "Source parsing" not in this_model_section(run_facts(tmp_path, languages=["en", "de"]))
