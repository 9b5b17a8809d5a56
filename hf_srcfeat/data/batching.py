"""Batches for training: token-based batching (batches of sentences of similar length that fill a token budget, as
fairseq's `--max-tokens` and Sockeye's `--batch-type word` make them), and the collator that builds each batch's
dependency distances from the O(S) trees stored with the examples.

Batching by sentence count pads every sentence to the longest of a random batch; grouping by length and filling a
token budget instead spends the compute on real tokens and keeps the memory per batch constant. Transformers'
`LengthGroupedSampler` groups by length but keeps a fixed sentence count, so the budget is written here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler
from transformers import DataCollatorForSeq2Seq

from hf_srcfeat.dependency_tree import token_distance_matrix
from hf_srcfeat.tokenization_source_features import TREE_COLUMN
from hf_srcfeat.trainer import SrcFeatSeq2SeqTrainer


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of example indices whose padded size, rows x longest row, stays within `max_tokens`.

    Every epoch the examples are shuffled, sorted by length (ties stay shuffled), cut into batches that fill the
    budget, and the batches are shuffled, so consecutive batches differ in length and each epoch differs; the
    order depends only on `seed` and the epoch (`set_epoch`). With `num_replicas` > 1 each rank takes every
    `num_replicas`-th batch, after the batch list is cut to a multiple of `num_replicas` so that ranks take the same
    number of steps.

    Translation pairs are best given as (source, target) lengths: the cost of a pair is then the longer side, and
    pairs of one cost are sorted by source, then target length. Sources and targets are padded apart, so sorting by
    the cost alone would batch a (20, 12) pair with a (12, 20) pair, padding both sides to 20.

    Args:
        lengths: each example's cost in tokens, or each translation pair's (source, target) lengths.
        max_tokens: padded tokens per batch; an example longer than this is an error naming it.
        max_sentences: optional cap on rows per batch.
        batch_size_multiple: rows per batch rounded down to a multiple of this (fairseq's
            `--required-batch-size-multiple`, Sockeye's `--batch-sentences-multiple-of`), the rows cut off starting
            the next batch; fewer rows than this make a batch only where the next example is longer than
            `max_tokens / batch_size_multiple`, and the batch cut last (before the batches are shuffled) takes what
            is left. `max_sentences` must be a multiple of it.
        shuffle: shuffle examples and batches (False: batches in length order, for evaluation).
        seed, num_replicas, rank: as `torch.utils.data.DistributedSampler`.
    """

    def __init__(self, lengths: Sequence[int] | Sequence[tuple[int, int]], max_tokens: int,
                 max_sentences: int | None = None, shuffle: bool = True, seed: int = 0, num_replicas: int = 1,
                 rank: int = 0, batch_size_multiple: int = 1):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences must be at least 1, got {max_sentences}.")
        if batch_size_multiple < 1:
            raise ValueError(f"batch_size_multiple must be at least 1, got {batch_size_multiple}.")
        if max_sentences is not None and max_sentences % batch_size_multiple:
            raise ValueError(f"max_sentences={max_sentences} is not a multiple of "
                             f"batch_size_multiple={batch_size_multiple}.")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in 0..{num_replicas - 1}.")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.ndim == 1:
            self.costs = self.lengths
        elif self.lengths.ndim == 2 and self.lengths.shape[1] == 2:
            self.costs = self.lengths.max(axis=1)
        else:
            raise ValueError(f"lengths must hold one length or a (source, target) pair per example, got an array of "
                             f"shape {self.lengths.shape}.")
        too_long = np.flatnonzero(self.costs > max_tokens)
        if len(too_long):
            raise ValueError(f"example {int(too_long[0])} has {int(self.costs[too_long[0]])} tokens, more than "
                             f"max_tokens={max_tokens} ({len(too_long)} such examples); raise the budget or truncate.")
        self.max_tokens, self.max_sentences, self.batch_size_multiple = max_tokens, max_sentences, batch_size_multiple
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.num_replicas, self.rank = num_replicas, rank
        self._batches: tuple[int, list[list[int]]] | None = None  # (epoch, its batches): len() and iter() share them

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        """All batches of the current epoch, for every rank (made once per epoch)."""
        if self._batches is None or self._batches[0] != self.epoch:
            self._batches = (self.epoch, self._make_batches())
        return self._batches[1]

    def _make_batches(self) -> list[list[int]]:
        generator = np.random.default_rng(self.seed + self.epoch)
        order = generator.permutation(len(self.lengths)) if self.shuffle else np.arange(len(self.lengths))
        # By cost, then source, then target length: stable sorts from the least significant key to the most.
        keys = (self.costs,) if self.lengths.ndim == 1 else (self.lengths[:, 1], self.lengths[:, 0], self.costs)
        for key in keys:
            order = order[np.argsort(key[order], kind="stable")]
        batches: list[list[int]] = []
        current: list[int] = []
        longest = 0
        for index in order.tolist():
            length = int(self.costs[index])
            # A cut to the multiple carries rows over, which may still leave no room: cut until there is.
            while current and self._full(len(current), max(longest, length)):
                kept = len(current) - len(current) % self.batch_size_multiple or len(current)
                batches.append(current[:kept])
                current = current[kept:]
                longest = int(self.costs[current].max()) if current else 0
            current.append(index)
            longest = max(longest, length)
        if current:
            batches.append(current)
        if self.shuffle:
            batches = [batches[i] for i in generator.permutation(len(batches))]
        if self.num_replicas > 1:
            batches = batches[:len(batches) - len(batches) % self.num_replicas]
        return batches

    def _full(self, rows: int, longest: int) -> bool:
        """Whether `rows` rows leave no room for one more row, `longest` tokens the longest of all of them."""
        return longest * (rows + 1) > self.max_tokens or (self.max_sentences is not None and rows == self.max_sentences)

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches()[self.rank::self.num_replicas]

    def __len__(self) -> int:
        return len(self.batches()) // self.num_replicas


def padding_fraction(lengths: Sequence[int] | Sequence[tuple[int, int]], batches: Sequence[Sequence[int]]) -> float:
    """Share of the padded batch positions that are padding; with (source, target) lengths sources and targets are
    padded apart, as a batch pads them."""
    array = np.asarray(lengths).reshape(len(lengths), -1)
    padded = sum(len(batch) * int(array[list(batch)].max(axis=0).sum()) for batch in batches)
    return 1.0 - float(sum(int(array[list(batch)].sum()) for batch in batches)) / padded


def example_lengths(dataset) -> list[tuple[int, int]]:
    """Per example, the lengths of its source (`input_ids`) and target (`labels`, 0 without) in tokens, read in
    batches (the token ids of a large corpus are never held whole)."""
    lengths = []
    for batch in dataset.iter(batch_size=10_000):
        targets = batch["labels"] if "labels" in batch else [[]] * len(batch["input_ids"])
        lengths += [(len(source), len(target)) for source, target in zip(batch["input_ids"], targets, strict=True)]
    return lengths


class TokenBatchingSeq2SeqTrainer(SrcFeatSeq2SeqTrainer):
    """`Seq2SeqTrainer` whose training batches fill a token budget (`max_tokens_per_batch`) instead of holding
    `per_device_train_batch_size` sentences; under several processes accelerate deals the batches out, each process
    taking whole batches. Evaluation and prediction batch as usual. `lengths` gives each training example's cost in
    tokens, or its (source, target) lengths, where the dataset holds no token ids yet (e.g. raw text that the
    collator tokenizes); by default the (source, target) lengths are read from the `input_ids` and `labels`
    columns. `batch_size_multiple` rounds each batch's rows down to a multiple of it (`TokenBudgetBatchSampler`).
    The training metrics' `train_samples_per_second` counts the rows the batches held (the Trainer's own count
    assumes `per_device_train_batch_size` rows a batch)."""

    def __init__(self, *args, max_tokens_per_batch: int,
                 lengths: Sequence[int] | Sequence[tuple[int, int]] | None = None, batch_size_multiple: int = 1,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.max_tokens_per_batch = max_tokens_per_batch
        self.lengths = lengths
        self.batch_size_multiple = batch_size_multiple
        self.rows_trained = 0  # this process's, in the current `train` call

    def train(self, *args, **kwargs):
        self.rows_trained = 0
        return super().train(*args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.rows_trained += len(inputs["input_ids"])
        return super().training_step(model, inputs, num_items_in_batch)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "train_samples_per_second" in logs and logs.get("train_runtime"):
            # In place: the same dict is the metrics `train` returns. Every process logs these, so all take part.
            rows = self.accelerator.reduce(torch.tensor(self.rows_trained, device=self.accelerator.device),
                                           reduction="sum")
            logs["train_samples_per_second"] = round(int(rows) / logs["train_runtime"], 3)
        super().log(logs, start_time)

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        lengths = example_lengths(dataset) if self.lengths is None else self.lengths
        if len(lengths) != len(dataset):
            raise ValueError(f"{len(lengths)} lengths given for {len(dataset)} training examples.")
        sampler = TokenBudgetBatchSampler(lengths, self.max_tokens_per_batch, seed=self.args.seed,
                                          batch_size_multiple=self.batch_size_multiple)
        loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=self.data_collator,
                            num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory)
        return self.accelerator.prepare(loader)


@dataclass
class SourceFeatureCollator(DataCollatorForSeq2Seq):
    """`DataCollatorForSeq2Seq` for encodings stored in O(S): rows that carry their tree as `word_heads`
    (`tokenizer(..., return_dep_distance=False)`) get their [S, S] `dep_distance` built here, per batch, exactly as
    the tokenizer builds it; other rows are collated as usual. Under the Trainer, keep the column
    (`remove_unused_columns=False`): the models do not take it. Rows for a model that reads tree distances but carry
    neither are refused (the Trainer dropped the column), unless `require_tree=False` (encoded without a tree on
    purpose, `return_word_heads=False`: the model then takes the distances' defaults, with a warning)."""

    require_tree: bool = True

    def __call__(self, features, return_tensors=None):
        if not features or TREE_COLUMN not in features[0]:
            if features and self.require_tree:
                self.check_tree_kept(features[0])
            return super().__call__(features, return_tensors)
        heads = [feature[TREE_COLUMN] for feature in features]
        batch = super().__call__([{name: value for name, value in feature.items() if name != TREE_COLUMN}
                                  for feature in features], return_tensors)
        matrices = [token_distance_matrix(tree, words) for tree, words in zip(heads, batch["word_ids"].tolist(),
                                                                              strict=True)]
        batch["dep_distance"] = torch.from_numpy(np.stack(matrices))
        return batch

    def check_tree_kept(self, row: dict) -> None:
        """A model that reads tree distances gets rows encoded with their features (`word_ids`) but neither their
        tree nor the distances only when the Trainer dropped the tree column: in training the model says so, but in
        evaluation it would translate without the tree, with a warning only."""
        config = getattr(self.model, "config", None)
        if config is not None and getattr(config, "reads_dependency_distances", False) and "word_ids" in row \
                and "dep_distance" not in row:
            raise ValueError(f"the rows carry the source features but not their tree (`{TREE_COLUMN}`), which "
                             f"{config.model_type} reads: with Seq2SeqTrainer, set remove_unused_columns=False (the "
                             "Trainer drops the tree column before the collator sees it); rows encoded without a tree "
                             "on purpose take SourceFeatureCollator(..., require_tree=False).")
