#!/usr/bin/env python
"""Decoding speed of every model type against a baseline of the same size, and of that baseline against its
CTranslate2 export, in one interleaved run: where each method stands against "within 1.15x of the baseline" and the
baseline against "within 1.5x (batch 32, beam 4) / 2x (batch 1, greedy) of CTranslate2".

    python -m benchmarks.measure_decoding_speed --models runs/pretrained_grafts/continued/seed1 \
        runs/pretrained_grafts/{relevance,deps_san,fusing_diverse}/seed1 --sentences 100 --rounds 2 \
        --ctranslate2 --output benchmarks/results/decoding_speed.json

The first model is the baseline. On the first `--sentences` sources of test_2016_flickr, every model's inputs are
encoded once with the features it reads (parses through the cache), outside the timings; then, for each setting,
the models (and the baseline's CTranslate2 float32 export, which tokenizes inside its timing) take turns on one
thread, `--rounds` times. Only decoding is timed; generation runs to `--max_new_tokens` at most.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically

SETTINGS = ((32, 4), (1, 1))  # (batch size, beams): the two operating points


def main(argv: list[str] | None = None) -> dict:
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import tree_options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", required=True, help="model folders; the first is the baseline")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ctranslate2", action="store_true", help="also the baseline's CTranslate2 export")
    parser.add_argument("--work_dir", default="runs/decoding_speed", help="where the export is written")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sources = list(load_multi30k("test_2016_flickr", "en", "de", limit=args.sentences)["source"])

    runners = {}
    model_types = {}
    for folder in args.models:
        tokenizer = load_tokenizer(folder)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
        model_types[folder] = model.config.model_type
        encoded = {batch_size: [tokenizer(sources[start:start + batch_size], padding=True, return_tensors="pt",
                                          **tree_options(model.config))
                                for start in range(0, len(sources), batch_size)]
                   for batch_size, _ in SETTINGS}

        def decode(batch_size: int, beams: int, model=model, encoded=encoded) -> None:
            with torch.no_grad():
                for batch in encoded[batch_size]:
                    model.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=args.max_new_tokens)

        runners[folder] = decode
    export_error = None
    if args.ctranslate2:
        from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator, export

        try:
            exported = export(args.models[0], str(Path(args.work_dir) / "float32"), None, force=True)
            translator = CTranslate2Translator(exported, intra_threads=1)
            runners["ctranslate2_float32"] = lambda batch_size, beams: translator.translate(
                sources, num_beams=beams, max_new_tokens=args.max_new_tokens, batch_size=batch_size)
        except (ValueError, ImportError) as error:
            export_error = f"{type(error).__name__}: {error}"
            print(f"no CTranslate2 row: {export_error}", flush=True)

    seconds = {(name, batch_size, beams): 0.0 for name in runners for batch_size, beams in SETTINGS}
    for name in runners:  # warm-up
        runners[name](SETTINGS[0][0], SETTINGS[0][1])
    for round_index in range(args.rounds):
        for batch_size, beams in SETTINGS:
            for name, run in runners.items():
                start = time.perf_counter()
                run(batch_size, beams)
                seconds[(name, batch_size, beams)] += time.perf_counter() - start
        print(f"round {round_index + 1} done", flush=True)

    baseline = args.models[0]
    timings = {}
    for batch_size, beams in SETTINGS:
        setting = f"batch{batch_size}_beam{beams}"
        timings[setting] = {}
        for name in runners:
            total = seconds[(name, batch_size, beams)]
            row = {"model_type": model_types.get(name, "ctranslate2"),
                   "sentences_per_second": round(args.rounds * len(sources) / total, 2),
                   "time_over_baseline": round(total / seconds[(baseline, batch_size, beams)], 3)}
            if "ctranslate2_float32" in runners:
                row["time_over_ctranslate2"] = round(total / seconds[("ctranslate2_float32", batch_size, beams)], 3)
            timings[setting][name] = row
            print(setting, name, row, flush=True)
    result = {"code_version": code_version(), "torch": torch.__version__, "threads": 1,
              "command": "python -m benchmarks.measure_decoding_speed " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:]),
              "sentences": len(sources), "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
              "baseline": baseline, "ctranslate2_export_error": export_error, "timings": timings}
    write_json_atomically(args.output, result, indent=1)
    return result


if __name__ == "__main__":
    main()
