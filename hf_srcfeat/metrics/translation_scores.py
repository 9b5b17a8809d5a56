"""Corpus scores of translations with sacreBLEU: the one place every evaluation (training, the benchmark, the
`evaluate` metric) computes BLEU, lowercased BLEU and chrF, and tests one system against another."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import cast

#: The scores `corpus_scores` gives (each with its `<name>_signature`).
SCORE_NAMES = ("bleu", "bleu_lowercase", "chrf")


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """sacreBLEU (13a, cased), lowercased sacreBLEU and chrF of detokenized hypotheses against one reference each,
    unrounded, with each metric's signature."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) == 0:
        raise ValueError("No predictions to score.")
    streams = [list(references)]  # sacreBLEU takes one list per reference stream
    metrics = dict(zip(SCORE_NAMES, (BLEU(), BLEU(lowercase=True), CHRF()), strict=True))
    scores: dict = {name: metric.corpus_score(list(hypotheses), streams).score for name, metric in metrics.items()}
    scores.update({f"{name}_signature": str(metric.get_signature()) for name, metric in metrics.items()})
    return scores


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     samples: int = 1000, seed: int = 12345) -> dict:
    """sacreBLEU's paired bootstrap resampling (Koehn 2004) of the system's BLEU against the baseline's.

    Identical translations get p = 1: sacreBLEU counts only resamples whose difference exceeds the observed one
    (MultEval's rule), which gives a system scored against itself its smallest p-value."""
    import sacrebleu
    from sacrebleu.significance import PairedTest, Result

    differing = sum(one != other for one, other in zip(baseline, system, strict=True))
    if not differing:
        return {"test": "paired bootstrap resampling (sacrebleu)", "samples": 0, "p_value": 1.0,
                "baseline_bleu": round(corpus_scores(baseline, references)["bleu"], 2), "differing_sentences": 0}

    os.environ.setdefault("SACREBLEU_SEED", str(seed))
    test = PairedTest([("baseline", list(baseline)), ("system", list(system))], {"BLEU": sacrebleu.BLEU()},
                      [list(references)], test_type="bs", n_samples=samples)
    _, scores = test()
    result = cast(Result, scores["BLEU"][1])  # sacrebleu types its entries loosely
    return {"test": "paired bootstrap resampling (sacrebleu)", "samples": samples,
            "p_value": float(cast(float, result.p_value)),
            "baseline_bleu": round(float(cast(Result, scores["BLEU"][0]).score), 2), "differing_sentences": differing}
