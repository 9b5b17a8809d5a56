#!/usr/bin/env python
"""CTranslate2 export against the PyTorch model: do they translate alike, and how much faster is the export?

    python -m benchmarks.measure_ctranslate2 --model runs/quickstart --sentences 100 --rounds 2 \
        --output benchmarks/results/ctranslate2_speed.json

Exports the model twice (float32 and int8) into `--work_dir`, then, on the first `--sentences` sources of
test_2016_flickr: (1) counts float32 greedy translations identical to the PyTorch model's greedy ones; (2) times
every backend (PyTorch float32, CTranslate2 float32, CTranslate2 int8) at batch 1 and 32, greedy and beam 4, in
`--rounds` rounds in which the backends take turns on the same sentences (so load on the machine hits all alike),
each on one thread. The sources are segmented into the annotator's words once, outside the timings (the words both
backends read); each backend's subword encoding is timed with its decoding.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_srcfeat  # noqa: F401  (registers the model classes)
from hf_srcfeat.commands.train import code_version
from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator, export
from hf_srcfeat.safe_writing import write_json_atomically
from hf_srcfeat.single_row_products import set_cpu_threads


def pytorch_decode(model, tokenizer, sources: list, batch_size: int, num_beams: int, max_new_tokens: int
                   ) -> list[str]:
    """Greedy or beam outputs of the PyTorch model for sources segmented into the annotator's words, encoded as
    the CTranslate2 translator encodes them (subwords alone)."""
    outputs = []
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(annotations=sources[start:start + batch_size], source_feature_names=(),
                          return_dep_distance=False, return_word_heads=False, padding=True, return_tensors="pt")
        with torch.no_grad():
            generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                       num_beams=num_beams, do_sample=False, max_new_tokens=max_new_tokens)
        outputs += [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    return outputs


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained baseline (folder with its tokenizer)")
    parser.add_argument("--work_dir", default="runs/ctranslate2_measure", help="where the exports are written")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--output", required=True, help="JSON file for the results")
    args = parser.parse_args(argv)
    set_cpu_threads(1)

    work = Path(args.work_dir)
    exports = {quantization: export(args.model, str(work / quantization), None if quantization == "float32"
                                    else quantization, force=True) for quantization in ("float32", "int8")}
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    translators = {name: CTranslate2Translator(folder, intra_threads=1) for name, folder in exports.items()}
    texts = list(load_multi30k("test_2016_flickr", "en", "de", limit=args.sentences)["source"])
    # Segmented into the annotator's words once, before any timing: both backends read those words.
    sources = translators["float32"].annotate(texts)

    reference = pytorch_decode(model, tokenizer, sources, 32, 1, args.max_new_tokens)
    ct2_greedy = translators["float32"].translate(sources, num_beams=1, max_new_tokens=args.max_new_tokens)
    identical = sum(a == b for a, b in zip(reference, ct2_greedy, strict=True))
    print(f"float32 greedy: {identical} of {len(sources)} translations identical to PyTorch's")

    backends = {
        "pytorch_float32": lambda batch, beams: pytorch_decode(model, tokenizer, sources, batch, beams,
                                                               args.max_new_tokens),
        "ctranslate2_float32": lambda batch, beams: translators["float32"].translate(
            sources, num_beams=beams, max_new_tokens=args.max_new_tokens, batch_size=batch),
        "ctranslate2_int8": lambda batch, beams: translators["int8"].translate(
            sources, num_beams=beams, max_new_tokens=args.max_new_tokens, batch_size=batch),
    }
    settings = [(batch, beams) for batch in (1, 32) for beams in (1, 4)]
    seconds: dict[str, list[float]] = {f"{name} batch{batch} beam{beams}": [] for name in backends
                                       for batch, beams in settings}
    for round_index in range(args.rounds):
        for batch, beams in settings:
            for name, run in backends.items():
                start = time.perf_counter()
                run(batch, beams)
                seconds[f"{name} batch{batch} beam{beams}"].append(time.perf_counter() - start)
        print(f"round {round_index + 1} done", flush=True)

    table = {}
    for batch, beams in settings:
        base = sum(seconds[f"pytorch_float32 batch{batch} beam{beams}"])
        for name in backends:
            total = sum(seconds[f"{name} batch{batch} beam{beams}"])
            table[f"{name} batch{batch} beam{beams}"] = {
                "sentences_per_second": round(args.rounds * len(sources) / total, 2),
                "speedup_over_pytorch": round(base / total, 2),
                "seconds_per_round": [round(value, 2) for value in seconds[f"{name} batch{batch} beam{beams}"]]}
    result = {"model": args.model, "data_file": str(multi30k_file("test_2016_flickr", "en")),
              "sentences": len(sources), "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
              "threads": 1, "greedy_float32_identical": identical, "timings": table,
              "torch": torch.__version__, "ctranslate2": __import__("ctranslate2").__version__,
              "code_version": code_version()}
    write_json_atomically(args.output, result, indent=1)
    for key, row in table.items():
        print(f"{key}: {row['sentences_per_second']} sent/s, {row['speedup_over_pytorch']}x")
    return result


if __name__ == "__main__":
    main()
