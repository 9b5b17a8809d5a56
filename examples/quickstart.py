#!/usr/bin/env python
"""Quickstart: train a small English->German baseline on Multi30k for a few minutes, save it, translate.

    bash run.sh quickstart                     # 300 steps, parse included: under 10 minutes on 2 CPU cores
    bash run.sh quickstart --max_steps 1500    # longer training, better translations

Writes into a new folder under runs/ (never into an existing one) and prints source, reference and
output for a handful of test sentences.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_srcfeat  # noqa: F401  (registers the model classes with the Auto classes)
from hf_srcfeat.commands import train
from hf_srcfeat.data.multi30k import load_multi30k

#: Padded tokens per training batch (rows x longest of source and target): about 60 Multi30k sentence pairs.
TOKENS_PER_BATCH = 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max_steps", type=int, default=300,
                        help="training steps of about 1,000 tokens, some 60 sentences (default 300)")
    parser.add_argument("--minutes", type=float, default=None, help="optional wall-clock cap on training")
    parser.add_argument("--output_dir", default=None, help="default: runs/quickstart-<timestamp>")
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    parser.add_argument("--examples", type=int, default=6, help="test sentences to print")
    args = parser.parse_args()
    if args.max_steps < 1:
        parser.error(f"--max_steps must be 1 or more, got {args.max_steps}.")
    output_dir = Path(args.output_dir or f"runs/quickstart-{time.strftime('%Y%m%d-%H%M%S')}")
    if output_dir.is_dir() and any(output_dir.iterdir()):
        parser.error(f"--output_dir {output_dir} is not empty: the quickstart writes a new folder; name another.")
    if "OMP_NUM_THREADS" not in os.environ:  # the two cores it is sized for, unless told otherwise
        torch.set_num_threads(2)
    argv = [
        "--output_dir", str(output_dir), "--do_train",
        "--max_steps", str(args.max_steps),
        "--d_model", "256", "--encoder_layers", "3", "--decoder_layers", "3", "--attention_heads", "4",
        "--ffn_dim", "1024", "--vocab_size", "8000", "--layernorm_position", "pre",
        "--dropout", "0.1",  # a few hundred steps: the from-scratch default of 0.3 regularises more than they need
        # Token batches: sentences of similar length, so that little of each step is padding.
        "--max_tokens_per_batch", str(TOKENS_PER_BATCH), "--learning_rate", "2e-3", "--lr_scheduler_type",
        "inverse_sqrt",
        "--warmup_steps", "60", "--adam_beta2", "0.98", "--weight_decay", "0.0001",
        "--logging_steps", "25", "--save_strategy", "no", "--report_to", "none", "--use_cpu",
        "--do_predict", "--predict_with_generate", "--generation_num_beams", "4", "--generation_max_length", "64",
        "--no_repeat_ngram_size", "3",  # an under-trained model repeats itself ("orange orange orange ...")
        "--max_predict_samples", "200", "--per_device_eval_batch_size", "50", "--seed", "1",
        # Parse and tokenize only the sentences the steps will see, with two processes.
        "--max_train_samples", str(min(29000, args.max_steps * 64)), "--annotation_num_proc", "2",
    ]
    if args.data_dir:
        argv += ["--data_dir", args.data_dir]
    if args.minutes:
        argv += ["--max_train_minutes", str(args.minutes)]
    results = train.main(argv)
    test = results.get("test_metrics", {})
    print(f"\nModel saved in {output_dir}. On the first 200 test_2016_flickr sentences (beam 4): "
          f"sacreBLEU {test.get('test_bleu', float('nan')):.1f}, chrF {test.get('test_chrf', float('nan')):.1f}")

    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    pairs = load_multi30k("test_2016_flickr", data_dir=args.data_dir, limit=args.examples)
    inputs = tokenizer(list(pairs["source"]), padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = model.generate(**inputs, num_beams=4, no_repeat_ngram_size=3)
    for source, reference, output in zip(pairs["source"], pairs["target"],
                                         tokenizer.batch_decode(outputs, skip_special_tokens=True), strict=True):
        print(json.dumps({"source": source, "reference": reference, "output": output.strip()},
                         ensure_ascii=False))
    print(f"\nThese are {args.max_steps} steps of a small model: the benchmark's 1,200-step baseline scores about 30 "
          "BLEU on the whole test set (docs/results/benchmark.md). Next: `bash run.sh quickstart --max_steps 1500`, "
          f"`hf-srcfeat-translate --model {output_dir} --input your.en`, or a method by name: `hf-srcfeat-train "
          "--variant relevance_concat ...` (docs/guides/training.md).")


if __name__ == "__main__":
    main()
