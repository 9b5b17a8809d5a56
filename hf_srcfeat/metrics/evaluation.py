"""Translation quality metrics for `Seq2SeqTrainer(predict_with_generate=True)`."""

from __future__ import annotations

from pathlib import Path

import evaluate
import numpy as np

TRANSLATION_METRIC_PATH = Path(__file__).with_name("translation_metric.py")


def load_translation_metric() -> evaluate.EvaluationModule:
    """The library's sacreBLEU + chrF metric, loaded by path so that no Hub access is needed."""
    return evaluate.load(str(TRANSLATION_METRIC_PATH))


def make_compute_metrics(tokenizer, metric: evaluate.EvaluationModule | None = None):
    """A `compute_metrics` for generated predictions: decodes ids (-100 -> pad) and scores them.

    It returns the numbers (the Trainer logs and averages them); the sacreBLEU signatures of its last call, which
    say exactly how they were computed, are kept in its `signatures` attribute."""
    metric = metric or load_translation_metric()

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = metric.compute(predictions=hypotheses, references=references)
        compute_metrics.signatures = {  # type: ignore[attr-defined]  # an attribute of this function object
            name: value for name, value in scores.items() if name.endswith("_signature")}
        return {name: value for name, value in scores.items() if isinstance(value, float)}

    compute_metrics.signatures = {}  # type: ignore[attr-defined]
    return compute_metrics
