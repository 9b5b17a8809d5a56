"""The log-probability a model gives a given target for a given source (forced decoding), as fairseq's
`--score-reference`, `marian-scorer` and `sockeye-score` compute it: for contrastive evaluation (which of two
candidates does the model prefer?), filtering, or checking a model against its own translations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hf_srcfeat.annotated_sentence import AnnotatedSentence
from hf_srcfeat.sequence_scores import count_forced_as_zero
from hf_srcfeat.tokenization_source_features import encoding_options


@dataclass(frozen=True)
class TargetScore:
    """Natural-log probability of one target: `total` over its `tokens` subwords (with `</s>`), `per_token` the
    mean."""

    total: float
    per_token: float
    tokens: int


def score_targets(model, tokenizer, sources: Sequence[str | AnnotatedSentence],
                  targets: Sequence[str] | Sequence[Sequence[int]], batch_size: int = 32, parse: bool = True
                  ) -> list[TargetScore]:
    """The log-probability of each target given its source under `model` (a target-language token the model's
    generation forces first counts 0, as in beam search's scores).

    Args:
        model: a source-feature translation model (any model type of the zoo).
        tokenizer: its feature-aware tokenizer; sources are encoded as for translation (parsed by its annotator,
            through the cache) and targets as the training labels (subwords and `</s>`).
        sources: raw sentences, or their parses (`AnnotatedSentence`s, e.g. from `read_conllu`).
        targets: one target per source: a sentence (encoded as a training label, with `</s>`), or the subword ids
            to score as they are (e.g. a generated output, whose subwords need not be the ones its text encodes to).
        batch_size: pairs scored at once.
        parse: `False` encodes raw sources from their subwords alone (the model's features at their defaults).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets; scoring needs one target per source.")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    scores: list[TargetScore] = []
    model.eval()
    for start in range(0, len(sources), batch_size):
        chunk, chunk_targets = list(sources[start:start + batch_size]), list(targets[start:start + batch_size])
        # Nothing is cut: the score of a cut source or target would be the score of another pair.
        options = dict(padding=True, return_tensors="pt", **encoding_options(model.config))
        if all(isinstance(source, AnnotatedSentence) for source in chunk):
            encoded = tokenizer(annotations=chunk, **options)
        elif any(isinstance(source, AnnotatedSentence) for source in chunk):
            raise ValueError("give raw sentences or parses, not a mix of both.")
        else:
            encoded = tokenizer(chunk, source_features=parse, **options)
        labels, present = target_labels(tokenizer, chunk_targets)
        check_lengths(model, start, encoded["attention_mask"].sum(dim=-1), present.sum(dim=-1))
        decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
        with torch.no_grad():
            logits = model(**encoded.to(model.device), decoder_input_ids=decoder_input_ids.to(model.device)).logits
        log_probs = logits.float().log_softmax(dim=-1).cpu().gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        # A target-language token the model's generation forces first (NLLB, mBART-50) counts 0, as beam search
        # and the translate command's scores count it: the model never chooses it.
        count_forced_as_zero(log_probs, labels, getattr(model.generation_config, "forced_bos_token_id", None), 0)
        totals = (log_probs * present).sum(dim=-1)
        counts = present.sum(dim=-1)
        scores += [TargetScore(total=float(total), per_token=float(total) / int(count), tokens=int(count))
                   for total, count in zip(totals, counts, strict=True)]
    return scores


def check_lengths(model, start: int, source_lengths: torch.Tensor, target_lengths: torch.Tensor) -> None:
    """Refuse, naming it (counting pairs from 0), a pair longer than the model's positions."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return
    for side, lengths in (("source", source_lengths), ("target", target_lengths)):
        for row, length in enumerate(lengths.tolist()):
            if length > limit:
                raise ValueError(f"pair {start + row} (counting from 0): its {side} has {length} tokens, more than the "
                                 f"model's max_position_embeddings ({limit}); it cannot be scored whole.")


def target_labels(tokenizer, targets: list) -> tuple[torch.Tensor, torch.Tensor]:
    """The padded label ids of target sentences or id lists, and where they hold a real token."""
    if all(isinstance(target, str) for target in targets):
        labels = tokenizer(text_target=targets, padding=True, return_tensors="pt")["input_ids"]
        return labels, labels != tokenizer.pad_token_id
    if any(isinstance(target, str) for target in targets) or any(len(target) == 0 for target in targets):
        raise ValueError("targets must all be sentences or all be non-empty lists of subword ids.")
    longest = max(len(target) for target in targets)
    labels = torch.full((len(targets), longest), tokenizer.pad_token_id, dtype=torch.long)
    present = torch.zeros((len(targets), longest), dtype=torch.bool)
    for row, target in enumerate(targets):
        labels[row, :len(target)] = torch.tensor(list(target), dtype=torch.long)
        present[row, :len(target)] = True
    return labels, present
