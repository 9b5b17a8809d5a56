"""Token-based batching: batches of similar-length sentences within a token budget, every example once per epoch,
less padding than sentence batches, and train.py training with it."""

from __future__ import annotations

import numpy as np
import pytest

from hf_srcfeat.data.batching import TokenBudgetBatchSampler, padding_fraction

from .helpers import sampled_batches
from .test_training import TINY, train


@pytest.fixture(scope="module")
def source_target_lengths(subword_tokenizer, train_pairs) -> list[tuple[int, int]]:
    """Source and target lengths in subwords of 2,000 real Multi30k pairs."""
    sources = subword_tokenizer(list(train_pairs["source"]))["input_ids"]
    targets = subword_tokenizer(text_target=list(train_pairs["target"]))["input_ids"]
    return [(len(source), len(target)) for source, target in zip(sources, targets, strict=True)]


@pytest.fixture(scope="module")
def pair_lengths(source_target_lengths) -> list[int]:
    """The longer of source and target of each pair."""
    return [max(pair) for pair in source_target_lengths]


def test_every_example_comes_once_in_batches_within_the_budget(pair_lengths):
    sampler = TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, seed=1)
    batches = list(sampler)
    assert sorted(index for batch in batches for index in batch) == list(range(len(pair_lengths)))
    assert all(len(batch) * max(pair_lengths[i] for i in batch) <= 1000 for batch in batches)
    assert len(batches) == len(sampler)


def test_length_grouped_batches_pad_far_less_than_random_sentence_batches(pair_lengths):
    batches = list(TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, seed=1))
    mean_rows = round(np.mean([len(batch) for batch in batches]))
    order = np.random.default_rng(0).permutation(len(pair_lengths)).tolist()
    random_batches = [order[start:start + mean_rows] for start in range(0, len(order), mean_rows)]
    grouped, random = padding_fraction(pair_lengths, batches), padding_fraction(pair_lengths, random_batches)
    assert grouped < 0.05 and random > 0.25, (grouped, random)


def test_pairs_of_one_cost_are_ordered_by_source_and_target_so_both_sides_pad_less(source_target_lengths,
                                                                                   pair_lengths):
    by_pair = list(TokenBudgetBatchSampler(source_target_lengths, max_tokens=1000, seed=1))
    by_cost = list(TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, seed=1))
    # The budget is the same (rows x longer side), so the batches are as many and as full
    assert len(by_pair) == len(by_cost)
    assert all(len(batch) * max(pair_lengths[i] for i in batch) <= 1000 for batch in by_pair)
    assert sorted(i for batch in by_pair for i in batch) == list(range(len(pair_lengths)))
    padding_by_pair = padding_fraction(source_target_lengths, by_pair)
    padding_by_cost = padding_fraction(source_target_lengths, by_cost)
    assert padding_by_pair < 0.9 * padding_by_cost, (padding_by_pair, padding_by_cost)


def test_lengths_of_another_shape_are_refused():
    with pytest.raises(ValueError, match=r"one length or a \(source, target\) pair per example, got an array of "
                                         r"shape \(2, 3\)"):
        TokenBudgetBatchSampler([(5, 6, 7), (1, 2, 3)], max_tokens=100)


def test_the_order_depends_on_seed_and_epoch_only(pair_lengths):
    first, again = TokenBudgetBatchSampler(pair_lengths, 1000, seed=1), TokenBudgetBatchSampler(pair_lengths, 1000, seed=1)
    assert list(first) == list(again)
    again.set_epoch(1)
    assert list(first) != list(again)


def test_ranks_take_disjoint_batches_and_the_same_number_of_steps(pair_lengths):
    ranks = [list(TokenBudgetBatchSampler(pair_lengths, 1000, seed=1, num_replicas=2, rank=rank)) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])
    assert not {i for batch in ranks[0] for i in batch} & {i for batch in ranks[1] for i in batch}


def test_an_example_longer_than_the_budget_is_named(pair_lengths):
    with pytest.raises(ValueError, match=r"example \d+ has \d+ tokens, more than max_tokens=20"):
        TokenBudgetBatchSampler(pair_lengths, max_tokens=20)


@pytest.mark.parametrize("multiple", [2, 8])
def test_batches_hold_a_multiple_of_batch_size_multiple_rows_unless_fewer_fill_the_budget(pair_lengths, multiple):
    batches = list(TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, seed=1, batch_size_multiple=multiple))
    assert sorted(index for batch in batches for index in batch) == list(range(len(pair_lengths)))
    assert all(len(batch) * max(pair_lengths[i] for i in batch) <= 1000 for batch in batches)
    # No pair is longer than 1000 / 8 tokens, so in length order only the last batch may hold a remainder
    assert max(pair_lengths) < 1000 / 8
    in_order = list(TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, shuffle=False,
                                            batch_size_multiple=multiple))
    assert all(len(batch) % multiple == 0 for batch in in_order[:-1])
    rounded = sum(len(batch) % multiple != 0 for batch in in_order)
    unrounded = sum(len(batch) % multiple != 0 for batch in TokenBudgetBatchSampler(
        pair_lengths, max_tokens=1000, shuffle=False))
    assert rounded <= 1 < unrounded, (rounded, unrounded)


def test_rows_cut_off_to_a_multiple_make_a_batch_of_their_own_where_the_next_example_does_not_fit_beside_them():
    # 33 x 3 fits 100 tokens; rounded to two rows, the third cannot take the 60-token example beside it (120 > 100)
    batches = list(TokenBudgetBatchSampler([33, 33, 33, 60], max_tokens=100, shuffle=False, batch_size_multiple=2))
    assert batches == [[0, 1], [2], [3]]


def test_a_batch_size_multiple_that_cannot_hold_is_refused(pair_lengths):
    with pytest.raises(ValueError, match="batch_size_multiple must be at least 1, got 0"):
        TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, batch_size_multiple=0)
    with pytest.raises(ValueError, match="max_sentences=12 is not a multiple of batch_size_multiple=8"):
        TokenBudgetBatchSampler(pair_lengths, max_tokens=1000, max_sentences=12, batch_size_multiple=8)


def test_the_trainer_batches_a_multiple_of_rows(subword_tokenizer, train_pairs, tiny_config, tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments

    from hf_srcfeat import SrcFeatTransformerForConditionalGeneration
    from hf_srcfeat.data.batching import TokenBatchingSeq2SeqTrainer

    encodings = subword_tokenizer(list(train_pairs["source"][:300]), text_target=list(train_pairs["target"][:300]))
    trainer = TokenBatchingSeq2SeqTrainer(
        model=SrcFeatTransformerForConditionalGeneration(tiny_config()),
        args=Seq2SeqTrainingArguments(tmp_path / "run", use_cpu=True, report_to="none", seed=1),
        train_dataset=Dataset.from_dict(dict(encodings)), processing_class=subword_tokenizer,
        data_collator=DataCollatorForSeq2Seq(subword_tokenizer), max_tokens_per_batch=600, batch_size_multiple=4)
    rows = [len(batch["input_ids"]) for batch in trainer.get_train_dataloader()]
    assert sum(rows) == 300 and sum(count % 4 != 0 for count in rows) <= 1, rows


@pytest.mark.slow
def test_train_script_trains_with_a_token_budget(multi30k_dir, tmp_path, monkeypatch):
    sampled = sampled_batches(monkeypatch)
    results = train.main(TINY + ["--output_dir", str(tmp_path / "run"), "--do_train", "--max_train_samples", "400",
                                 "--max_steps", "40", "--max_tokens_per_batch", "600", "--learning_rate", "3e-3",
                                 "--warmup_steps", "5", "--logging_steps", "5", "--batch_size_multiple", "4"])
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5, losses
    assert results["data_args"]["max_tokens_per_batch"] == 600 and results["data_args"]["batch_size_multiple"] == 4
    assert sampled and all(len(batch) % 4 == 0 for batch in sampled[-1][:-1]), "the trainer was given the multiple"
    # The throughput counts the rows of the 40 batches trained on (one epoch's batches after another's), not 40 x
    # the default batch size
    trained = [batch for epoch in sampled for batch in epoch][:40]
    rows = sum(map(len, trained))
    assert len(trained) == 40 and len(sampled) > 1
    metrics = results["train_metrics"]
    assert metrics["train_samples_per_second"] * metrics["train_runtime"] == pytest.approx(rows, rel=1e-3)
    assert rows != 40 * 8


def test_a_batch_size_multiple_for_sentence_batches_is_refused_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="--batch_size_multiple 4 rounds token batches"):
        train.main(TINY + ["--output_dir", str(tmp_path / "run"), "--do_train", "--max_train_samples", "50",
                           "--max_steps", "2", "--per_device_train_batch_size", "16", "--batch_size_multiple", "4"])
    assert not (tmp_path / "run").exists()


def test_early_stopping_without_keeping_the_best_model_is_refused_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="--early_stopping_patience needs --load_best_model_at_end"):
        train.main(TINY + ["--output_dir", str(tmp_path / "run"), "--do_train", "--max_train_samples", "50",
                           "--max_steps", "2", "--early_stopping_patience", "2"])
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_early_stopping_keeps_the_best_checkpoint_and_records_it(multi30k_dir, tmp_path, caplog):
    with caplog.at_level("INFO", logger="hf_srcfeat"):
        results = train.main(TINY + [
            "--output_dir", str(tmp_path / "run"), "--do_train", "--do_eval", "--max_train_samples", "200",
            "--max_eval_samples", "20", "--max_steps", "12", "--eval_strategy", "steps", "--eval_steps", "4",
            "--save_strategy", "steps", "--save_steps", "4", "--load_best_model_at_end", "true",
            "--metric_for_best_model", "eval_loss", "--early_stopping_patience", "2",
            "--per_device_train_batch_size", "16"])
    evaluations = [entry["eval_loss"] for entry in results["log_history"] if "eval_loss" in entry]
    assert results["best_metric"]["eval_loss"] == min(evaluations)
    best = f"checkpoint-{4 * (evaluations.index(min(evaluations)) + 1)}"
    assert results["best_model_checkpoint"].endswith(best)
    assert f"{best} (the best, loaded at the end), validation:" in caplog.text, "the final evaluation names its model"
