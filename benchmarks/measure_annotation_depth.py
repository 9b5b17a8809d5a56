#!/usr/bin/env python
"""What raw text costs a model that reads no tag or tree (the baseline, n-gram phrases, latent feedback): the
pipeline segments it into the annotator's words only, against the full parse (tagging, lemmas, the dependency
tree) it was given before. Same words, so the same subwords and the same translations (checked here).

    python -m benchmarks.measure_annotation_depth --model runs/quickstart \\
        --output benchmarks/results/annotation_depth_baseline.json

Sources: the first `--sentences` Multi30k test_2016_flickr sources, translated with beam 4 in batches of 32 on one
thread, the annotation cache off (every round parses). The two paths alternate within each of `--rounds` rounds;
the median round is reported. Writes JSON (with the code version).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a trained model folder whose config reads no parse")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    parser.add_argument("--stanza_dir", default=None, help="Stanza resources (default: $HF_SRCFEAT_STANZA_DIR)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in ("sentences", "rounds", "num_beams", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_srcfeat import pipeline
    from hf_srcfeat.annotator_stanza import StanzaAnnotator
    from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
    from hf_srcfeat.provenance import code_version, processor_name
    from hf_srcfeat.safe_writing import write_json_atomically

    torch.set_num_threads(1)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    if model.config.reads_parse:
        raise SystemExit(f"{args.model} reads {model.config.source_features_read}: it needs the full parse.")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.set_annotator(StanzaAnnotator(model_dir=args.stanza_dir, use_cache=False))
    translator = pipeline("translation", model=model, tokenizer=tokenizer, num_beams=args.num_beams)
    texts = list(load_multi30k("test_2016_flickr", data_dir=args.data_dir, limit=args.sentences)["source"])

    def parsed() -> list:  # what the pipeline did for every model: the full parse
        return translator(tokenizer.annotate(texts), batch_size=args.batch_size)

    def words_only() -> list:  # what it does now for a model that reads no parse
        return translator(texts, batch_size=args.batch_size)

    def annotate(words: bool) -> None:
        tokenizer.annotate(texts, words_only=words)

    paths = {"full_parse_then_translate": parsed, "words_only_then_translate": words_only,
             "full_parse_alone": lambda: annotate(False), "words_only_alone": lambda: annotate(True)}
    outputs = {name: paths[name]() for name in ("full_parse_then_translate", "words_only_then_translate")}  # warm-up
    if outputs["full_parse_then_translate"] != outputs["words_only_then_translate"]:
        raise SystemExit("the two paths translate differently: the segmentation is not the parse's")
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    for round_index in range(args.rounds):
        for name, run in paths.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
            print(f"round {round_index}: {name} {seconds[name][-1]:.2f} s", flush=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "command": "python -m benchmarks.measure_annotation_depth " + " ".join(
            f"--{key} {value}" for key, value in vars(args).items() if value is not None),
        "code_version": code_version(),
        "processor": processor_name(),
        "torch_threads": torch.get_num_threads(),
        "model": str(args.model), "model_type": model.config.model_type,
        "source_features_read": list(model.config.source_features_read),
        "data": str(multi30k_file("test_2016_flickr", "en", args.data_dir)),
        "sentences": len(texts), "num_beams": args.num_beams, "batch_size": args.batch_size, "rounds": args.rounds,
        "same_translations": True,
        "seconds_per_round": seconds,
        "median_seconds": median,
        "sentences_per_second": {name: len(texts) / value for name, value in median.items()},
        "speedup_of_translating_raw_text": median["full_parse_then_translate"] / median["words_only_then_translate"],
        "speedup_of_annotation": median["full_parse_alone"] / median["words_only_alone"],
    }
    write_json_atomically(args.output, result)
    print({key: result[key] for key in ("sentences_per_second", "speedup_of_translating_raw_text",
                                        "speedup_of_annotation")})
    return result


if __name__ == "__main__":
    main()
