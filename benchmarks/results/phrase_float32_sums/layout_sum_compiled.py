"""Compiled (inductor) bfloat16 phrase sum and spread, forward and backward: the phrase layout, which adds rows in
float32, against the same operations adding bfloat16 rows, taking turns in one process. From the repository root:
OMP_NUM_THREADS=1 python benchmarks/results/phrase_float32_sums/layout_sum_compiled.py SENTENCES TOKENS WIDTH > OUT.json
"""
import json
import subprocess
import sys
import time

import torch

from hf_srcfeat.modeling_phrase_rep import PhraseLayout, ngram_phrase_index


def bfloat16_sum(layout: PhraseLayout, values: torch.Tensor) -> torch.Tensor:
    rows = layout._empty_slot_rows(values).index_add(0, layout.slot_rows, values.flatten(0, 1))
    return layout._slots(rows, values)


def bfloat16_spread(layout: PhraseLayout, phrase_values: torch.Tensor) -> torch.Tensor:
    rows = phrase_values.flatten(0, 1).index_select(0, layout.phrase_rows)
    return rows.view(*layout.token_mask.shape, *phrase_values.shape[2:])


def loss(sum_, spread, layout, values, phrase_products):
    """The pooling's pattern: a sum over each phrase, and phrase vectors spread back to their tokens."""
    return (spread(layout, phrase_products) + spread(layout, sum_(layout, values))).float().square().mean()


sentences, tokens, width = (int(argument) for argument in sys.argv[1:4])
torch.manual_seed(0)
layout = PhraseLayout.from_phrase_index(ngram_phrase_index(torch.ones(sentences, tokens, dtype=torch.long)))
values = torch.randn(sentences, tokens, width, dtype=torch.bfloat16, requires_grad=True)
products = torch.randn(sentences, layout.num_phrases, width, dtype=torch.bfloat16, requires_grad=True)
variants = {"bfloat16_rows": (bfloat16_sum, bfloat16_spread),
            "float32_accumulation": (PhraseLayout.sum, PhraseLayout.spread)}
compiled = {name: torch.compile(lambda layout, values, products, ops=ops: loss(*ops, layout, values, products))
            for name, ops in variants.items()}
milliseconds: dict[str, list[float]] = {name: [] for name in variants}
for step in compiled.values():  # compile and warm up
    for _ in range(3):
        step(layout, values, products).backward()
for _round in range(5):
    for name, step in compiled.items():
        start = time.perf_counter()
        for _ in range(20):
            step(layout, values, products).backward()
        milliseconds[name].append((time.perf_counter() - start) / 20 * 1e3)
version = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"shape": [sentences, tokens, width], "phrases": "n-grams (3 tokens at these lengths)",
                  "torch": torch.__version__, "code_version": version, "threads": torch.get_num_threads(),
                  "milliseconds_per_step": milliseconds,
                  "float32_accumulation_over_bfloat16_rows_per_round": [
                      new / old for new, old in zip(milliseconds["float32_accumulation"],
                                                     milliseconds["bfloat16_rows"], strict=True)]}, indent=1))
