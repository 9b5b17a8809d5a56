"""hf-srcfeat-train: Seq2SeqTrainer on real Multi30k pairs, generation-based metrics, safe output folders,
and the same script under torchrun with 2 CPU processes."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_srcfeat.commands import train
from hf_srcfeat.file_digests import file_digest
from hf_srcfeat.provenance import code_version

from .helpers import REPO

TINY = ["--d_model", "64", "--encoder_layers", "2", "--decoder_layers", "2", "--attention_heads", "4",
        "--ffn_dim", "128", "--vocab_size", "1000", "--report_to", "none", "--use_cpu", "--seed", "3",
        "--save_strategy", "no", "--disable_tqdm", "true"]


@pytest.mark.slow
def test_train_script_lowers_the_loss_and_reports_bleu_and_chrf(multi30k_dir, tmp_path):
    output_dir = tmp_path / "run"
    results = train.main(TINY + [
        "--output_dir", str(output_dir), "--do_train", "--do_eval", "--max_train_samples", "400",
        "--max_eval_samples", "40", "--max_predict_samples", "20", "--max_steps", "150",
        "--per_device_train_batch_size", "16", "--learning_rate", "3e-3", "--warmup_steps", "10",
        "--logging_steps", "10", "--predict_with_generate", "--do_predict", "--generation_max_length", "40",
        "--no_repeat_ngram_size", "3", "--early_stopping", "--generation_num_beams", "2", "--data_dir",
        str(multi30k_dir), "--max_source_length", "100",
    ])
    saved = json.loads((output_dir / "results.json").read_text())
    losses = [entry["loss"] for entry in saved["log_history"] if "loss" in entry]
    assert len(losses) == 15 and losses[-1] < losses[0] - 1.0, losses
    for split in ("eval", "test"):
        metrics = results[f"{split}_metrics"]
        assert 0.0 <= metrics[f"{split}_bleu"] <= 100.0 and 0.0 < metrics[f"{split}_chrf"] <= 100.0
    assert saved["code_version"] and saved["seed"] == 3 and saved["num_parameters"] > 0
    assert not (output_dir / "training_args.bin").exists(), "no pickled files in the model folder"
    assert len((output_dir / "test_predictions.txt").read_text().splitlines()) == 20
    assert AutoModelForSeq2SeqLM.from_pretrained(output_dir).config.d_model == 64
    assert saved["test_setup"]["no_repeat_ngram_size"] == 3, "the decoding options are recorded with the scores"
    assert json.loads((output_dir / "generation_config.json").read_text())["no_repeat_ngram_size"] == 3
    assert saved["test_setup"]["early_stopping"] is True
    # What ran: the training arguments, the libraries, the data files by absolute path and by content
    assert saved["training_args"]["learning_rate"] == 3e-3 and saved["resumed_from"] is None
    assert set(saved["library_versions"]) >= {"torch", "transformers", "datasets", "sacrebleu"}
    assert all(Path(path).is_absolute() for path in saved["data_files"])
    assert saved["data_file_digests"] == {path: file_digest(Path(path)) for path in saved["data_files"]}
    assert AutoTokenizer.from_pretrained(output_dir).model_max_length == 100, \
        "translation cuts sources where training and the test predictions cut them"
    assert saved["resolved_paths"]["stanza_dir"] == os.environ["HF_SRCFEAT_STANZA_DIR"], "set by the environment"


def test_train_script_refuses_to_write_into_a_non_empty_output_dir(multi30k_dir, tmp_path):
    (tmp_path / "precious.txt").write_text("user data")
    with pytest.raises(SystemExit, match="not empty"):
        train.main(TINY + ["--output_dir", str(tmp_path), "--do_train", "--max_steps", "1"])
    assert (tmp_path / "precious.txt").read_text() == "user data"


def write_source_parses(annotator, multi30k_dir, folder, sizes: dict[str, int]) -> list[str]:
    """CoNLL-U parses of the first sources of each split (made by the test session's Stanza), as a user's parser
    would write them; returns the train.py options naming them."""
    from hf_srcfeat.conllu import write_conllu
    from hf_srcfeat.data.multi30k import load_multi30k

    options = []
    for split, option in (("train", "train"), ("val", "validation"), ("test_2016_flickr", "test")):
        sources = list(load_multi30k(split, data_dir=multi30k_dir, limit=sizes[split])["source"])
        write_conllu(annotator.annotate(sources, show_progress=False), folder / f"{split}.en.conllu.gz")
        options += [f"--{option}_source_conllu", str(folder / f"{split}.en.conllu.gz")]
    return options


PARSED_RUN = ["--do_train", "--max_train_samples", "200", "--max_eval_samples", "20", "--max_predict_samples", "20",
              "--max_steps", "6", "--per_device_train_batch_size", "16", "--logging_steps", "1"]


@pytest.mark.slow
def test_pre_parsed_conllu_sources_train_without_stanza_exactly_as_parsing_the_raw_text(
        stanza_annotator, multi30k_dir, tmp_path):
    options = write_source_parses(stanza_annotator, multi30k_dir, tmp_path,
                                  {"train": 200, "val": 20, "test_2016_flickr": 20})
    from_text = train.main(TINY + PARSED_RUN + ["--output_dir", str(tmp_path / "text"),
                                                "--annotation_cache", str(stanza_annotator.cache.path)])
    from_parses = train.main(TINY + PARSED_RUN + options + ["--output_dir", str(tmp_path / "parsed"),
                                                            "--stanza_dir", str(tmp_path / "no_stanza_here")])
    losses = [[entry["loss"] for entry in run["log_history"] if "loss" in entry] for run in (from_text, from_parses)]
    assert losses[0] == losses[1] and len(losses[0]) == 6
    assert str(tmp_path / "train.en.conllu.gz") in from_parses["data_files"]


def test_each_test_set_takes_its_own_parses_and_their_count_is_checked(stanza_annotator, multi30k_dir, tmp_path):
    from hf_srcfeat.conllu import write_conllu
    from hf_srcfeat.data.multi30k import load_multi30k

    options = write_source_parses(stanza_annotator, multi30k_dir, tmp_path,
                                  {"train": 200, "val": 20, "test_2016_flickr": 20})
    options = options[:options.index("--test_source_conllu")]
    tests = []
    for name, start in (("first", 0), ("second", 10)):
        pairs = load_multi30k("test_2016_flickr", data_dir=multi30k_dir).select(range(start, start + 6))
        (tmp_path / f"{name}.tsv").write_text("".join(f"{source}\t{target}\n" for source, target in
                                                      zip(pairs["source"], pairs["target"], strict=True)))
        write_conllu(stanza_annotator.annotate(list(pairs["source"]), show_progress=False),
                     tmp_path / f"{name}.en.conllu")
        tests.append(name)
    run = TINY + PARSED_RUN + options + ["--dataset_name", "multi30k", "--do_predict", "--test_file",
                                         *(str(tmp_path / f"{name}.tsv") for name in tests),
                                         "--stanza_dir", str(tmp_path / "no_stanza_here")]
    with pytest.raises(SystemExit, match=r"--test_source_conllu gives 1 file\(s\) for 2 test set\(s\) \(first, "
                                         r"second\)"):
        train.main(run + ["--output_dir", str(tmp_path / "one"), "--test_source_conllu",
                          str(tmp_path / "first.en.conllu")])
    results = train.main(run + ["--output_dir", str(tmp_path / "both"), "--test_source_conllu",
                                *(str(tmp_path / f"{name}.en.conllu") for name in tests)])
    assert set(results["test_sets"]) == {"first", "second"}, "scored without Stanza"


def test_pre_parsed_sources_that_do_not_follow_the_corpus_are_refused_naming_the_first_mismatch(
        stanza_annotator, multi30k_dir, tmp_path):
    from hf_srcfeat.conllu import read_conllu, write_conllu

    options = write_source_parses(stanza_annotator, multi30k_dir, tmp_path, {"train": 10, "val": 20,
                                                                             "test_2016_flickr": 20})
    run = TINY + PARSED_RUN + options + ["--output_dir", str(tmp_path / "run"), "--max_train_samples", "12"]
    with pytest.raises(ValueError, match=r"has 10 sentences but the train split has 12 sources"):
        train.main(run)
    parses = list(read_conllu(tmp_path / "train.en.conllu.gz"))
    write_conllu([parses[0], parses[2], parses[1], *parses[3:]], tmp_path / "train.en.conllu.gz")
    with pytest.raises(ValueError, match=r"train.en.conllu.gz: sentence 2 .* but train source 2 is"):
        train.main(run[:-1] + ["10"])
    # Without `# text` (not every parser writes it) the words show the swap
    untexted = [dataclasses.replace(parse, text="") for parse in parses]
    write_conllu([untexted[0], untexted[2], untexted[1], *untexted[3:]], tmp_path / "train.en.conllu.gz")
    with pytest.raises(ValueError, match=r"sentence 2 .* is the parse of 'A little girl climbing into a wooden "
                                         r"playhouse\.', but train source 2 is 'Several men in hard hats"):
        train.main(run[:-1] + ["10"])


def test_a_parse_without_its_text_is_matched_to_its_source_by_its_words(stanza_annotator, test_sentences):
    from hf_srcfeat.annotated_sentence import AnnotatedSentence, AnnotatedWord

    parses = stanza_annotator.annotate(test_sentences, show_progress=False)
    untexted = [dataclasses.replace(parse, text="") for parse in parses]
    assert not any(train.parses_another_sentence(parse, source)
                   for parse, source in zip(untexted, test_sentences, strict=True))
    assert all(train.parses_another_sentence(parse, source)  # each paired with the next sentence
               for parse, source in zip(untexted[:-1], test_sentences[1:], strict=True))
    # French "du" as its syntactic words "de le" is still this sentence
    words = [AnnotatedWord(text, "X", "X", text, "dep", 0 if index == 0 else 1)
             for index, text in enumerate(["Il", "mange", "de", "le", "pain", "."])]
    assert not train.parses_another_sentence(AnnotatedSentence(words), "Il mange du pain.")


@pytest.mark.slow
def test_torchrun_with_two_cpu_processes_trains_one_shared_model(multi30k_dir, tmp_path):
    output_dir = tmp_path / "ddp"
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_SRCFEAT_MULTI30K_DIR": str(multi30k_dir)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
               str(REPO / "training" / "train.py"), *TINY, "--output_dir", str(output_dir), "--do_train",
               "--max_train_samples", "256", "--max_steps", "8", "--per_device_train_batch_size", "8",
               "--ddp_backend", "gloo", "--logging_steps", "4"]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    fingerprints = [json.loads((output_dir / f"parameters_rank{rank}.json").read_text())["fingerprint"]
                    for rank in (0, 1)]
    assert fingerprints[0] == fingerprints[1]
    results = json.loads((output_dir / "results.json").read_text())
    # 8 steps x 2 processes x 8 sentences = 128 of the 256 sentences: half an epoch.
    assert results["train_metrics"]["epoch"] == pytest.approx(0.5)


@pytest.mark.slow
def test_the_evaluation_loss_under_torchrun_is_the_one_process_mean_over_the_same_tokens(model_folder, multi30k_dir,
                                                                                         tmp_path):
    """16 sentences, batches of 4: each process's batches are its own, none repeated to even them out; each batch's
    loss is its own token mean (the Trainer's count would mix in the other process's tokens)."""
    evaluation = ["--model_name_or_path", str(model_folder), "--do_eval", "--max_eval_samples", "16",
                  "--per_device_eval_batch_size", "4", "--report_to", "none", "--use_cpu", "--disable_tqdm", "true",
                  "--data_dir", str(multi30k_dir)]
    alone = train.main([*evaluation, "--output_dir", str(tmp_path / "alone")])["eval_metrics"]["eval_loss"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_SRCFEAT_MULTI30K_DIR": str(multi30k_dir)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29535",
               str(REPO / "training" / "train.py"), *evaluation, "--output_dir", str(tmp_path / "ddp"),
               "--ddp_backend", "gloo"]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    distributed = json.loads((tmp_path / "ddp" / "eval_results.json").read_text())
    distributed = distributed[-1] if isinstance(distributed, list) else distributed
    assert distributed["eval_metrics"]["eval_loss"] == pytest.approx(alone, rel=1e-7)


@pytest.mark.slow
def test_torchrun_without_a_gpu_or_use_cpu_is_refused_rather_than_training_a_model_per_process(tmp_path):
    """Transformers runs such processes unsynchronized: each trained its own model on all the data, and the losses
    came out doubled."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    arguments = [argument for argument in TINY if argument != "--use_cpu"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29534",
               str(REPO / "training" / "train.py"), *arguments, "--output_dir", str(tmp_path / "ddp"), "--do_train",
               "--max_steps", "1", "--ddp_backend", "gloo"]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=REPO, timeout=600)
    assert completed.returncode != 0
    assert "2 processes were started (torchrun or accelerate launch), but without a GPU Transformers would train a " \
           "separate model in each: add --use_cpu" in completed.stderr
    assert not (tmp_path / "ddp").exists()


@pytest.mark.slow
def test_a_wall_clock_budget_stops_training_early_and_still_saves_the_model(multi30k_dir, tmp_path):
    output_dir = tmp_path / "budget"
    results = train.main(TINY + ["--output_dir", str(output_dir), "--do_train", "--max_train_samples", "200",
                                 "--max_steps", "500", "--per_device_train_batch_size", "8",
                                 "--max_train_minutes", "0.0001"])
    assert results["train_metrics"]["epoch"] < 0.1  # stopped after the first step, not 500
    assert (output_dir / "model.safetensors").exists()


@pytest.mark.parametrize("recipe", sorted((REPO / "examples" / "recipes").glob("*.json")), ids=lambda p: p.stem)
def test_every_recipe_parses_and_builds_a_valid_model_config(recipe):
    model_args, data_args, training_args = train.parse_arguments([str(recipe)])
    overrides = json.loads(model_args.config_overrides or "{}")
    config = train.MODEL_CONFIGS[model_args.model_type](d_model=model_args.d_model, **overrides)
    assert config.model_type == model_args.model_type
    assert training_args.predict_with_generate and data_args.source_lang == "en"


@pytest.mark.parametrize("recipe", sorted((REPO / "examples" / "recipes" / "pretraining").glob("*.json")),
                         ids=lambda p: p.stem)
def test_every_pretraining_recipe_parses_and_matches_its_translation_recipe(recipe):
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments

    from hf_srcfeat.commands import pretrain_dae

    dae_args, _ = HfArgumentParser((pretrain_dae.DaeArguments, Seq2SeqTrainingArguments)).parse_json_file(
        json_file=str(recipe))
    users = [path for path in (REPO / "examples" / "recipes").glob("*.json")
             if json.loads(path.read_text()).get("tokenizer_name_or_path") == dae_args_output(recipe)]
    assert users, f"no translation recipe uses {recipe.name}"
    for path in users:
        model_args, _, _ = train.parse_arguments([str(path)])
        overrides = json.loads(model_args.config_overrides)
        assert overrides["lfe_pretrained_from"] == dae_args_output(recipe)
        assert (model_args.d_model, model_args.encoder_layers, model_args.layernorm_position,
                model_args.vocab_size) == \
            (dae_args.d_model, dae_args.encoder_layers, dae_args.layernorm_position, dae_args.vocab_size)


def dae_args_output(recipe) -> str:
    return json.loads(recipe.read_text())["output_dir"]


def test_a_new_model_starts_from_its_seed_whatever_drew_from_the_random_generator_before(feature_tokenizer):
    """Annotating uncached sentences builds Stanza's layers, which draws from torch's generator between start-up and
    the model; the initial weights must not depend on that (i.e. on what the annotation cache held)."""
    import torch

    model_args = train.ModelArguments(model_type="srcfeat_transformer", d_model=32, ffn_dim=64, encoder_layers=1,
                                      decoder_layers=1, attention_heads=4)
    first = train.build_model(model_args, feature_tokenizer, seed=5)
    torch.nn.Linear(256, 256)  # what building a Stanza model does to the generator
    second = train.build_model(model_args, feature_tokenizer, seed=5)
    assert all(torch.equal(first.state_dict()[name], weight) for name, weight in second.state_dict().items())
    other_seed = train.build_model(model_args, feature_tokenizer, seed=6)
    assert not torch.equal(first.model.shared.weight, other_seed.model.shared.weight)


def test_a_composed_model_gets_the_tokenizers_vocabulary_sizes_for_its_components(feature_tokenizer):
    overrides = {"components": ["relevance_features", "deps_san"], "relevance_combine": "concat"}
    model_args = train.ModelArguments(model_type="srcfeat_composed", d_model=32, ffn_dim=64, encoder_layers=1,
                                      decoder_layers=1, attention_heads=4, config_overrides=json.dumps(overrides))
    model = train.build_model(model_args, feature_tokenizer, seed=1)
    sizes = feature_tokenizer.feature_vocabularies.sizes()
    assert model.config.num_lemmas == sizes["num_lemmas"]
    assert model.get_encoder().embed_source.factor_embeddings["lemma"].num_embeddings == sizes["num_lemmas"]


@pytest.mark.slow
def test_torch_compile_traces_the_model_once_for_every_token_batch_shape(multi30k_dir, tmp_path):
    """`--torch_compile` over token batches whose lengths change every step: one compiled training graph, dynamic
    from the first batch (dynamo's defaults compile a second graph at the second batch); dynamo's settings are back
    to what they were afterwards."""
    import torch
    import torch.fx.experimental._config as fx_config

    torch._dynamo.reset()
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    results = train.main(TINY + ["--output_dir", str(tmp_path / "run"), "--do_train", "--max_train_samples", "200",
                                 "--max_steps", "6", "--max_tokens_per_batch", "400", "--logging_steps", "3",
                                 "--torch_compile", "--torch_compile_backend", "eager", "--data_dir", str(multi30k_dir)])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before == 1
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert torch._dynamo.config.assume_static_by_default and fx_config.use_duck_shape


@pytest.mark.slow
def test_train_script_stores_trees_in_o_of_s_and_trains_deps_san_from_them(multi30k_dir, tmp_path):
    """The tokenized training set keeps each sentence's heads, not its [S, S] distance matrix; the collator builds
    the matrix per batch, and Deps-SAN (which reads it) trains."""
    results = train.main(TINY + ["--output_dir", str(tmp_path / "run"), "--do_train", "--model_type", "deps_san",
                                 "--max_train_samples", "64", "--max_steps", "4", "--per_device_train_batch_size", "16",
                                 "--logging_steps", "1"])
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert len(losses) == 4 and all(loss == loss for loss in losses)


@pytest.mark.slow
def test_torchrun_trains_one_shared_model_from_json_lines_with_token_batches(multi30k_dir, tmp_path):
    """Two processes, a user's JSON-lines corpus of another language pair, and token-budget batches dealt out
    by accelerate: both ranks end with the same parameters."""
    from hf_srcfeat.data.multi30k import load_multi30k

    pairs = load_multi30k("train", "en", "fr", multi30k_dir, limit=256)
    corpus = tmp_path / "train.jsonl"
    corpus.write_text("".join(json.dumps({"translation": {"en": s, "fr": t}}, ensure_ascii=False) + "\n"
                              for s, t in zip(pairs["source"], pairs["target"], strict=True)), encoding="utf-8")
    output_dir = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29534",
               str(REPO / "training" / "train.py"), *TINY, "--output_dir", str(output_dir), "--do_train",
               "--source_lang", "en", "--target_lang", "fr", "--train_file", str(corpus), "--validation_file",
               str(corpus), "--max_tokens_per_batch", "400", "--max_steps", "6", "--ddp_backend", "gloo",
               "--logging_steps", "3"]
    completed = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                               cwd=REPO, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    fingerprints = [json.loads((output_dir / f"parameters_rank{rank}.json").read_text())["fingerprint"]
                    for rank in (0, 1)]
    assert fingerprints[0] == fingerprints[1]
    assert json.loads((output_dir / "results.json").read_text())["data_files"][0] == str(corpus)
    shared = [json.loads((output_dir / f"parameters_rank{rank}.json").read_text())["tokenized_cache_files"]
              for rank in (0, 1)]
    assert shared[0]["train"] and shared[0] == shared[1], "both ranks read the one prepared dataset"


@pytest.mark.slow
def test_a_tokenizer_saved_before_morphological_features_still_trains(multi30k_dir, tmp_path):
    """A tokenizer without a FEATS vocabulary (saved before it existed, like the benchmark's) encodes no feats_ids:
    the stored encodings must not expect that column."""
    first = tmp_path / "first"
    train.main(TINY + ["--output_dir", str(first), "--do_train", "--max_train_samples", "100", "--max_steps", "1",
                       "--per_device_train_batch_size", "8",
                       "--data_dir", str(multi30k_dir)])
    vocabulary = json.loads((first / "feature_vocab.json").read_text())
    del vocabulary["feats"]
    (first / "feature_vocab.json").write_text(json.dumps(vocabulary))
    results = train.main(TINY + ["--output_dir", str(tmp_path / "second"), "--tokenizer_name_or_path", str(first),
                                 "--do_train", "--max_train_samples", "100", "--max_steps", "2",
                                 "--per_device_train_batch_size", "8",
                                 "--data_dir", str(multi30k_dir)])
    assert results["global_step"] == 2


@pytest.mark.slow
def test_user_factors_in_conllu_misc_train_a_relevance_model(stanza_annotator, multi30k_dir, tmp_path):
    from dataclasses import replace

    from hf_srcfeat.conllu import read_conllu, write_conllu

    options = write_source_parses(stanza_annotator, multi30k_dir, tmp_path,
                                  {"train": 200, "val": 20, "test_2016_flickr": 20})
    for path in tmp_path.glob("*.conllu.gz"):  # a casing factor in MISC, as a user's pipeline would add it
        sentences = [sentence.__class__(words=[replace(word, factors=(("case", "Cap" if word.text[:1].isupper()
                                                                      else "other"),)) for word in sentence.words],
                                        sentence_id=sentence.sentence_id, text=sentence.text)
                     for sentence in read_conllu(path)]
        write_conllu(sentences, path)
    results = train.main(TINY + PARSED_RUN + options + [
        "--output_dir", str(tmp_path / "run"), "--model_type", "relevance_features",
        "--config_overrides", json.dumps({"relevance_combine": "concat", "source_factors": ["pos", "case"]})])
    assert results["config"]["extra_factors"] == {"case": 5}
    assert json.loads((tmp_path / "run" / "feature_vocab.json").read_text())["extra_factors"]["case"][3:] == \
        ["other", "Cap"]


def test_the_lemma_vocabulary_size_and_minimum_frequency_are_arguments(stanza_annotator, multi30k_dir, tmp_path):
    options = write_source_parses(stanza_annotator, multi30k_dir, tmp_path, {"train": 200, "val": 20,
                                                                             "test_2016_flickr": 20})
    run = TINY + PARSED_RUN + options + ["--max_steps", "1"]
    sizes = {}
    for name, limits in {"capped": ["--max_lemmas", "40"], "every": ["--max_lemmas", "0", "--lemma_min_frequency",
                                                                      "1"], "default": []}.items():
        train.main(run + limits + ["--output_dir", str(tmp_path / name)])
        vocabularies = json.loads((tmp_path / name / "feature_vocab.json").read_text())
        sizes[name] = len(vocabularies["lemma"])
    assert sizes["capped"] == 40 and sizes["every"] > sizes["default"] > sizes["capped"], sizes
    with pytest.raises(SystemExit, match="--lemma_min_frequency must be at least 1"):
        train.main(run + ["--lemma_min_frequency", "0", "--output_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists(), "refused before any work"



@pytest.mark.slow
def test_the_checkpoint_with_the_best_validation_bleu_is_kept(multi30k_dir, tmp_path):
    """Chen et al. keep the checkpoint with the highest dev BLEU (the diverse input paper recipe does so)."""
    output_dir = tmp_path / "run"
    results = train.main([*TINY[:-4], "--disable_tqdm", "true", "--output_dir", str(output_dir), "--do_train",
                          "--do_eval", "--max_train_samples", "200", "--max_eval_samples", "10", "--max_steps", "6", "--per_device_train_batch_size", "16",
                          "--learning_rate", "3e-3", "--eval_strategy", "steps", "--eval_steps", "2",
                          "--save_strategy", "steps", "--save_steps", "2", "--load_best_model_at_end", "true",
                          "--metric_for_best_model", "bleu", "--greater_is_better", "true",
                          "--predict_with_generate", "--generation_max_length", "16", "--data_dir", str(multi30k_dir)])
    evaluations = [(entry["step"], entry["eval_bleu"]) for entry in results["log_history"] if "eval_bleu" in entry]
    assert [step for step, _ in evaluations] == [2, 4, 6]
    best_step, best_bleu = max(evaluations, key=lambda item: item[1])
    assert results["best_metric"] == {"bleu": best_bleu}
    assert results["best_model_checkpoint"].endswith(f"checkpoint-{best_step}")
    recipe = train.read_config_file(str(REPO / "examples" / "recipes" / "paper" / "diverse_input_wmt14_en_de.json"))
    assert (recipe["metric_for_best_model"], recipe["eval_steps"], recipe["load_best_model_at_end"]) == ("bleu", 1000,
                                                                                                        True)


def test_resuming_from_a_checkpoint_with_a_truncated_weights_file_is_refused_before_any_work(tmp_path):
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-10"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")  # header cut short
    (checkpoint / "trainer_state.json").write_text("{}")
    for name in ("optimizer.pt", "scheduler.pt"):
        torch.save({}, checkpoint / name)
    with pytest.raises(SystemExit, match=r"--resume_from_checkpoint: .*checkpoint-10/model.safetensors is truncated"):
        train.main(["--output_dir", str(run), "--do_train", "--resume_from_checkpoint", "True",
                    "--dataset_name", "multi30k", "--max_steps", "1"])


def test_a_resumed_run_keeps_its_history_and_time_and_refuses_another_model_or_another_runs_vocabulary(
        multi30k_dir, feature_tokenizer, tmp_path, caplog):
    def common_in(folder) -> list[str]:
        return TINY + ["--output_dir", str(folder), "--do_train", "--max_train_samples", "64", "--max_eval_samples",
                       "8", "--max_predict_samples", "8", "--per_device_train_batch_size", "8", "--save_strategy",
                       "steps", "--save_steps", "2", "--eval_strategy", "steps", "--eval_steps", "2",
                       "--generation_max_length", "8", "--data_dir", str(multi30k_dir)]

    run = tmp_path / "run"
    common = common_in(run)
    with caplog.at_level("INFO", logger="hf_srcfeat.train"):
        first = train.main(common + ["--max_steps", "2", "--predict_with_generate", "--do_predict"])
    assert "step 2, validation: BLEU" in caplog.text and "test set test_2016_flickr (8 sentences): BLEU" in caplog.text
    test = first["test_sets"]["test_2016_flickr"]["metrics"]
    assert test["test_perplexity"] == pytest.approx(math.exp(test["test_loss"]))
    caplog.clear()
    recorded = json.loads((run / "checkpoint-2" / "training_time.json").read_text())["train_seconds"]
    with caplog.at_level("WARNING"):
        # "True": the newest checkpoint of the output folder, as Transformers' examples take it
        second = train.main(common + ["--max_steps", "4", "--resume_from_checkpoint", "True"])
    assert "missing keys" not in caplog.text, "tied embeddings are not missing from a checkpoint"
    [earlier] = second["earlier_results"]
    assert earlier["global_step"] == 2 and earlier["test_sets"] == first["test_sets"], "the first run's scores stay"
    assert second["global_step"] == 4 and second["train_seconds"] > recorded, "time adds up across resumptions"
    assert not list(run.glob("test*_predictions.txt")), "the first model's translations do not stay beside the new one"
    saved = json.loads((run / "results.json").read_text())
    assert saved["earlier_results"][0]["global_step"] == 2
    assert saved["resumed_from"] == str((run / "checkpoint-2").resolve())
    assert saved["resumed_from_code_version"] == code_version(), "the code that trained up to the checkpoint"

    # Another model, or another run's checkpoint without its vocabulary: refused before anything is written.
    checkpoint = str(run / "checkpoint-4")
    with pytest.raises(SystemExit, match=r"is another model than this run builds: --d_model 32 \(the checkpoint's: "
                                         r"64\)"):
        train.main(common + ["--max_steps", "6", "--resume_from_checkpoint", checkpoint, "--d_model", "32"])
    with pytest.raises(SystemExit, match="is a checkpoint of another run than --output_dir .*would train a new "
                                         f"tokenizer.*--tokenizer_name_or_path {checkpoint}"):
        train.main(common_in(tmp_path / "other") + ["--max_steps", "6", "--resume_from_checkpoint", checkpoint])
    assert not (tmp_path / "other").exists()
    continued = train.main(common_in(tmp_path / "continued") + ["--max_steps", "6", "--resume_from_checkpoint",
                                                                  checkpoint, "--tokenizer_name_or_path", checkpoint])
    assert continued["global_step"] == 6
    with pytest.raises(SystemExit, match=f"--resume_from_checkpoint {checkpoint}: this tokenizer does not belong to "
                                         "this model"):
        train.check_resumed_tokenizer(checkpoint, feature_tokenizer)


def test_a_batch_size_flag_asks_for_sentence_batches_in_any_spelling_and_over_a_recipe(tmp_path):
    recipe = str(REPO / "examples" / "recipes" / "baseline_multi30k_en_de.json")
    for flag in ("--per_device_train_batch_size", "--per-device-train-batch-size", "--per_device_train_batch"):
        _, data_args, training_args = train.parse_arguments(["--output_dir", "unused", flag, "32"])
        assert (data_args.max_tokens_per_batch, training_args.per_device_train_batch_size) == (None, 32), flag
        _, data_args, training_args = train.parse_arguments([recipe, flag, "32"])
        assert (data_args.max_tokens_per_batch, training_args.per_device_train_batch_size) == (None, 32), flag
    _, data_args, _ = train.parse_arguments([recipe])
    assert data_args.max_tokens_per_batch == 1024, "the recipe's token budget"
    _, data_args, _ = train.parse_arguments([recipe, "--max_tokens_per_batch", "2048",
                                             "--per_device_train_batch_size", "32"])
    assert data_args.max_tokens_per_batch == 2048, "both flags: the token budget decides"
    _, _, training_args = train.parse_arguments(["--output_dir", "unused", "--learning-rate", "2e-4"])
    assert training_args.learning_rate == 2e-4, "a dashed flag counts as given"
    _, data_args, _ = train.parse_arguments(["--output_dir", "unused", "--max_source_length", "2000"])
    assert data_args.max_tokens_per_batch == 2000, "the default budget holds the longest example allowed"


def test_the_test_loss_is_the_mean_over_tokens_whatever_the_evaluation_batch_size(model_folder, multi30k_dir,
                                                                                   tmp_path):
    """As fairseq reports it: the Trainer's own mean weighted each batch's mean by its sentences. An evaluation-only
    run reads only what it evaluates."""
    losses = []
    for batch_size in (1, 3, 8):
        results = train.main(["--model_name_or_path", str(model_folder), "--output_dir", str(tmp_path / str(batch_size)),
                              "--do_predict", "--max_predict_samples", "12", "--per_device_eval_batch_size",
                              str(batch_size), "--data_dir", str(multi30k_dir), "--report_to", "none", "--use_cpu"])
        losses.append(results["test_sets"]["test_2016_flickr"]["metrics"]["test_loss"])
    assert losses == pytest.approx([losses[0]] * 3, rel=1e-5)
    # Only evaluating, a run needs no training data, and parses none.
    (tmp_path / "mine.tsv").write_text("A dog runs.\tEin Hund rennt.\nTwo cats sleep.\tZwei Katzen schlafen.\n",
                                       encoding="utf-8")
    (tmp_path / "broken.tsv").write_text("only one column\n", encoding="utf-8")
    results = train.main(["--model_name_or_path", str(model_folder), "--output_dir", str(tmp_path / "mine"),
                          "--do_predict", "--test_file", str(tmp_path / "mine.tsv"), "--train_file",
                          str(tmp_path / "broken.tsv"), "--report_to", "none", "--use_cpu"])
    assert results["train_examples"] is None and results["test_sets"]["mine"]["metrics"]["test_loss"] > 0
    # A trained model's own length limit, never one taken from the test references
    import shutil

    limited = shutil.copytree(model_folder, tmp_path / "limited")
    settings = json.loads((limited / "generation_config.json").read_text())
    (limited / "generation_config.json").write_text(json.dumps({**settings, "max_length": 77}))
    results = train.main(["--model_name_or_path", str(limited), "--output_dir", str(tmp_path / "limit"),
                          "--do_predict", "--test_file", str(tmp_path / "mine.tsv"), "--report_to", "none",
                          "--use_cpu"])
    assert results["test_sets"]["mine"]["setup"]["max_length"] == 77


def test_config_overrides_win_over_the_size_options_and_may_be_a_recipes_mapping():
    model_args = train.ModelArguments(d_model=64, attention_heads=4, config_overrides={"d_model": 48})
    assert train.given_config_overrides(model_args) == {"d_model": 48}
    assert train.model_config(model_args, vocab_size=100).d_model == 48


def test_a_resumed_checkpoint_is_compared_with_the_model_the_options_and_their_overrides_build(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    built = train.model_config(train.ModelArguments(config_overrides='{"d_model": 48, "encoder_ffn_dim": 96}'),
                               vocab_size=100)
    built.save_pretrained(checkpoint)
    train.check_resumed_model(str(checkpoint), train.ModelArguments(
        config_overrides='{"d_model": 48, "encoder_ffn_dim": 96}'), str(tmp_path / "run"))  # the same model
    with pytest.raises(SystemExit, match=r"config_overrides d_model 64 \(the checkpoint's: 48\)"):
        train.check_resumed_model(str(checkpoint), train.ModelArguments(
            config_overrides='{"d_model": 64, "encoder_ffn_dim": 96}'), str(tmp_path / "run"))


def test_a_source_carries_inline_factors_when_most_of_its_tokens_do():
    assert train.carries_inline_factors("Two￨Cap dogs￨lower play￨lower .￨other")
    assert not train.carries_inline_factors("The sign ￨ stands between two words .")


def test_do_sample_is_a_switch_as_in_the_translate_command_and_still_takes_a_value():
    for flags, expected in (([], None), (["--do_sample"], True), (["--do_sample", "false"], False),
                            (["--do_sample", "true", "--top_k", "5"], True)):
        _, data_args, _ = train.parse_arguments(["--output_dir", "unused", *flags])
        assert data_args.do_sample is expected, flags


def test_config_overrides_given_beside_a_recipe_add_to_its_settings_instead_of_replacing_them():
    recipe = "examples/recipes/deps_san_multi30k_en_de.json"
    model_args, _, _ = train.parse_arguments([recipe, "--output_dir", "unused", "--config_overrides",
                                              '{"deps_san_variance": 2.0}'])
    merged = train.given_config_overrides(model_args)
    assert merged["deps_san_variance"] == 2.0 and merged["deps_san_layers"] == [0], "the recipe's layers stay"


@pytest.mark.parametrize(("options", "message"), [
    (["--variant", "relevance_concat", "--config_overrides", '{"feature_dropout": {"pos_ids": 1.5}}'],
     "--model_type relevance_features with these settings: .*feature_dropout"),
    (["--variant", "lfe_dae", "--config_overrides", '{"lfe_pretrained_from": "runs/no_such_dae"}'],
     "lfe_pretrained_from='runs/no_such_dae': .*point it at the denoising autoencoder"),
])
def test_a_new_models_settings_are_checked_before_any_work(options, message, tmp_path):
    """The config is built after the parsing and the tokenizer, which would leave files that block the rerun."""
    with pytest.raises(SystemExit, match=message):
        train.main(["--output_dir", str(tmp_path / "run"), "--do_train", "--use_cpu", "--stanza_dir",
                    str(tmp_path / "no_stanza_here"), *options])
    assert not (tmp_path / "run").exists()


def test_a_latent_feedback_model_whose_layers_get_no_feedback_is_said_to_train_as_a_baseline(caplog):
    with caplog.at_level("WARNING", logger="hf_srcfeat"):
        train.check_new_model_settings(train.ModelArguments(model_type="latent_feedback", encoder_layers=1))
    assert "no NMT layer gets feedback" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="hf_srcfeat"):
        train.check_new_model_settings(train.ModelArguments(model_type="latent_feedback", encoder_layers=2))
    assert "feedback" not in caplog.text


def test_the_evaluation_generation_length_follows_the_longest_reference_unless_given():
    from datasets import Dataset

    references = Dataset.from_dict({"labels": [[5] * 10, [5] * 20]})
    assert train.generation_length([references], 128) == 35
    assert train.generation_length([references], 30) == 30, "never beyond --max_target_length"
    assert train.generation_length([], 128) == 128
    _, default_data, defaults = train.parse_arguments(["--output_dir", "unused"])
    _, _, given = train.parse_arguments(["--output_dir", "unused", "--learning_rate", "2e-4"])
    assert (defaults.learning_rate, str(defaults.lr_scheduler_type), defaults.per_device_eval_batch_size) == (
        1e-3, "inverse_sqrt", 64), "from scratch, the recipes' optimiser"
    assert given.learning_rate == 2e-4 and given.warmup_steps == 400, "what is given wins, the rest stays"
    _, fine_tuning_data, fine_tuning = train.parse_arguments(["--output_dir", "unused", "--init_from",
                                                              "some/checkpoint"])
    assert fine_tuning.learning_rate == 5e-5, "a pretrained start keeps Transformers' fine-tuning defaults"
    assert default_data.max_tokens_per_batch == 1024, "from scratch, the recipes' token batches"
    assert fine_tuning_data.max_tokens_per_batch is None


def test_a_conllu_file_parsed_again_into_the_same_name_is_read_again_not_served_from_the_cache(
        stanza_annotator, tmp_path):
    from dataclasses import replace

    from datasets import Dataset

    from hf_srcfeat.annotated_sentence import AnnotatedSentence
    from hf_srcfeat.conllu import write_conllu

    sources = ["Two dogs play in the snow.", "A man rides a bike."]
    data = Dataset.from_dict({"source": sources, "target": ["Zwei Hunde.", "Ein Mann."]})
    parses = stanza_annotator.annotate(sources, show_progress=False)
    path = tmp_path / "train.en.conllu"
    write_conllu(parses, path)
    first = train.source_parses(str(path), "train", data, cut=False)
    relabelled = [replace(sentence, words=[replace(word, upos="X") for word in sentence.words]) for sentence in parses]
    write_conllu(relabelled, path)
    again = train.source_parses(str(path), "train", data, cut=False)
    tags = [{word.upos for word in AnnotatedSentence.from_json(row).words} for row in again[train.PARSE_COLUMN]]
    assert tags == [{"X"}, {"X"}], "the file's new parses"
    assert first[train.PARSE_COLUMN] != again[train.PARSE_COLUMN]
