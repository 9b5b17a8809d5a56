"""A generated sequence's score as Transformers' beam search counts it: the tokens' log-probabilities, forced
tokens counted 0, over the length penalty. The pipeline's scores and forced decoding (`hf-srcfeat-score`) both count
forced tokens this way."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def sequence_scores(sequences: torch.Tensor, logits: Sequence[torch.Tensor], eos_token_id: int | list[int] | None,
                    length_penalty: float, forced_first_token: int | None = None,
                    forced_last_token: tuple[int | list[int] | None, int] | None = None) -> torch.Tensor:
    """Each generated sequence's score as beam search ranks its hypotheses: the sum of the model's log-probabilities
    of its tokens (before any temperature, top-k or top-p) over length ** length_penalty, the length counting the
    tokens generated up to and including the first end token. Forced tokens count 0, as beam search counts them: a
    forced first token (a target language's), and `forced_last_token` = (token, step) at the length limit's step
    (Marian's forced `</s>`); other logits processors (repetition penalty, n-gram bans) are not applied. `logits`
    holds one [sequences, vocab] tensor a step."""
    generated = sequences[:, -len(logits):]
    log_probs = torch.stack([torch.log_softmax(step.float(), dim=-1).gather(-1, generated[:, index, None])[:, 0]
                             for index, step in enumerate(logits)], dim=1)
    for token, step in ((forced_first_token, 0), forced_last_token or (None, 0)):
        count_forced_as_zero(log_probs, generated, token, step)
    is_end = is_one_of(generated, eos_token_id).long()
    counted = (is_end.cumsum(dim=1) - is_end) == 0  # the padding after the end token is no token of the translation
    lengths = counted.sum(dim=1).clamp(min=1).float()
    return torch.where(counted, log_probs, 0.0).sum(dim=1) / lengths ** length_penalty


def is_one_of(tokens: torch.Tensor, ids: int | list[int] | None) -> torch.Tensor:
    """Where `tokens` holds one of `ids` (a token id, a list of them, or None: nowhere)."""
    wanted = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return torch.isin(tokens, torch.tensor(wanted, dtype=tokens.dtype, device=tokens.device))


def count_forced_as_zero(log_probs: torch.Tensor, tokens: torch.Tensor, forced: int | list[int] | None,
                         step: int) -> None:
    """Set to 0, in place, the log-probability at `step` of the rows whose token there is the `forced` one: a token
    the generation forces, which beam search counts 0 (the model never chooses it)."""
    if forced is not None and 0 <= step < tokens.shape[1]:
        log_probs[:, step] = torch.where(is_one_of(tokens[:, step], forced), 0.0, log_probs[:, step])
