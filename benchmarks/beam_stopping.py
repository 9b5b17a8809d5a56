#!/usr/bin/env python
"""How much decoding beam search's stopping rule costs: decoder rows computed per sentence (each beam counted once
per step it is computed) by the zoo's loops under Transformers' default rule (`early_stopping=False`: a sentence runs
until no running beam can beat its finished ones) and under `early_stopping=True` (it stops once it has `num_beams`
finished hypotheses, as CTranslate2 does with its default patience of 1), with the share of identical translations.

    python -m benchmarks.beam_stopping --model runs/quickstart \
        --output benchmarks/results/beam_stopping.json

The first `--sentences` test_2016_flickr sources in batches of `--batch_size`, sorted by length as the translate
command batches them; beam 4 and the model's own generation settings (e.g. `no_repeat_ngram_size`;
`--no_repeat_ngram_size` sets another, 0 none). `--ctranslate2` also exports the model (float32, under `--work_dir`)
and records the share of each rule's translations identical to CTranslate2's with the same settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.measure_decoding_speed import test_sources
from hf_srcfeat.provenance import code_version
from hf_srcfeat.safe_writing import write_json_atomically

RULES = {"transformers_default": False, "num_beams_finished": True}  # name -> generate's early_stopping


def main(argv: list[str] | None = None) -> dict:
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat import decoding
    from hf_srcfeat.linear import prepared_inference_weights
    from hf_srcfeat.single_row_products import set_cpu_threads
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import encoding_options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--source_conllu", type=Path, default=None,
                        help="parses of test_2016_flickr's sources in order (instead of parsing them)")
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: the usual download)")
    parser.add_argument("--no_repeat_ngram_size", type=int, default=None,
                        help="instead of the model's own (0: no n-gram ban)")
    parser.add_argument("--ctranslate2", action="store_true",
                        help="also compare each rule's translations with the model's CTranslate2 export")
    parser.add_argument("--work_dir", type=Path, default=Path("runs/beam_stopping"),
                        help="where the CTranslate2 export is written")
    args = parser.parse_args(argv)
    if args.no_repeat_ngram_size is not None and args.no_repeat_ngram_size < 0:
        parser.error(f"--no_repeat_ngram_size must be 0 or more, got {args.no_repeat_ngram_size}")
    code_version()
    set_cpu_threads(1)

    try:
        sources, annotations = test_sources(args.sentences, args.data_dir, args.source_conllu)
    except ValueError as error:
        parser.error(str(error))
    tokenizer = load_tokenizer(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=torch.float32).eval()
    inputs = {"annotations": annotations} if annotations else {"text": sources}
    batches = [tokenizer(**{name: value[start:start + args.batch_size] for name, value in inputs.items()},
                         padding=True, return_tensors="pt", **encoding_options(model.config))
               for start in range(0, len(sources), args.batch_size)]
    if args.no_repeat_ngram_size is not None:
        model.generation_config.no_repeat_ngram_size = args.no_repeat_ngram_size
    no_repeat_ngram_size = model.generation_config.no_repeat_ngram_size or 0

    rows = 0
    step = decoding.DecoderState.step

    def counted_step(state, input_ids):
        nonlocal rows
        rows += input_ids.shape[0]
        return step(state, input_ids)

    results, translations = {}, {}
    decoding.DecoderState.step = counted_step  # type: ignore[method-assign]
    try:
        with torch.no_grad(), prepared_inference_weights(model):
            for rule, early_stopping in RULES.items():
                rows = 0
                outputs = [model.generate(**batch, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
                                          early_stopping=early_stopping) for batch in batches]
                translations[rule] = [text.strip() for output in outputs
                                      for text in tokenizer.batch_decode(output, skip_special_tokens=True)]
                results[rule] = {"decoder_rows_per_sentence": round(rows / len(sources), 2)}
    finally:
        decoding.DecoderState.step = step  # type: ignore[method-assign]
    same = sum(a == b for a, b in zip(*translations.values(), strict=True))
    if args.ctranslate2:
        from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator, export

        translator = CTranslate2Translator(export(args.model, str(args.work_dir / "float32"), None, force=True),
                                           intra_threads=1, no_repeat_ngram_size=no_repeat_ngram_size)
        exported = translator.translate(annotations or sources, num_beams=args.num_beams,
                                        max_new_tokens=args.max_new_tokens,
                                        batch_size=args.batch_size)
        for rule in RULES:
            results[rule]["identical_to_ctranslate2"] = sum(
                ours == theirs for ours, theirs in zip(translations[rule], exported, strict=True)) / len(sources)
    result = {"code_version": code_version(), "torch": torch.__version__,
              "command": "python -m benchmarks.beam_stopping " + " ".join(argv if argv is not None else sys.argv[1:]),
              "model": args.model, "sentences": len(sources), "batch_size": args.batch_size,
              "num_beams": args.num_beams, "no_repeat_ngram_size": no_repeat_ngram_size, "rules": results,
              "rows_over_num_beams_finished": round(results["transformers_default"]["decoder_rows_per_sentence"]
                                                    / results["num_beams_finished"]["decoder_rows_per_sentence"], 3),
              "identical_translations": same / len(sources)}
    print(result, flush=True)
    write_json_atomically(args.output, result, indent=1)
    return result


if __name__ == "__main__":
    main()
