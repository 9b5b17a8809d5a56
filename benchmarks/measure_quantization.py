#!/usr/bin/env python
"""Dynamic int8 quantization (`hf-srcfeat-translate --quantize int8`) against float32, per model: how often the
translations are the same, what BLEU each gives, and how much faster int8 decodes, in one interleaved run.

    python -m benchmarks.measure_quantization --models runs/quickstart runs/pretrained_grafts/relevance/seed1 \
        --sentences 200 --rounds 2 --output benchmarks/results/quantization_int8.json

On the first `--sentences` sources of test_2016_flickr (parsed once, through the cache; encoded once with the
features each model reads), each model decodes with beam 4 in batches of 32 as float32 and as int8, the two taking
turns `--rounds` times on one torch thread; only `generate` is timed.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically


def main(argv: list[str] | None = None) -> dict:
    import sacrebleu
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.quantization import quantize_linear_layers
    from hf_srcfeat.single_row_products import set_cpu_threads
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import encoding_options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", required=True, help="trained model folders (with their tokenizers)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    set_cpu_threads(1)
    pairs = load_multi30k("test_2016_flickr", "en", "de", limit=args.sentences)
    sources, references = list(pairs["source"]), list(pairs["target"])

    results = {"code_version": code_version(), "torch": torch.__version__, "threads": 1,
               "command": "python -m benchmarks.measure_quantization " + " ".join(argv if argv is not None
                                                                                 else sys.argv[1:]),
               "settings": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
               "models": {}}
    for folder in args.models:
        tokenizer = load_tokenizer(folder)
        float_model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
        int8_model = quantize_linear_layers(copy.deepcopy(float_model))
        batches = [tokenizer(sources[start:start + args.batch_size], padding=True, return_tensors="pt",
                             **encoding_options(float_model.config))
                   for start in range(0, len(sources), args.batch_size)]
        seconds = {"float32": 0.0, "int8": 0.0}
        outputs: dict[str, list[str]] = {}
        for _ in range(args.rounds):
            for name, model in (("float32", float_model), ("int8", int8_model)):
                translations = []
                for batch in batches:
                    start = time.perf_counter()
                    with torch.no_grad():
                        generated = model.generate(**batch, num_beams=args.num_beams, do_sample=False,
                                                   max_new_tokens=args.max_new_tokens)
                    seconds[name] += time.perf_counter() - start
                    translations += [text.strip() for text in
                                     tokenizer.batch_decode(generated, skip_special_tokens=True)]
                outputs[name] = translations
        same = sum(a == b for a, b in zip(outputs["float32"], outputs["int8"], strict=True))
        results["models"][folder] = {
            "model_type": float_model.config.model_type,
            "parameters": sum(parameter.numel() for parameter in float_model.parameters()),
            "identical_translations": same, "agreement_rate": round(same / len(sources), 4),
            "bleu": {name: round(sacrebleu.corpus_bleu(texts, [references]).score, 2)
                     for name, texts in outputs.items()},
            "seconds": {name: round(value / args.rounds, 2) for name, value in seconds.items()},
            "int8_speedup": round(seconds["float32"] / seconds["int8"], 2)}
        print(folder, results["models"][folder], flush=True)
        write_json_atomically(args.output, results)  # after each model, so that a stopped run keeps what it measured
    return results


if __name__ == "__main__":
    main()
