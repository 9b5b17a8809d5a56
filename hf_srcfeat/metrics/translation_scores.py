"""Corpus scores of translations with sacreBLEU: the one place every evaluation (training, the benchmark, the
`evaluate` metric) computes BLEU, lowercased BLEU and chrF, and tests one system against another."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import cast

#: The scores `corpus_scores` gives (each with its `<name>_signature`).
SCORE_NAMES = ("bleu", "bleu_lowercase", "chrf")


def bleu_target_language(target_lang: str | None) -> str:
    """The language code sacreBLEU is told (`BLEU(trg_lang=...)`), from which it picks its default tokenizer (zh:
    `zh`, ja: `ja-mecab`, ko: `ko-mecab`, any other: `13a`): the primary subtag, lowercased (`zh-CN`, `zh_Hans`: zh).
    Empty when no language is given."""
    return (target_lang or "").replace("_", "-").split("-")[0].lower()


def bleu_metric(target_lang: str | None = None, lowercase: bool = False):
    """sacreBLEU's `BLEU` with its default tokenizer for `target_lang` (13a for most languages, zh, ja-mecab and
    ko-mecab for Chinese, Japanese and Korean targets, whose words are not separated by spaces), as
    `sacrebleu -l src-tgt` chooses it. Japanese and Korean need sacreBLEU's extras (`pip install sacrebleu[ja]`,
    `sacrebleu[ko]`): without them this raises RuntimeError saying so."""
    from sacrebleu.metrics import BLEU

    return BLEU(lowercase=lowercase, trg_lang=bleu_target_language(target_lang))


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None) -> dict:
    """sacreBLEU (cased), lowercased sacreBLEU and chrF of detokenized hypotheses against one reference each,
    unrounded, with each metric's signature. BLEU tokenizes as sacreBLEU does by default for the target language
    `target_lang` (`bleu_metric`: 13a, or zh / ja-mecab / ko-mecab for Chinese, Japanese and Korean); without it,
    13a. chrF reads characters and needs no tokenizer."""
    from sacrebleu.metrics import CHRF

    if len(hypotheses) == 0:
        raise ValueError("No predictions to score.")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; scoring needs one "
                         "reference per hypothesis.")
    streams = [list(references)]  # sacreBLEU takes one list per reference stream
    metrics = dict(zip(SCORE_NAMES, (bleu_metric(target_lang), bleu_metric(target_lang, lowercase=True), CHRF()),
                       strict=True))
    scores: dict = {name: metric.corpus_score(list(hypotheses), streams).score for name, metric in metrics.items()}
    scores.update({f"{name}_signature": str(metric.get_signature()) for name, metric in metrics.items()})
    return scores


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     samples: int = 1000, seed: int = 12345, target_lang: str | None = None) -> dict:
    """sacreBLEU's paired bootstrap resampling (Koehn 2004) of the system's BLEU against the baseline's (BLEU
    tokenized for `target_lang` as in `corpus_scores`).

    Identical translations get p = 1: sacreBLEU counts only resamples whose difference exceeds the observed one
    (MultEval's rule), which gives a system scored against itself its smallest p-value."""
    from sacrebleu.significance import PairedTest, Result

    differing = sum(one != other for one, other in zip(baseline, system, strict=True))
    if not differing:
        return {"test": "paired bootstrap resampling (sacrebleu)", "samples": 0, "p_value": 1.0,
                "baseline_bleu": round(corpus_scores(baseline, references, target_lang)["bleu"], 2),
                "differing_sentences": 0}

    os.environ.setdefault("SACREBLEU_SEED", str(seed))
    test = PairedTest([("baseline", list(baseline)), ("system", list(system))], {"BLEU": bleu_metric(target_lang)},
                      [list(references)], test_type="bs", n_samples=samples)
    _, scores = test()
    result = cast(Result, scores["BLEU"][1])  # sacrebleu types its entries loosely
    return {"test": "paired bootstrap resampling (sacrebleu)", "samples": samples,
            "p_value": float(cast(float, result.p_value)),
            "baseline_bleu": round(float(cast(Result, scores["BLEU"][0]).score), 2), "differing_sentences": differing}
