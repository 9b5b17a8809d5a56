#!/usr/bin/env python
"""Where one sentence's greedy decoding spends its time on the CPU (batch 1), for comparing with CTranslate2: the
encoder alone, a `generate` call stopped after its first and its second token, the whole call, and the decoder's
single-row products alone, timed over the model's own weights with each of PyTorch's kernels for them.

    python -m benchmarks.greedy_step_costs --model runs/quickstart_1000 \\
        --output benchmarks/results/greedy_step_costs.json

On the first `--sentences` test_2016_flickr sources, one at a time, within `prepared_inference_weights` (as the
translate command decodes), one thread; the arms take turns for `--rounds` rounds and the median is reported.
"A later token" is (whole call - call stopped after two tokens) / (tokens generated - 2). `encoder_alone` runs the
encoder on the sentences one after another; `encoder_after_decoding` times it on each sentence right after the
previous one was decoded (the decoding not timed), as translating one sentence after another meets it, the
decoder's weights having passed through the caches since. The products arm
multiplies one row by every weight matrix a decoding step reads (each decoder layer's stacked query/key/value,
outputs, cross-attention query and output, feed-forward, and the output projection), in that order, as one step;
the `..._after_other_memory` arms write as many bytes of other memory as the step's weights before each step, as a
decoding loop's other work may push the weights out of the processor's last-level cache. Beside PyTorch's kernels,
`openblas_over_transposed_copies` is numpy's OpenBLAS, which the zoo multiplies single rows by where it applies
(`hf_srcfeat.single_row_products`).

`--ctranslate2 EXPORT` times the baseline's CTranslate2 export the same way, taking turns with the other arms: its
`translate_batch` over the same sources (tokenized outside the timing), one at a time (`max_batch_size=1`), greedy,
with the model's `no_repeat_ngram_size`, stopped after one, two and `--max_new_tokens` tokens.

The `generate_whole_preparing_each_call` arm drops what `generate` kept from earlier calls before each call
(`hf_srcfeat.generation_preparation.forget_preparations`), so that every call prepares anew. As rounds of one arm
vary more than that costs, the `paired_preparation` arm also times the two ways back to back on each sentence (in
alternating order) and reports the median of the per-sentence differences. The
`loop_without_generate_front` arm decodes the same sentences with the encoder and the zoo's greedy loop called
directly, handing the loop the processors, stopping criteria and configuration one `generate` call prepared (they
do not depend on the source): what `generate`'s per-call preparation costs is the difference to `generate_whole`.
The `paired_inference_mode` arm runs that loop on each sentence's encoder output as shipped (in inference mode,
`hf_srcfeat.decoding.in_inference_mode`) and in no-grad mode, back to back in alternating order, and reports the
median difference and whether the token ids were the same.

`--positions N` also times each of a sentence's first N tokens, as one more arm of each side: the time from the
call's start to its first token, then from each token to the next (the zoo: the end of each decoder step of its
loop; CTranslate2: each call of its per-token `callback`), the median over every sentence of every round.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def step_weight_matrices(model) -> list:
    """The weight matrices one greedy decoding step of the baseline multiplies a row by, in order, as
    [out_features, in_features]: each decoder layer's stacked query/key/value, self-attention output,
    cross-attention query and output, feed-forward, then the output projection."""
    import torch

    weights = []
    for layer in model.get_decoder().layers:
        attention, cross = layer.self_attn, layer.encoder_attn
        weights += [torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]),
                    attention.out_proj.weight, cross.q_proj.weight, cross.out_proj.weight, layer.ffn.fc1.weight,
                    layer.ffn.fc2.weight]
    return [weight.detach().contiguous() for weight in [*weights, model.lm_head.weight]]


def encoder_seconds(model, encoded: list, max_new_tokens: int, after_decoding: bool) -> float:
    """Seconds of the encoder over the sentences `encoded` (each a batch of one), one after another, or each right after
    the previous sentence was decoded greedily (not timed), as translating one sentence after another meets it."""
    seconds = 0.0
    for previous, inputs in zip([encoded[-1], *encoded[:-1]], encoded, strict=True):
        if after_decoding:
            model.generate(**previous, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens)
        start = time.perf_counter()
        model.get_encoder()(**inputs)
        seconds += time.perf_counter() - start
    return seconds


def back_to_back(ways: dict, reverse: bool) -> dict:
    """Each way's (seconds, result), the ways (callables) run one right after the other in the dict's order, or in
    reverse: pairs of runs alternate their order, so that neither way always meets what the other left behind."""
    timed = {}
    for key in (list(ways)[::-1] if reverse else list(ways)):
        start = time.perf_counter()
        result = ways[key]()
        timed[key] = (time.perf_counter() - start, result)
    return timed


def step_seconds(step, steps: int = 100, before_each=None) -> list[float]:
    """The seconds of each of `steps` calls of `step` (`before_each()` runs untimed before each, where given)."""
    seconds = []
    for _ in range(steps):
        if before_each is not None:
            before_each()
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return seconds


def one_sentence_benchmark_parser(description: str | None) -> argparse.ArgumentParser:
    """The options of the benchmarks that decode test sources one at a time: the model, how many sources, rounds and
    new tokens, the data folder (each adds its own and `--output`; `check_counts` after parsing)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a trained baseline folder")
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: $HF_SRCFEAT_MULTI30K_DIR)")
    return parser


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a count of sources, rounds or new tokens below one (the parser's error: exit status 2)."""
    for name in ("sentences", "rounds", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")


def main(argv: list[str] | None = None) -> dict:
    parser = one_sentence_benchmark_parser(__doc__)
    parser.add_argument("--ctranslate2", type=Path, default=None,
                        help="the baseline's CTranslate2 export (hf-srcfeat-export-ctranslate2), timed alike")
    parser.add_argument("--positions", type=int, default=0,
                        help="also time each of the first POSITIONS tokens of a sentence, on both sides")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    check_counts(parser, args)
    if args.positions < 0:
        parser.error(f"--positions must be 0 or more, got {args.positions}")

    import torch
    from torch.nn import functional
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat import decoding, linear, single_row_products
    from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
    from hf_srcfeat.generation_preparation import forget_preparations, matching_preparation
    from hf_srcfeat.provenance import code_version, processor_name
    from hf_srcfeat.safe_writing import write_json_atomically
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import encoding_options

    single_row_products.set_cpu_threads(1)
    tokenizer = load_tokenizer(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    sources = list(load_multi30k("test_2016_flickr", data_dir=args.data_dir, limit=args.sentences)["source"])
    encoded = [tokenizer(source, return_tensors="pt", **encoding_options(model.config)) for source in sources]

    def generate(new_tokens: int) -> int:
        generated = 0
        for inputs in encoded:
            output = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=new_tokens)
            generated += output.shape[1] - 1
        return generated

    def generate_preparing_each_call() -> None:
        for inputs in encoded:
            forget_preparations(model)
            model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=args.max_new_tokens)

    preparation_savings: list[float] = []  # per sentence: seconds preparing anew minus seconds reusing

    def paired_preparation() -> None:
        for index, inputs in enumerate(encoded):
            def decode(inputs=inputs):
                return model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=args.max_new_tokens)

            def preparing_anew(inputs=inputs):
                forget_preparations(model)
                return decode(inputs)
            timed = back_to_back({"reusing": decode, "preparing": preparing_anew}, reverse=bool(index % 2))
            preparation_savings.append(timed["preparing"][0] - timed["reusing"][0])

    def loop_arguments() -> dict:
        """What `generate` handed the zoo's greedy loop for these settings, as the model keeps it for later calls."""
        preparation = matching_preparation(model, {**encoded[0], "num_beams": 1, "do_sample": False,
                                                   "max_new_tokens": args.max_new_tokens})
        if preparation is None or preparation.decoding_method != "_sample":
            raise RuntimeError("generate did not run the zoo's greedy loop for this model")
        config = preparation.generation_config
        return {"input_ids": config._decoder_start_token_tensor.reshape(1, 1), "generation_config": config,
                "logits_processor": preparation.logits_processor, "stopping_criteria": preparation.stopping_criteria,
                **preparation.loop_options}

    def loop_without_generate_front() -> list:
        encoder = model.get_encoder()
        return [decoding.greedy_search(model, encoder_outputs=encoder(**inputs, return_dict=True),
                                       attention_mask=inputs["attention_mask"], **arguments)
                for inputs in encoded]

    inference_mode_savings: list[float] = []  # per sentence: seconds of the loop in no-grad mode minus as shipped
    inference_mode_identical: list[bool] = []

    def paired_inference_mode() -> None:
        encoder = model.get_encoder()
        for index, inputs in enumerate(encoded):
            memory = {"encoder_outputs": encoder(**inputs, return_dict=True),
                      "attention_mask": inputs["attention_mask"], **arguments}

            def no_grad_mode(memory=memory):  # the same loop as shipped, in no-grad mode
                with torch.no_grad():
                    return decoding.greedy_search.__wrapped__(model, **memory)
            timed = back_to_back({"no_grad": no_grad_mode,
                                  "shipped": lambda memory=memory: decoding.greedy_search(model, **memory)},
                                 reverse=bool(index % 2))
            inference_mode_savings.append(timed["no_grad"][0] - timed["shipped"][0])
            inference_mode_identical.append(torch.equal(timed["shipped"][1], timed["no_grad"][1]))

    # Seconds to each of a sentence's first `--positions` tokens, from the call's start or the token before.
    token_seconds: dict[str, list[list[float]]] = {"generate": [], "ctranslate2": []}

    def gaps(start: float, token_ends: list[float]) -> list[float]:
        ends = token_ends[:args.positions]
        return [end - previous for previous, end in zip([start, *ends[:-1]], ends, strict=True)]

    def generate_by_position() -> None:
        step_ends: list[float] = []
        step = decoding.DecoderState.step

        def timed_step(self, input_ids):  # the loop's decoder step, its end noted
            logits = step(self, input_ids)
            step_ends.append(time.perf_counter())
            return logits
        decoding.DecoderState.step = timed_step
        try:
            for inputs in encoded:
                step_ends.clear()
                start = time.perf_counter()
                model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=args.max_new_tokens)
                token_seconds["generate"].append(gaps(start, step_ends))
        finally:
            decoding.DecoderState.step = step

    def encoder_alone() -> None:
        for inputs in encoded:
            model.get_encoder()(**inputs)

    def encoder_after_decoding() -> float:
        return encoder_seconds(model, encoded, args.max_new_tokens, after_decoding=True)

    weights = step_weight_matrices(model)
    rows = [torch.randn(1, weight.shape[1]) for weight in weights]
    transposed = [weight.t().contiguous() for weight in weights]
    onednn = [torch.ops.mkldnn._reorder_linear_weight(weight, 1) for weight in weights]
    kernels = {
        "addmm_over_transposed_copies": lambda index: torch.mm(rows[index], transposed[index]),
        "linear_over_weights_as_stored": lambda index: functional.linear(rows[index], weights[index]),
        "mv": lambda index: torch.mv(weights[index], rows[index][0]),
        "onednn_packed": lambda index: torch.ops.mkldnn._linear_pointwise(rows[index], onednn[index], None, "none",
                                                                          [], ""),
    }
    if torch.backends.mkl.is_available():
        mkl = [torch.ops.mkl._mkl_reorder_linear_weight(weight, 1) for weight in weights]
        kernels["mkl_packed"] = lambda index: torch.ops.mkl._mkl_linear(rows[index], mkl[index], weights[index], None,
                                                                        1)
    if single_row_products.openblas_applies():  # what the zoo multiplies single rows by where it applies
        openblas = [single_row_products.row_product(copy, None) for copy in transposed]
        kernels["openblas_over_transposed_copies"] = lambda index: openblas[index](rows[index])
    for name, kernel in kernels.items():  # every kernel computes the same products
        for index, weight in enumerate(weights):
            torch.testing.assert_close(kernel(index).reshape(-1), (rows[index] @ weight.t()).reshape(-1),
                                       atol=1e-3, rtol=1e-3, msg=name)

    other_memory = torch.zeros(sum(weight.numel() for weight in weights))

    def products(kernel, touch_other_memory: bool = False) -> float:
        """Seconds of 100 steps' products (the writes to other memory between steps not counted)."""
        def step():
            for index in range(len(weights)):
                kernel(index)
        return sum(step_seconds(step, before_each=(lambda: other_memory.add_(1.0)) if touch_other_memory else None))

    ctranslate2_arms = {}
    if args.ctranslate2 is not None:
        from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator

        translator = CTranslate2Translator(args.ctranslate2, intra_threads=1,
                                           no_repeat_ngram_size=model.generation_config.no_repeat_ngram_size or 0)
        source_tokens = translator.source_tokens(sources)

        def ctranslate2(new_tokens: int) -> int:
            results = translator.translator.translate_batch(
                source_tokens, max_batch_size=1, beam_size=1, max_decoding_length=new_tokens, **translator.decoding)
            # Its hypotheses leave out the </s> that ends them; generate's outputs count it.
            return sum(min(len(result.hypotheses[0]) + 1, new_tokens) for result in results)

        def ctranslate2_by_position() -> None:
            token_ends: list[float] = []

            def note_token(step_result) -> bool:  # called as each token is chosen; False: go on
                token_ends.append(time.perf_counter())
                return False
            for tokens in source_tokens:
                token_ends.clear()
                start = time.perf_counter()
                translator.translator.translate_batch([tokens], beam_size=1, max_decoding_length=args.max_new_tokens,
                                                      callback=note_token, **translator.decoding)
                token_seconds["ctranslate2"].append(gaps(start, token_ends))

        ctranslate2_arms = {"ctranslate2_first_token": lambda: ctranslate2(1),
                            "ctranslate2_two_tokens": lambda: ctranslate2(2),
                            "ctranslate2_whole": lambda: ctranslate2(args.max_new_tokens)}
        if args.positions:
            ctranslate2_arms["positions_ctranslate2"] = ctranslate2_by_position

    arms = {**ctranslate2_arms, "encoder_alone": encoder_alone, "encoder_after_decoding": encoder_after_decoding,
            "generate_first_token": lambda: generate(1),
            "generate_two_tokens": lambda: generate(2), "generate_whole": lambda: generate(args.max_new_tokens),
            "generate_whole_preparing_each_call": generate_preparing_each_call,
            "paired_preparation": paired_preparation, "paired_inference_mode": paired_inference_mode,
            "loop_without_generate_front": loop_without_generate_front,
            **{f"step_products_{name}": (lambda kernel=kernel: products(kernel)) for name, kernel in kernels.items()},
            **{f"step_products_{name}_after_other_memory": (
                lambda kernel=kernels[name]: products(kernel, touch_other_memory=True))
               for name in ("addmm_over_transposed_copies", "openblas_over_transposed_copies") if name in kernels}}
    if args.positions:
        arms["positions_generate"] = generate_by_position
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    with torch.no_grad(), linear.prepared_inference_weights(model):
        tokens = generate(args.max_new_tokens)  # warm-up: prepares the weights' copies
        arguments = loop_arguments()
        same_without_front = all(torch.equal(alone, model.generate(**inputs, num_beams=1, do_sample=False,
                                                                   max_new_tokens=args.max_new_tokens))
                                 for alone, inputs in zip(loop_without_generate_front(), encoded, strict=True))
        ctranslate2_tokens = ctranslate2_arms["ctranslate2_whole"]() if ctranslate2_arms else None
        for arm in arms.values():
            arm()
        for by_position in token_seconds.values():  # the warm-up's
            by_position.clear()
        preparation_savings.clear()
        inference_mode_savings.clear()
        for _ in range(args.rounds):
            for name, arm in arms.items():
                start = time.perf_counter()
                timed = arm()  # the products' arms and encoder_after_decoding time themselves
                seconds[name].append(timed if isinstance(timed, float) else time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    per_sentence_ms = {name: 1e3 * median[name] / len(sources) for name in arms
                       if not name.startswith(("step_", "positions_", "paired_"))}
    tokens_per_sentence = tokens / len(sources)

    def later_token_ms(prefix: str, tokens_per_sentence: float) -> float | None:
        """(whole call - call stopped after two tokens) / (tokens generated - 2); None without later tokens."""
        if tokens_per_sentence <= 2:
            return None
        return (per_sentence_ms[f"{prefix}whole"] - per_sentence_ms[f"{prefix}two_tokens"]) / (tokens_per_sentence - 2)
    result = {
        "command": "python -m benchmarks.greedy_step_costs " + " ".join(
            f"--{key} {value}" for key, value in vars(args).items() if value is not None),
        "code_version": code_version(), "processor": processor_name(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "single_rows_through_openblas": single_row_products.openblas_applies(),
        "model": str(args.model),
        "data": str(multi30k_file("test_2016_flickr", "en", args.data_dir)),
        "sentences": len(sources), "rounds": args.rounds, "tokens_per_sentence": tokens_per_sentence,
        "weight_matrices_per_step": len(weights),
        "weight_megabytes_per_step": sum(weight.numel() * 4 for weight in weights) / 2**20,
        "milliseconds_per_sentence": per_sentence_ms,
        "milliseconds_per_later_token": later_token_ms("generate_", tokens_per_sentence),
        "milliseconds_of_generate_front": per_sentence_ms["generate_whole"] - per_sentence_ms["loop_without_generate_front"],
        "loop_without_generate_front_identical": same_without_front,
        # Median over every sentence of every round: what preparing a call anew costs over reusing a preparation
        "milliseconds_of_preparing_each_call_paired": 1e3 * statistics.median(preparation_savings),
        # Likewise: what the greedy loop in no-grad mode costs over the loop as shipped, in inference mode
        "milliseconds_of_no_grad_mode_paired": 1e3 * statistics.median(inference_mode_savings),
        "inference_mode_identical": all(inference_mode_identical),
        "milliseconds_of_one_steps_products": {name[len("step_products_"):]: 1e3 * value / 100
                                               for name, value in median.items() if name.startswith("step_")},
        "seconds_per_round": seconds,
    }
    if args.positions:
        # Position i's median over the sentences that reached it.
        result["milliseconds_to_token_by_position"] = {
            side: [1e3 * statistics.median(sentence[position] for sentence in sentences if len(sentence) > position)
                   for position in range(max(map(len, sentences), default=0))]
            for side, sentences in token_seconds.items() if sentences}
    if ctranslate2_tokens is not None:
        result["ctranslate2"] = {"export": str(args.ctranslate2), "tokens_per_sentence": ctranslate2_tokens / len(sources),
                                 "milliseconds_per_later_token": later_token_ms(
                                     "ctranslate2_", ctranslate2_tokens / len(sources))}
    write_json_atomically(args.output, result)
    print({key: result[key] for key in ("tokens_per_sentence", "milliseconds_per_sentence",
                                        "milliseconds_per_later_token", "milliseconds_of_generate_front",
                                        "milliseconds_of_preparing_each_call_paired",
                                        "milliseconds_of_no_grad_mode_paired",
                                        "milliseconds_of_one_steps_products",
                                        "milliseconds_to_token_by_position") if key in result})
    return result


if __name__ == "__main__":
    main()
