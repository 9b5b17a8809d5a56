"""Translation quality metrics for `Seq2SeqTrainer(predict_with_generate=True)`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import evaluate
import numpy as np

TRANSLATION_METRIC_PATH = Path(__file__).with_name("translation_metric.py")


def load_translation_metric() -> evaluate.EvaluationModule:
    """The library's sacreBLEU + chrF metric, loaded by path so that no Hub access is needed."""
    return evaluate.load(str(TRANSLATION_METRIC_PATH))


def make_compute_metrics(tokenizer, metric: evaluate.EvaluationModule | None = None, target_lang: str | None = None,
                         references: Sequence[str] | None = None):
    """A `compute_metrics` for generated predictions: decodes the predicted ids (-100 -> pad) and scores them.

    Args:
        tokenizer: decodes the predictions (and, without `references`, the labels).
        metric: the metric module (default `load_translation_metric()`).
        target_lang: the targets' language code: BLEU tokenizes as sacreBLEU does by default for it (13a, or zh,
            ja-mecab, ko-mecab for Chinese, Japanese and Korean targets).
        references: the raw reference text of the split evaluated, one per example in the dataset's order (the
            order the Trainer's sequential evaluation gives the predictions in): scored against as sacreBLEU on the
            files would. Set `compute_metrics.references` to another split's before evaluating it. Without
            references the labels are decoded back, which gives their text NFKC-normalised, without the characters
            the subword vocabulary lacks and cut at the target length limit.

    It returns the numbers (the Trainer logs and averages them); the sacreBLEU signatures of its last call, which
    say exactly how they were computed, are kept in its `signatures` attribute."""
    metric = metric or load_translation_metric()

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        given = compute_metrics.references  # type: ignore[attr-defined]  # an attribute of this function object
        if given is not None:
            if len(given) != len(hypotheses):
                raise ValueError(f"{len(hypotheses)} predictions but {len(given)} references: compute_metrics."
                                 "references must be the evaluated split's, one per example.")
            references = list(given)
        else:
            labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
            references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = metric.compute(predictions=hypotheses, references=references, target_lang=target_lang)
        compute_metrics.signatures = {  # type: ignore[attr-defined]
            name: value for name, value in scores.items() if name.endswith("_signature")}
        return {name: value for name, value in scores.items() if isinstance(value, float)}

    compute_metrics.signatures = {}  # type: ignore[attr-defined]
    compute_metrics.references = list(references) if references is not None else None  # type: ignore[attr-defined]
    return compute_metrics
