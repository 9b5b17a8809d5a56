"""An `evaluate` metric module: sacreBLEU (cased, detokenized), lowercased BLEU and chrF, with signatures.

`evaluate.load("sacrebleu")` fetches its script from the Hub; this module wraps sacrebleu directly and is
loaded by path (`hf_srcfeat.metrics.evaluation.load_translation_metric()`), so evaluation works offline.
"""

import datasets
import evaluate

from hf_srcfeat.metrics.translation_scores import corpus_scores

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus-level sacreBLEU (cased; sacreBLEU's default tokenizer for the target language: 13a, or zh, ja-mecab,
ko-mecab for Chinese, Japanese, Korean), lowercased sacreBLEU, and chrF (character 6-grams, beta 2) of detokenized
hypotheses against one reference per segment, with sacreBLEU signatures.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): detokenized system outputs.
    references (`list[str]` or `list[list[str]]`): one reference (or a list with one reference) per output.
    target_lang (`str`, optional): the references' language code; BLEU tokenizes as sacreBLEU does by default for
        it (zh, ja and ko have tokenizers of their own), 13a without it.
Returns:
    bleu, bleu_lowercase, chrf (`float`), and their sacreBLEU signatures (`str`).
Examples:
    >>> import hf_srcfeat.metrics.evaluation
    >>> metric = hf_srcfeat.metrics.evaluation.load_translation_metric()
    >>> metric.compute(predictions=["a dog runs in the park"], references=["a dog runs in the park"])["bleu"]
    100.00000000000004
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TranslationMetric(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features({"predictions": datasets.Value("string"),
                                   "references": datasets.Sequence(datasets.Value("string"))}),
                datasets.Features({"predictions": datasets.Value("string"),
                                   "references": datasets.Value("string")}),
            ],
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references, target_lang=None):
        # One reference per segment, given alone or as a one-element list.
        return corpus_scores(predictions, [ref if isinstance(ref, str) else ref[0] for ref in references],
                             target_lang=target_lang)
