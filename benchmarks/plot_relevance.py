#!/usr/bin/env python
"""Plot the relevance masks of a trained relevance-features model, as Tables 9-10 of Chakrabarty et al.

Self relevance (Table 9): the mask of a factor depends on the factor's value only, e.g. one curve per POS tag:

    python -m benchmarks.plot_relevance runs/relevance_features_multi30k_en_de --factor pos \
        --values NOUN PROPN VERB ADJ ADV PRON DET ADP CCONJ NUM PUNCT AUX --output pos_relevance.png

With a tokenizer trained with `pos_tagset="xpos"` (Penn Treebank tags for English, as the paper's CoreNLP), the
POS masks default to the paper's 12 categories (NN NNP NNS JJ PRP CC RB VB VBD VBN VBZ SYM); with UPOS, to the
12 UPOS tags above:

    python -m benchmarks.plot_relevance runs/relevance_xpos --factor pos --output pos_relevance.png

Word-based relevance (Table 10): the mask depends on the subword too, e.g. the PROPN mask of several names:

    python -m benchmarks.plot_relevance runs/word_relevance --factor pos --values PROPN \
        --words Monday Tuesday Germany France --output propn_relevance.png

x: mask dimension (1 ... d_k), y: sigmoid output. The masks are also written as JSON next to the PNG.
Words that the subword model splits into several pieces are skipped (the paper picks unsplit words).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_srcfeat  # noqa: F401  (registers the model classes)
from hf_srcfeat.configuration_relevance_features import FACTOR_FEATURE_NAMES
from hf_srcfeat.feature_vocabulary import UNK_ID

#: Section 4.2's "12 primary POS categories" (Penn Treebank), the default POS values of an XPOS model.
PAPER_PTB_CATEGORIES = ("NN", "NNP", "NNS", "JJ", "PRP", "CC", "RB", "VB", "VBD", "VBN", "VBZ", "SYM")
#: Their closest universal tags, the default POS values of a UPOS model.
UPOS_CATEGORIES = ("NOUN", "PROPN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "CCONJ", "NUM", "PUNCT", "AUX")


def default_values(tokenizer, factor: str) -> list[str]:
    """The POS categories to draw when --values is not given, in the tokenizer's tag set."""
    if factor != "pos":
        raise SystemExit(f"give --values: labels of the {factor!r} factor to draw.")
    vocabularies = tokenizer.feature_vocabularies
    categories = PAPER_PTB_CATEGORIES if vocabularies.pos_tagset == "xpos" else UPOS_CATEGORIES
    missing = [tag for tag in categories if tag not in vocabularies.pos.ids]
    if missing:
        print(f"skipped {missing}: not in the model's POS vocabulary (never seen in its training data)")
    return [tag for tag in categories if tag not in missing]


def single_subword_id(tokenizer, word: str) -> int | None:
    """The id of `word` as one subword at the start of a sentence, or None if it is split."""
    ids = tokenizer(word, source_features=False, add_special_tokens=False)["input_ids"]
    return ids[0] if len(ids) == 1 else None


def relevance_curves(model, tokenizer, factor: str, values: list[str], words: list[str] | None
                     ) -> dict[str, list[float]]:
    """Curve label -> mask of `factor`, for each value (self relevance) or each word with each value."""
    vocabulary = getattr(tokenizer.feature_vocabularies, factor)
    unknown = [value for value in values if vocabulary.id(value) == UNK_ID]
    if unknown:
        tagset = f" ({tokenizer.feature_vocabularies.pos_tagset.upper()} tags)" if factor == "pos" else ""
        raise SystemExit(f"{unknown} are not in the model's {factor} vocabulary{tagset}; it has "
                         f"{vocabulary.labels[3:][:40]}.")
    combine = model.config.relevance_combine
    if combine == "word_relevance" and not words:
        raise SystemExit("word_relevance masks depend on the word: give --words.")
    pairs: list[tuple[str, int, int]] = []  # (label, subword id, factor id)
    if words:
        for word in words:
            subword = single_subword_id(tokenizer, word)
            if subword is None:
                print(f"skipped {word!r}: the subword model splits it")
                continue
            pairs += [(f"{word} ({value})" if len(values) > 1 else word, subword, vocabulary.id(value))
                      for value in values]
    else:
        pairs = [(value, tokenizer.unk_token_id, vocabulary.id(value)) for value in values]
    if not pairs:
        raise SystemExit("nothing to plot.")
    input_ids = torch.tensor([[subword for _, subword, _ in pairs]])
    # The other factors do not enter this factor's mask (Sections 3.2.1-3.2.2); they are set to <unk>.
    features = {name: torch.full_like(input_ids, UNK_ID) for name in FACTOR_FEATURE_NAMES.values()}
    features[FACTOR_FEATURE_NAMES[factor]] = torch.tensor([[factor_id for _, _, factor_id in pairs]])
    masks = model.relevance_masks(input_ids=input_ids, **features)[factor][0]
    return {label: mask.tolist() for (label, _, _), mask in zip(pairs, masks, strict=True)}


def plot(curves: dict[str, list[float]], title: str, output: Path) -> None:
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, values in curves.items():
        axes.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=label)
    axes.set_xlabel("dimension")
    axes.set_ylabel("sigmoid output")
    axes.set_title(title)
    axes.set_ylim(0, 1)
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(output, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="folder (or Hub id) of a trained relevance_features model and tokenizer")
    parser.add_argument("--factor", default="pos", choices=list(FACTOR_FEATURE_NAMES))
    parser.add_argument("--values", nargs="+", help=(
        "labels of the factor, e.g. POS tags in the tokenizer's tag set; default for pos: the paper's 12 "
        "Penn Treebank categories (XPOS tokenizer) or 12 UPOS tags"))
    parser.add_argument("--words", nargs="*", help="words whose masks to plot (word_relevance)")
    parser.add_argument("--output", required=True, help="PNG file; the masks go to the same name .json")
    args = parser.parse_args(argv)

    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    if model.config.model_type != "relevance_features":
        raise SystemExit(f"{args.model} is a {model.config.model_type} model, not relevance_features.")
    if args.factor not in model.config.source_factors:
        raise SystemExit(f"the model does not use the {args.factor!r} factor ({model.config.source_factors}).")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    values = args.values or default_values(tokenizer, args.factor)
    curves = relevance_curves(model, tokenizer, args.factor, values, args.words)
    output = Path(args.output)
    plot(curves, f"{model.config.relevance_combine}: {args.factor} mask", output)
    output.with_suffix(".json").write_text(json.dumps(
        {"model": args.model, "factor": args.factor, "combine": model.config.relevance_combine, "masks": curves},
        indent=1))
    print(f"wrote {output} and {output.with_suffix('.json')}")
    return curves


if __name__ == "__main__":
    main()
