#!/usr/bin/env python
"""What compiling the decoder step with `torch.compile` would give the baseline's decoding on the CPU, against the
zoo's eager loops, in one interleaved run.

    python -m benchmarks.compiled_decoding --model runs/quickstart --sentences 100 --rounds 3 \
        --output benchmarks/results/compiled_decoding.json

The zoo's loops (`hf_srcfeat.decoding`) run the decoder step eagerly (the eager arm is whatever
`DecoderState.step` runs: by default the steps as tensor operations of `hf_srcfeat.decoder_step`; the result file
records the code it ran). Here the step after the first is replaced by
`StaticCacheDecoderStep`: the baseline's decoder layers called submodule by submodule with nothing else, reading
and writing the loops' own preallocated caches at their full length (the step's keys and values written at its
position inside the graph, later positions masked), so that a step's shapes change only with the number of rows
and the source length. It is compiled by inductor in each `VARIANTS` entry, anew for each setting; the loops' beam
bookkeeping and cache reordering stay eager. The arms (the eager step, and each compiled variant) take turns for
`--rounds` on one thread, in each `SETTINGS` entry, within a `prepared_inference_weights` block of its own (as the
translate command decodes), on the first `--sentences` test_2016_flickr sources batched sorted by length. Each
arm's warm-up pass, untimed, compiles and decodes once (`warm_up_seconds`: the eager arm's is the decoding alone)
and compares the arm's token ids with the eager step's (`identical_to_eager`, per output row): a variant that
changes outputs is reported, not hidden.

Only the baseline's decoder is restated (methods add to it through layer contexts this step does not carry);
other models are refused.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from benchmarks.measure_decoding_speed import SETTINGS, identical_row_share, test_sources
from hf_srcfeat.provenance import code_version, processor_name
from hf_srcfeat.safe_writing import write_json_atomically
from hf_srcfeat.single_row_products import set_cpu_threads

#: Compiled arm -> (inductor options (`torch.compile(options=...)`), whether the step's products run the zoo's
#: `Linear` as an opaque operation: its prepared weights and kernels, as the eager step multiplies).
VARIANTS = {
    "inductor": ({}, False),
    "inductor_freezing": ({"freezing": True}, False),  # weights folded in as constants
    "inductor_freezing_cpp_wrapper": ({"freezing": True, "cpp_wrapper": True}, False),  # the graph called from C++
    "inductor_zoo_products": ({}, True),
}
#: The layers `zoo_linear` multiplies with, by index (a compiled graph passes the index, not the module).
ZOO_LINEARS: list[nn.Module] = []


@torch.library.custom_op("hf_srcfeat_benchmarks::zoo_linear", mutates_args=())
def zoo_linear(inputs: torch.Tensor, layer_index: int, out_features: int) -> torch.Tensor:
    """`ZOO_LINEARS[layer_index](inputs)`, run eagerly: inside a compiled graph, the zoo's `Linear` with its weights
    prepared for inference (oneDNN's packed layout for several rows, transposed for one) instead of the product
    inductor would choose."""
    return ZOO_LINEARS[layer_index](inputs)


@zoo_linear.register_fake
def _(inputs: torch.Tensor, layer_index: int, out_features: int) -> torch.Tensor:
    return inputs.new_empty(*inputs.shape[:-1], out_features)


class StaticCacheDecoderStep(nn.Module):
    """One decoding step of a baseline `SrcFeatTransformerForConditionalGeneration`: the logits of the next token
    for every row, with the self-attention keys and values written into the caches at `position` and attention
    over all `max_length` cached positions, those after `position` masked. The beams of a sentence attend to its
    cross-attention keys and values as the query positions of one row, as in the zoo's loops."""

    def __init__(self, model: nn.Module, zoo_products: bool = False):
        super().__init__()
        self.model, self.zoo_products = model, zoo_products
        self.layer_indices: dict[nn.Module, int] = {}
        if zoo_products:
            for module in model.modules():
                if isinstance(module, nn.Linear):
                    self.layer_indices[module] = len(ZOO_LINEARS)
                    ZOO_LINEARS.append(module)
        self.decoder = model.get_decoder()
        first_layer = self.decoder.layers[0].self_attn
        self.heads = first_layer.num_heads
        embedding = self.decoder.embed_target
        # Looked up as the eager step looks them up (computing them in the graph may round otherwise).
        self.sinusoids = (None if embedding.position_type == "learned"
                          else embedding.sinusoid_table(model.device).to(model.dtype))

    def product(self, layer: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """`layer(inputs)`, through `zoo_linear` with `zoo_products`."""
        if not self.zoo_products:
            return layer(inputs)
        return zoo_linear(inputs, self.layer_indices[layer], layer.out_features)

    def embed(self, tokens: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """The target representation of `tokens` at `position` (eval mode: no dropout)."""
        embedding = self.decoder.embed_target
        index = (position + embedding.position_offset).view(1)
        positions = (embedding.embed_positions(index) if self.sinusoids is None
                     else self.sinusoids.index_select(0, index))
        hidden_states = embedding.token_embeddings(tokens) + positions.view(1, 1, -1)
        if embedding.layernorm_embedding is not None:
            hidden_states = embedding.layernorm_embedding(hidden_states)
        return hidden_states

    def forward(self, tokens: torch.Tensor, position: torch.Tensor, key_buffers: list[torch.Tensor],
                value_buffers: list[torch.Tensor], cross_keys: list[torch.Tensor], cross_values: list[torch.Tensor],
                cross_mask: torch.Tensor | None) -> torch.Tensor:
        """`tokens` [rows, 1]; `position` the 0-d index of their position; `key_buffers`/`value_buffers` one per
        layer, [at least rows, max_length, heads, head_dim]; `cross_keys`/`cross_values` [sentences, heads, source
        length, head_dim]; `cross_mask` the sentences' source mask or None. Returns float32 [rows, vocabulary]."""
        rows, sentences = tokens.shape[0], cross_keys[0].shape[0]
        beams, max_length = rows // sentences, key_buffers[0].shape[1]
        hidden_states = self.embed(tokens, position)
        visible = (torch.arange(max_length, device=tokens.device) <= position).view(1, 1, 1, max_length)
        written = (torch.arange(rows, device=tokens.device).view(rows, 1), position.view(1, 1))  # [row, position]
        for layer, key_buffer, value_buffer, cross_key, cross_value in zip(
                self.decoder.layers, key_buffers, value_buffers, cross_keys, cross_values, strict=True):
            keys, values = key_buffer[:rows], value_buffer[:rows]

            def self_attention(inputs: torch.Tensor, attention=layer.self_attn, keys=keys, values=values,
                               key_buffer=key_buffer, value_buffer=value_buffer):
                query = self.product(attention.q_proj, inputs).view(rows, 1, self.heads, -1).transpose(1, 2)
                # Written through the whole buffer (a graph input), not a view of it: inductor then writes in place
                # instead of copying the buffer.
                key_buffer.index_put_(written, self.product(attention.k_proj, inputs).view(rows, 1, self.heads, -1))
                value_buffer.index_put_(written, self.product(attention.v_proj, inputs).view(rows, 1, self.heads, -1))
                output = nn.functional.scaled_dot_product_attention(
                    query, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=visible, scale=attention.scaling)
                return self.product(attention.out_proj, output.transpose(1, 2).reshape(rows, 1, -1))

            def cross_attention(inputs: torch.Tensor, attention=layer.encoder_attn, keys=cross_key,
                                values=cross_value):
                query = self.product(attention.q_proj, inputs).view(sentences, beams, self.heads, -1).transpose(1, 2)
                output = nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=cross_mask,
                                                                    scale=attention.scaling)
                return self.product(attention.out_proj, output.transpose(1, 2).reshape(rows, 1, -1))

            def feed_forward(inputs: torch.Tensor, ffn=layer.ffn):  # eval mode: no activation dropout
                return self.product(ffn.fc2, ffn.activation(self.product(ffn.fc1, inputs)))

            hidden_states, _ = layer.self_attn_sublayer(hidden_states, self_attention)
            hidden_states, _ = layer.encoder_attn_sublayer(hidden_states, cross_attention)
            hidden_states, _ = layer.ffn_sublayer(hidden_states, feed_forward)
        if self.decoder.layer_norm is not None:
            hidden_states = self.decoder.layer_norm(hidden_states)
        logits = self.product(self.model.lm_head, hidden_states[:, -1])  # as `output_logits`
        if getattr(self.model.config, "final_logits_bias", False):
            logits = logits + self.model.final_logits_bias.to(logits.dtype)
        return logits.float()


def step_through(step: Callable) -> Callable:
    """A `DecoderState.step` that runs the zoo's own step first (it fills the cross-attention caches and starts
    the beams), then `step` on the state's caches, their positions not yet written set to zero once."""
    from hf_srcfeat.decoding import DecoderState

    eager_step = DecoderState.step

    def decoder_state_step(state: DecoderState, input_ids: torch.Tensor) -> torch.Tensor:
        length = state.self_attention.get_seq_length()
        if length == 0:
            return eager_step(state, input_ids)
        rows = input_ids.shape[0]
        if not getattr(state, "cache_tail_zeroed", False):
            # Attention reads every position, the later ones masked: their values must be numbers (the loops
            # allocate the buffers uninitialised), else a masked NaN still turns the output into NaN.
            for layer in state.self_attention_layers:
                layer.key_buffer[:, length:].zero_()
                layer.value_buffer[:, length:].zero_()
            state.cache_tail_zeroed = True
        cross_layers = state.cache.cross_attention_cache.layers
        cross_mask = state.cross_mask[::state.beams] if isinstance(state.cross_mask, torch.Tensor) else None
        layers = state.self_attention_layers
        logits = step(input_ids, torch.tensor(length, device=input_ids.device),
                      [layer.key_buffer for layer in layers], [layer.value_buffer for layer in layers],
                      [layer.keys for layer in cross_layers], [layer.values for layer in cross_layers], cross_mask)
        for layer in layers:
            layer.length = length + 1
            layer._expose(rows)
        return logits

    return decoder_state_step


@contextlib.contextmanager
def decoder_step(step: Callable | None) -> Iterator[None]:
    """Within the block, the zoo's loops take their steps after the first from `step` (None: their own)."""
    from hf_srcfeat.decoding import DecoderState

    eager_step = DecoderState.step
    if step is not None:
        DecoderState.step = step_through(step)  # type: ignore[method-assign]
    try:
        yield
    finally:
        DecoderState.step = eager_step  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> dict:
    from transformers import AutoModelForSeq2SeqLM

    from hf_srcfeat import linear
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a baseline model folder (srcfeat_transformer)")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--data_dir", default=None, help="Multi30k folder (default: the usual download)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    code_version()  # read now: the run keeps the code it imported
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.max_new_tokens < 1:
        parser.error(f"--max_new_tokens must be at least 1, got {args.max_new_tokens}")
    set_cpu_threads(1)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=torch.float32).eval()
    if model.config.model_type != "srcfeat_transformer":
        parser.error(f"--model {args.model} is a {model.config.model_type} model: this benchmark restates the "
                     "baseline's (srcfeat_transformer) decoder step only")
    try:
        sources, _ = test_sources(args.sentences, args.data_dir, None)
    except ValueError as error:
        parser.error(str(error))
    tokenizer = load_tokenizer(args.model)
    encoded = {batch_size: [tokenizer(text=sources[start:start + batch_size], padding=True, return_tensors="pt")
                            for start in range(0, len(sources), batch_size)]
               for batch_size, _ in SETTINGS}

    def decode(batch_size: int, beams: int, step: Callable | None) -> list[torch.Tensor]:
        with torch.no_grad(), decoder_step(step):
            return [model.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=args.max_new_tokens)
                    for batch in encoded[batch_size]]

    def time_setting(batch_size: int, beams: int) -> dict[str, dict]:
        """Each arm's warm-up (compilation and one decoding pass, compared with the eager arm's tokens), then the
        arms in turns for --rounds."""
        # Compiled anew for each setting, shapes static until they change (PyTorch's default): one sentence at a
        # time, only the source length varies.
        steps: dict[str, Callable | None] = {"eager": None}
        for name in args.variants:
            options, zoo_products = VARIANTS[name]
            steps[name] = torch.compile(StaticCacheDecoderStep(model, zoo_products), options=options)
        rows: dict[str, dict] = {}
        reference = None
        for name, step in steps.items():
            start = time.perf_counter()
            outputs = decode(batch_size, beams, step)
            rows[name] = {"warm_up_seconds": round(time.perf_counter() - start, 1)}
            reference = outputs if reference is None else reference
            rows[name]["identical_to_eager"] = identical_row_share(outputs, reference)
        seconds = dict.fromkeys(steps, 0.0)
        for round_index in range(args.rounds):
            for name in list(steps) if round_index % 2 == 0 else list(reversed(steps)):
                start = time.perf_counter()
                decode(batch_size, beams, steps[name])
                seconds[name] += time.perf_counter() - start
        for name in steps:
            rows[name]["sentences_per_second"] = round(args.rounds * len(sources) / seconds[name], 2)
            rows[name]["speedup_over_eager"] = round(seconds["eager"] / seconds[name], 3)
            print(f"batch{batch_size}_beam{beams}", name, rows[name], flush=True)
        return rows

    timings = {}
    # Every variant keeps its own graphs (one row, any number of rows, source lengths): more than the default limit,
    # past which dynamo would fall back to eager without saying so.
    recompile_limit, torch._dynamo.config.recompile_limit = torch._dynamo.config.recompile_limit, 256
    try:
        for batch_size, beams in SETTINGS:
            # Each setting in a block of its own, as in a process that decodes only this way: single rows then read
            # the weights prepared for single rows, not the copies packed for batches.
            with linear.prepared_inference_weights(model):
                timings[f"batch{batch_size}_beam{beams}"] = time_setting(batch_size, beams)
    finally:
        torch._dynamo.config.recompile_limit = recompile_limit
        ZOO_LINEARS.clear()
    result = {"code_version": code_version(), "torch": torch.__version__, "threads": 1,
              "processor": processor_name(),
              "command": "python -m benchmarks.compiled_decoding " + " ".join(argv if argv is not None
                                                                              else sys.argv[1:]),
              "model": args.model, "sentences": len(sources), "max_new_tokens": args.max_new_tokens,
              "rounds": args.rounds,
              "variants": {name: {"inductor_options": VARIANTS[name][0], "zoo_products": VARIANTS[name][1]}
                           for name in args.variants},
              "timings": timings}
    write_json_atomically(args.output, result, indent=1)
    return result


if __name__ == "__main__":
    main()
