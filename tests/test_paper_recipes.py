"""The paper-size recipes (examples/recipes/paper/): each parses as train.py reads it and builds, at the
paper's size, a model whose parameter count is the paper's table's within 3%, as are the rows around it
(the baseline and the method's other variants) with the same set-up. Vocabulary sizes are chosen as the
recipes' README explains; the models are built on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.paper_parameter_counts import (
    PAPER_COUNTS,
    PAPER_RECIPES,
    parameter_count,
    read_recipe,
    vocabulary_sizes,
)


def test_every_paper_recipe_is_pinned_here():
    assert {path.stem for path in PAPER_RECIPES.glob("*.json")} == set(PAPER_COUNTS)


@pytest.mark.parametrize("name", sorted(PAPER_COUNTS))
def test_paper_recipes_are_post_ln_transformer_base_and_match_the_papers_parameter_counts(name):
    recipe = json.loads((PAPER_RECIPES / f"{name}.json").read_text())
    assert recipe["bf16"] is True and "use_cpu" not in recipe, "paper recipes are for a GPU"
    model_args, data_args, _ = read_recipe(name)
    assert (model_args.encoder_layers, model_args.decoder_layers, model_args.attention_heads,
            model_args.ffn_dim, model_args.layernorm_position, model_args.dropout, model_args.label_smoothing) == \
        (6, 6, 8, 2048, "post", 0.1, 0.1)
    assert model_args.d_model in (512, 536) and data_args.max_tokens_per_batch
    for model_type, overrides, paper_millions, where in PAPER_COUNTS[name]:
        count = parameter_count(model_args, model_type, overrides) / 1e6
        assert abs(count - paper_millions) <= 0.03 * paper_millions, f"{where}: {count:.2f}M vs {paper_millions}M"


# --- Every recipe starts and trains, through hf-srcfeat-train's entry point -------------------------------------
# The recipes' own data (WMT from the Hub, ALT as JSON lines) is swapped for a slice of Multi30k en->de (the only
# parsed source language here is English, so Deps-SAN's de->en runs en->de), and a run is cut to 2 steps with an
# evaluation and a checkpoint after each, one batch per step, short generations and no bf16. Everything else,
# the paper's size included, is the recipe's.
TWO_STEPS = ["--max_train_samples", "24", "--max_eval_samples", "4", "--max_predict_samples", "2", "--max_steps", "2",
             "--eval_steps", "1", "--save_steps", "1", "--logging_steps", "1", "--gradient_accumulation_steps", "1",
             "--generation_max_length", "6", "--bf16", "false", "--use_cpu", "true"]
MULTI30K_EN_DE = ["--dataset_name", "multi30k", "--source_lang", "en", "--target_lang", "de"]


@pytest.fixture(scope="module")
def alt_format_slices(multi30k_dir, tmp_path_factory) -> dict[str, str]:
    """Multi30k en-de slices written as the ALT recipe reads its data: JSON lines of translation dicts."""
    import gzip

    folder = tmp_path_factory.mktemp("alt_format")
    files = {}
    for split, name in (("train", "train"), ("val", "dev"), ("test_2016_flickr", "test")):
        with gzip.open(multi30k_dir / f"{split}.en.gz", "rt") as english, \
                gzip.open(multi30k_dir / f"{split}.de.gz", "rt") as german:
            pairs = [{"translation": {"en": en.strip(), "de": de.strip()}} for en, de, _ in zip(english, german, range(30), strict=False)]
        files[name] = str(folder / f"{name}.en-de.jsonl")
        Path(files[name]).write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    return files


def run_recipe(name: str, output_dir: Path, *overrides: str) -> dict:
    from hf_srcfeat.commands import train as train_command

    return train_command.main([str(PAPER_RECIPES / f"{name}.json"), "--output_dir", str(output_dir), *TWO_STEPS,
                               *overrides])


def assert_built_as_counted(name: str, results: dict, tokenizer_folder: Path) -> None:
    """paper_parameter_counts, given the run's tokenizer, counts exactly the model the run trained."""
    model_args, _, _ = read_recipe(name)
    vocab_size, feature_sizes = vocabulary_sizes(tokenizer_folder)
    assert parameter_count(model_args, None, {}, vocab_size, feature_sizes) == results["num_parameters"]


WMT_RECIPES = ["deps_san_wmt16_de_en", "diverse_input_wmt14_en_de", "phrase_rep_wmt14_en_de",
               "latent_feedback_joint_wmt14_en_de"]


@pytest.mark.slow
@pytest.mark.parametrize("name", WMT_RECIPES)
def test_wmt_paper_recipe_trains_two_steps_and_is_counted_from_its_tokenizer(name, multi30k_dir, tmp_path):
    overrides = list(MULTI30K_EN_DE)
    if name == "phrase_rep_wmt14_en_de":
        overrides += ["--average_last_checkpoints", "2"]  # the recipe's 5, of the 2 checkpoints a 2-step run has
    results = run_recipe(name, tmp_path / "run", *overrides)
    assert results["global_step"] == 2 and (tmp_path / "run" / "model.safetensors").exists()
    assert_built_as_counted(name, results, tmp_path / "run")
    if name == "diverse_input_wmt14_en_de":
        assert results["best_model_checkpoint"] and set(results["best_metric"]) == {"bleu"}  # best dev BLEU kept
    if name == "phrase_rep_wmt14_en_de":
        assert results["averaged_checkpoints"] == ["checkpoint-1", "checkpoint-2"]
    if name == "deps_san_wmt16_de_en":
        import gzip
        import re

        tokenizer = transformers_tokenizer(tmp_path / "run")
        with gzip.open(multi30k_dir / "train.en.gz", "rt") as lines:
            seen = next(lines).strip()
        tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode(seen, source_features=False))[:-1]
        words = [("▁" if match.start() == 0 or seen[match.start() - 1] == " " else "") + match.group()
                 for match in re.finditer(r"\w+|[^\w\s]", seen)]
        # word forms, not subwords: a word is one token, itself, or <unk> (seen once: below the minimum frequency)
        assert len(tokens) == len(words) and all(token in (word, "<unk>") for token, word in zip(tokens, words, strict=True))
        assert sum(token == word for token, word in zip(tokens, words, strict=True)) >= len(words) // 2
        unseen = tokenizer.convert_ids_to_tokens(tokenizer.encode("Zyxomorphic", source_features=False))
        assert unseen == ["<unk>", "</s>"]
        assert results["config"]["deps_san_layers"] == [0, 1, 2]


@pytest.mark.slow
def test_relevance_paper_recipe_trains_two_steps_on_alt_format_json_lines(alt_format_slices, tmp_path):
    results = run_recipe("relevance_features_alt_en_vi", tmp_path / "run", "--target_lang", "de",
                         "--train_file", alt_format_slices["train"], "--validation_file", alt_format_slices["dev"],
                         "--test_file", alt_format_slices["test"], "--max_train_samples", "30")
    assert results["global_step"] == 2 and results["best_model_checkpoint"]
    assert_built_as_counted("relevance_features_alt_en_vi", results, tmp_path / "run")
    lemmas_seen_once_kept = results["model_args"]["lemma_min_frequency"] == 1 and results["model_args"]["max_lemmas"] == 0
    assert lemmas_seen_once_kept


@pytest.mark.slow
def test_latent_feedback_chain_tokenizer_then_autoencoder_then_fine_tuned_recipe(multi30k_dir, alt_format_slices,
                                                                               tmp_path):
    """#4 as the recipes' README runs it: the joint tokenizer first, the autoencoder on monolingual data (here the
    English side of JSON lines, as of WMT14 from `datasets`) with that tokenizer, then the fine-tuned recipe."""
    from hf_srcfeat.commands import pretrain_dae
    from hf_srcfeat.commands import train as train_command

    tokenizer_dir, dae_dir = tmp_path / "tokenizer", tmp_path / "dae"
    built = train_command.main([str(PAPER_RECIPES / "latent_feedback_joint_wmt14_en_de.json"), "--tokenizer_only",
                                "--output_dir", str(tokenizer_dir), *MULTI30K_EN_DE, "--max_train_samples", "24",
                                "--max_eval_samples", "4", "--max_predict_samples", "2", "--use_cpu", "true",
                                "--bf16", "false"])
    assert (tokenizer_dir / "tokenizer.json").exists() and not (tokenizer_dir / "model.safetensors").exists()
    assert built["vocab_size"] == len(transformers_tokenizer(tokenizer_dir))
    dae = pretrain_dae.main([str(PAPER_RECIPES / "pretraining" / "dae_wmt14_en.json"), "--output_dir", str(dae_dir),
                             "--tokenizer_name_or_path", str(tokenizer_dir), "--dataset_name", "",
                             "--train_file", alt_format_slices["train"], "--validation_file", alt_format_slices["dev"],
                             "--max_steps", "2", "--max_eval_samples", "4", "--max_length", "8",
                             "--max_tokens_per_batch", "64", "--bf16", "false", "--use_cpu", "true"])
    assert dae["config"]["d_model"] == 512 and dae["data_files"] == [alt_format_slices["train"],
                                                                     alt_format_slices["dev"]]
    recipe = json.loads((PAPER_RECIPES / "latent_feedback_fine_tuned_wmt14_en_de.json").read_text())
    config_overrides = {**json.loads(recipe["config_overrides"]), "lfe_pretrained_from": str(dae_dir)}
    results = run_recipe("latent_feedback_fine_tuned_wmt14_en_de", tmp_path / "run", *MULTI30K_EN_DE,
                         "--tokenizer_name_or_path", str(dae_dir), "--config_overrides", json.dumps(config_overrides))
    assert results["global_step"] == 2
    assert_built_as_counted("latent_feedback_fine_tuned_wmt14_en_de", results, dae_dir)


def transformers_tokenizer(folder: Path):
    import transformers

    import hf_srcfeat  # noqa: F401

    return transformers.AutoTokenizer.from_pretrained(str(folder))
