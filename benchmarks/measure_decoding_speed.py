#!/usr/bin/env python
"""Decoding speed of every model type with the zoo's decoding loops (`hf_srcfeat.decoding`, what `generate` runs
by default), against Transformers' own loops and against the baseline's CTranslate2 export, in one interleaved run:
where each method stands against "within 1.15x of the baseline" and the baseline against "within 1.5x (batch 32,
beam 4) / 2x (batch 1, greedy) of CTranslate2".

    python -m benchmarks.measure_decoding_speed --models runs/quickstart \
        --graft relevance_features deps_san diverse_input phrase_rep latent_feedback composed \
        --sentences 100 --rounds 2 --ctranslate2 --output benchmarks/results/decoding_speed_every_step.json

The first model is the baseline. `--graft` adds each method to it in its graft form (closed gates: the same
translations as the baseline, so every model decodes outputs of the same lengths and the timings compare the cost
per token). Each setting starts from weights not yet prepared for inference, as in a process that decodes only
that way: each model's first arm (`fast`) makes them in its time, unless `--prepare_untimed` has each model decode
the setting's first batch before the timed arms (for short runs of large models, where making them would weigh on
the fast arm alone). Each model runs five arms (`--loops`: some of them, `fast` always): `fast` (the zoo's loops,
its matrix kernels reading weights prepared for inference: the default), `fast_modules` (the same, each decoding
step through the decoder's modules instead of as tensor operations, `hf_srcfeat.decoder_step`), `fast_unprepared`
(the same loops, the kernels reading the weights as stored), `transformers` (Transformers' loops, the default
kernels) and `transformers_mkl` (Transformers' loops with PyTorch's default matrix kernels: what Transformers alone
gives); `--loops fast_mkl_rows` adds the fast arm with single rows multiplied through PyTorch's MKL instead of
numpy's OpenBLAS (`hf_srcfeat.single_row_products`). On the first `--sentences` sources of test_2016_flickr, every
model's inputs are encoded once with the features it reads (parses through the cache), outside the timings, in
batches of sources sorted by length, longest first, as the translate command batches them and CTranslate2 its own
batches (`--input_order`: in corpus order); then, for each setting, the arms and the baseline's CTranslate2 float32
export (which tokenizes inside its timing, with the baseline's `no_repeat_ngram_size`) take turns on one thread,
`--rounds` times, each arm's median round reported (every round's seconds beside it). Only decoding is timed;
generation runs to `--max_new_tokens` at most. The warm-up run also compares the arms' token ids
(`identical_to_...`) and the baseline's translations with CTranslate2's (`identical_to_ctranslate2`).

`--device cuda` measures the same on a GPU: the `fast`, `fast_modules` and `transformers` arms only (oneDNN and
CTranslate2's CPU export do not apply), float32 without TF32, timed with the device synchronised, and generated
tokens/s reported beside sentences/s. `--source_conllu` reads the sources' parses from CoNLL-U
(`hf-srcfeat-annotate`) for a machine without the parser. `--operation_breakdown` (CPU) also records, for the
baseline's fast path in each setting, the time of each tensor operation per sentence (`benchmarks/op_timing.py`),
after the timed rounds; single rows are multiplied by PyTorch's kernel there, since the timer would not see numpy's.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hf_srcfeat.provenance import code_version, processor_name
from hf_srcfeat.safe_writing import write_json_atomically

SETTINGS = ((32, 4), (1, 1))  # (batch size, beams): the two operating points
#: Arm -> (generate's fast_decoding, the backbone's linear kernels: "prepared" (the default: oneDNN, weights in
#: prepared layouts, single rows through numpy's OpenBLAS where it applies), "prepared_mkl_rows" (the same, single rows
#: through PyTorch's MKL), "onednn" (weights as stored) or "pytorch" (PyTorch's default kernels), whether the zoo's
#: loops take their steps as tensor operations (`hf_srcfeat.decoder_step`, the default) or through the modules).
LOOPS = {"fast": (True, "prepared", True), "fast_modules": (True, "prepared", False),
         "fast_unprepared": (True, "onednn", True), "transformers": (False, "prepared", True),
         "transformers_mkl": (False, "pytorch", True), "fast_mkl_rows": (True, "prepared_mkl_rows", True)}
#: The arms run unless `--loops` names others: all but the comparison of single-row kernels.
DEFAULT_LOOPS = [loop for loop in LOOPS if loop != "fast_mkl_rows"]
#: --graft name -> (model type, method arguments): the published method each stands for, in its graft form.
GRAFTS = {
    "relevance_features": ("relevance_features", {}),
    "deps_san": ("deps_san", {}),
    "diverse_input": ("diverse_input", {"diverse_variant": "fusing_diverse"}),
    "phrase_rep": ("phrase_rep", {}),
    "latent_feedback": ("latent_feedback", {}),
    "composed": ("srcfeat_composed", {"components": ["relevance_features", "deps_san"]}),
}


def generated_token_count(sequences, eos_token_id: int, pad_token_id: int) -> int:
    """Tokens each row generated after the decoder's start token, up to and with its first </s>: beam search fills
    a finished row with </s> (greedy with padding), which are not generated tokens."""
    generated = sequences[:, 1:]
    is_eos = generated == eos_token_id
    before_first_eos = (is_eos.long().cumsum(-1) - is_eos.long()) == 0
    return int((before_first_eos & (generated != pad_token_id)).sum())


def identical_row_share(outputs: list, references: list) -> float:
    """The share of output rows (token ids, batch by batch) equal to the reference's row; batches of different
    shapes count as all rows different."""
    import torch

    same = [torch.equal(ours[row], theirs[row]) if ours.shape == theirs.shape else False
            for ours, theirs in zip(outputs, references, strict=True) for row in range(ours.shape[0])]
    return sum(same) / len(same)


def test_sources(sentences: int, data_dir: str | None, source_conllu: Path | None, sort_by_length: bool = True
                 ) -> tuple[list[str], list | None]:
    """The first `sentences` test_2016_flickr sources and, from `source_conllu`, their parses (None without it),
    sorted longest first unless `sort_by_length` is False: as the translate command batches a chunk and
    CTranslate2 its `max_batch_size` batches. ValueError when the parses are of other sentences or `sentences` is
    below 1."""
    from hf_srcfeat.conllu import read_conllu
    from hf_srcfeat.data.multi30k import load_multi30k

    if sentences < 1:
        raise ValueError(f"--sentences must be at least 1, got {sentences}")
    sources = list(load_multi30k("test_2016_flickr", "en", "de", data_dir, limit=sentences)["source"])
    annotations = None
    if source_conllu:
        annotations = list(itertools.islice(read_conllu(source_conllu), len(sources)))
        if [sentence.text for sentence in annotations] != sources:
            raise ValueError(f"{source_conllu} does not hold the parses of test_2016_flickr's first "
                             f"{len(sources)} sources in order")
    if sort_by_length:
        order = sorted(range(len(sources)), key=lambda index: -(len(annotations[index].words) if annotations
                                                                 else len(sources[index].split())))
        sources = [sources[index] for index in order]
        annotations = [annotations[index] for index in order] if annotations else None
    return sources, annotations


def graft_methods(baseline: str, names: list[str], work_dir: Path) -> list[str]:
    """Save each method grafted onto the baseline (with its tokenizer) under `work_dir`; returns the folders."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat.pretrained_checkpoints import graft
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    tokenizer = load_tokenizer(baseline)
    model = AutoModelForSeq2SeqLM.from_pretrained(baseline, dtype=torch.float32).eval()
    folders = []
    for name in names:
        model_type, arguments = GRAFTS[name]
        grafted = graft(model, model_type, **tokenizer.feature_vocabularies.sizes(), **arguments)
        folder = work_dir / name
        grafted.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(str(folder))
    return folders


def timed_setting(runners: dict, preparers: list, batch_size: int, beams: int,
                  prepared_weights: Callable[[], contextlib.AbstractContextManager]) -> dict:
    """Each arm's seconds for one setting, the arms taking turns within one fresh `prepared_weights()` block: each
    setting starts from weights not yet prepared, as in a process that decodes only this way (a layer keeps one
    prepared copy, packed once it met several rows). Making them falls in each model's first arm's time, or, where
    `preparers` are given (`--prepare_untimed`), in theirs, before the timings."""
    seconds = {}
    with prepared_weights():
        for prepare in preparers:
            prepare(batch_size, beams)
        for key, run in runners.items():
            start = time.perf_counter()
            run(batch_size, beams)
            seconds[key] = time.perf_counter() - start
    return seconds


def main(argv: list[str] | None = None) -> dict:
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat import decoder_step, linear, single_row_products
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import encoding_options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", required=True, help="model folders; the first is the baseline")
    parser.add_argument("--graft", nargs="*", default=[], choices=sorted(GRAFTS),
                        help="methods grafted onto the baseline and measured beside it")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ctranslate2", action="store_true", help="also the baseline's CTranslate2 export")
    parser.add_argument("--work_dir", type=Path, default=Path("runs/decoding_speed"),
                        help="where the grafted models and the export are written")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--device", default="cpu", help="cpu (default: one thread) or cuda")
    parser.add_argument("--source_conllu", type=Path, default=None,
                        help="parses of test_2016_flickr's sources in order (instead of parsing them)")
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: the usual download)")
    parser.add_argument("--operation_breakdown", action="store_true",
                        help="also time each tensor operation of the baseline's fast path, per sentence, in each "
                             "setting (benchmarks/op_timing.py)")
    parser.add_argument("--prepare_untimed", action="store_true",
                        help="make each model's prepared weights before the timed arms of each setting (each model "
                             "decodes the setting's first batch untimed), as a long-running process has them, instead "
                             "of in its fast arm's time")
    parser.add_argument("--input_order", action="store_true",
                        help="batch the sources in corpus order instead of sorted by length")
    parser.add_argument("--loops", nargs="+", choices=list(LOOPS), default=DEFAULT_LOOPS,
                        help="the arms each model runs (default: the five above; `fast` must be among them): fewer "
                             "arms make a round shorter, so more rounds fit")
    args = parser.parse_args(argv)
    code_version()  # read now: the run keeps the code it imported, whatever the checkout becomes meanwhile
    cuda = args.device.startswith("cuda")
    if cuda and args.ctranslate2:
        parser.error("--ctranslate2 measures the CPU export; leave it out with --device cuda")
    if cuda and args.operation_breakdown:
        parser.error("--operation_breakdown times operations as the CPU runs them; leave it out with --device cuda")
    if "fast" not in args.loops:
        parser.error(f"--loops {' '.join(args.loops)}: `fast` must be among them (every ratio is to the fast arm)")
    if not cuda:
        single_row_products.set_cpu_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    # On a GPU the kernels are PyTorch's whatever the arm: only the loops differ.
    loops = {loop: kernels for loop, kernels in LOOPS.items()
             if loop in args.loops and (not cuda or loop in ("fast", "fast_modules", "transformers"))}
    references = [loop for loop in loops if loop != "fast"]  # what the fast loops are compared with
    try:
        sources, annotations = test_sources(args.sentences, args.data_dir, args.source_conllu,
                                            sort_by_length=not args.input_order)
    except ValueError as error:
        parser.error(str(error))
    models = args.models + graft_methods(args.models[0], args.graft, args.work_dir)
    default_min_rows = linear.ONEDNN_MIN_ROWS

    runners, model_types, special_token_ids, loaded = {}, {}, {}, []
    preparers: list = []  # per model: decodes a setting's first batch (`--prepare_untimed`)
    for folder in models:
        tokenizer = load_tokenizer(folder)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).to(args.device).eval()
        loaded.append(model)
        inputs = {"annotations": annotations} if annotations else {"text": sources}
        encoded = {batch_size: [tokenizer(**{name: value[start:start + batch_size] for name, value in inputs.items()},
                                          padding=True, return_tensors="pt", **encoding_options(model.config)
                                          ).to(args.device)
                                for start in range(0, len(sources), batch_size)]
                   for batch_size, _ in SETTINGS}
        for loop, (fast_decoding, kernels, tensor_operation_steps) in loops.items():
            def decode(batch_size: int, beams: int, model=model, encoded=encoded, fast_decoding=fast_decoding,
                       kernels=kernels, tensor_operation_steps=tensor_operation_steps):
                linear.ONEDNN_MIN_ROWS = sys.maxsize if kernels == "pytorch" else default_min_rows
                linear.PREPARED_INFERENCE_WEIGHTS = kernels in ("prepared", "prepared_mkl_rows")
                single_row_products.OPENBLAS_SINGLE_ROWS = kernels != "prepared_mkl_rows"
                decoder_step.STEPS_AS_TENSOR_OPERATIONS = tensor_operation_steps
                try:
                    with torch.no_grad():
                        outputs = [model.generate(**batch, num_beams=beams, do_sample=False,
                                                  fast_decoding=fast_decoding, max_new_tokens=args.max_new_tokens)
                                   for batch in encoded[batch_size]]
                    if cuda:
                        torch.cuda.synchronize()
                    return outputs
                finally:
                    linear.ONEDNN_MIN_ROWS, linear.PREPARED_INFERENCE_WEIGHTS = default_min_rows, True
                    single_row_products.OPENBLAS_SINGLE_ROWS = True
                    decoder_step.STEPS_AS_TENSOR_OPERATIONS = True

            runners[(folder, loop)] = decode
            model_types[(folder, loop)] = model.config.model_type
            special_token_ids[(folder, loop)] = (model.config.eos_token_id, model.config.pad_token_id)

        def prepare(batch_size: int, beams: int, model=model, encoded=encoded) -> None:
            """The model's prepared weights for this setting, made as its fast arm's first batch makes them."""
            with torch.no_grad():
                model.generate(**encoded[batch_size][0], num_beams=beams, do_sample=False,
                               max_new_tokens=args.max_new_tokens)
        preparers.append(prepare)
    export_error = None
    if args.ctranslate2:
        from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator, export

        try:
            exported = export(args.models[0], str(args.work_dir / "float32"), None, force=True)
            # The baseline's own decoding options (e.g. no_repeat_ngram_size), which generate applies too.
            baseline_options = AutoModelForSeq2SeqLM.from_pretrained(args.models[0]).generation_config
            options = {name: getattr(baseline_options, name) for name in ("no_repeat_ngram_size",)
                       if getattr(baseline_options, name, None)}
            translator = CTranslate2Translator(exported, intra_threads=1, **options)
            # Segmented into the annotator's words before the timing, as the PyTorch arms' inputs are encoded.
            segmented = annotations or translator.annotate(sources)
            runners[("ctranslate2_float32", "ctranslate2")] = lambda batch_size, beams: translator.translate(
                segmented, num_beams=beams, max_new_tokens=args.max_new_tokens, batch_size=batch_size)
            model_types[("ctranslate2_float32", "ctranslate2")] = "ctranslate2"
        except (ValueError, ImportError) as error:
            export_error = f"{type(error).__name__}: {error}"
            print(f"no CTranslate2 row: {export_error}", flush=True)

    def prepared_weights() -> contextlib.ExitStack:
        """Every model's weights prepared for inference, as the translate command decodes (first use makes them)."""
        stack = contextlib.ExitStack()
        for model in loaded:
            stack.enter_context(linear.prepared_inference_weights(model))
        return stack

    baseline = (args.models[0], "fast")
    ctranslate2 = ("ctranslate2_float32", "ctranslate2")
    identical, generated_tokens, same_as_ctranslate2 = {}, {}, {}
    for batch_size, beams in SETTINGS:  # warm-up, and the two loops' outputs compared
        with prepared_weights():
            outputs = {key: run(batch_size, beams) for key, run in runners.items()}
        if ctranslate2 in outputs:
            baseline_tokenizer = load_tokenizer(args.models[0])
            texts = [text.strip() for sequences in outputs[baseline]
                     for text in baseline_tokenizer.batch_decode(sequences, skip_special_tokens=True)]
            same_as_ctranslate2[(batch_size, beams)] = sum(
                ours == theirs for ours, theirs in zip(texts, outputs[ctranslate2], strict=True)) / len(texts)
        for key, output in outputs.items():
            if key[1] != "ctranslate2":
                generated_tokens[(key, batch_size, beams)] = sum(
                    generated_token_count(sequences, *special_token_ids[key]) for sequences in output)
        for folder in models:
            for reference in references:
                identical[(folder, reference, batch_size, beams)] = identical_row_share(
                    outputs[(folder, "fast")], outputs[(folder, reference)])

    round_seconds: dict[tuple, list[float]] = {(key, batch_size, beams): [] for key in runners
                                               for batch_size, beams in SETTINGS}
    for round_index in range(args.rounds):
        for batch_size, beams in SETTINGS:
            seconds_of_setting = timed_setting(runners, preparers if args.prepare_untimed else [], batch_size, beams,
                                               prepared_weights)
            for key, value in seconds_of_setting.items():
                round_seconds[(key, batch_size, beams)].append(value)
        print(f"round {round_index + 1} done", flush=True)

    breakdowns = {}
    if args.operation_breakdown:
        from benchmarks.op_timing import operation_breakdown

        for batch_size, beams in SETTINGS:
            with prepared_weights():
                runners[baseline](batch_size, beams)  # the prepared copies made outside the breakdown
                breakdowns[f"batch{batch_size}_beam{beams}"] = operation_breakdown(
                    lambda batch_size=batch_size, beams=beams: runners[baseline](batch_size, beams),
                    units=len(sources), unit="sentence")
    # The median round: on a shared machine a burst of other work slows whichever arm runs then, for a round.
    seconds = {key: statistics.median(values) for key, values in round_seconds.items()}
    timings = {}
    for batch_size, beams in SETTINGS:
        setting = f"batch{batch_size}_beam{beams}"
        timings[setting] = {}
        for key in runners:
            total = seconds[(key, batch_size, beams)]
            row = {"model_type": model_types[key], "loop": key[1],
                   "sentences_per_second": round(len(sources) / total, 2),
                   "time_over_baseline": round(total / seconds[(baseline, batch_size, beams)], 3)}
            if (key, batch_size, beams) in generated_tokens:
                row["generated_tokens_per_second"] = round(generated_tokens[(key, batch_size, beams)] / total, 1)
            if ctranslate2 in runners:
                row["time_over_ctranslate2"] = round(total / seconds[(ctranslate2, batch_size, beams)], 3)
            if key == baseline and (batch_size, beams) in same_as_ctranslate2:
                row["identical_to_ctranslate2"] = same_as_ctranslate2[(batch_size, beams)]
            if key[1] == "fast":
                for reference in references:
                    row[f"speedup_over_{reference}"] = round(
                        seconds[((key[0], reference), batch_size, beams)] / total, 3)
                    row[f"identical_to_{reference}"] = identical[(key[0], reference, batch_size, beams)]
            row["round_seconds"] = [round(value, 3) for value in round_seconds[(key, batch_size, beams)]]
            timings[setting][f"{key[0]} ({key[1]})" if key != ctranslate2 else key[0]] = row
            print(setting, key, row, flush=True)
    result = {"code_version": code_version(), "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if cuda else "cpu", "threads": None if cuda else 1,
              "command": "python -m benchmarks.measure_decoding_speed " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:]),
              "sentences": len(sources), "sorted_by_length": not args.input_order,
              "preparation_untimed": args.prepare_untimed, "loops": list(loops),
              "single_rows_through_openblas": not cuda and single_row_products.openblas_applies(),
              "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
              "baseline": args.models[0], "grafted": {name: GRAFTS[name][0] for name in args.graft},
              "ctranslate2_export_error": export_error, "timings": timings,
              **({"operation_breakdown": breakdowns} if breakdowns else {}),
              "onednn_min_rows": default_min_rows, "processor": processor_name(),
              "source_parses": str(args.source_conllu) if args.source_conllu else "parsed (annotation cache)"}
    write_json_atomically(args.output, result, indent=1)
    return result


if __name__ == "__main__":
    main()
