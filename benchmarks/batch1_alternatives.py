#!/usr/bin/env python
"""Three ways to make one sentence's greedy decoding faster on the CPU that the zoo does not take, each timed against
what it ships, interleaved in one run, one thread:

    python -m benchmarks.batch1_alternatives --model runs/quickstart_1000 --sentences 100 --rounds 5 \\
        --output benchmarks/results/batch1_alternatives.json

- `encoder_layers_restated`: the encoder's layers run as tensor operations (layer norm, the stacked query/key/value
  product, SDPA, the output product, the feed-forward), without the module calls, `SrcFeatAttention`'s dispatch and
  Transformers' SDPA wrapper, as `hf_srcfeat.decoder_step` restates the decoder's step. Its output is compared bit
  for bit with the modules' (`encoder_layers_restated_identical`). Timed on each of the first `--sentences`
  test_2016_flickr sources run one after another (`..._back_to_back`) and right after the previous sentence was
  decoded greedily (`..._after_decoding`, the decoding not timed), within `prepared_inference_weights`.
- `output_projection_bfloat16`: the output projection's single-row product over a bfloat16 copy of the weight,
  half the bytes a step reads there, against float32 (the product the loops make), hot and after writing as many
  bytes of other memory as a step's weights.
- `step_weights_on_huge_pages`: the 19 single-row products of a decoding step over copies of the model's weights
  laid out one after another in memory advised onto 2 MB pages (`madvise(MADV_HUGEPAGE)`, Linux), against the same
  copies each allocated on its own.

Each arm's median over `--rounds` rounds is reported, in milliseconds per sentence or per step.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

MADV_HUGEPAGE = 14


def restated_encoder_layer(layer, hidden_states, attention_mask):
    """`SrcFeatEncoderLayer.forward` in eval mode without a score modification: its operations in order."""
    import torch
    from torch.nn import functional

    from hf_srcfeat.linear import stacked_products

    attention = layer.self_attn
    batch, positions, width = hidden_states.shape
    heads, head_dim = attention.num_heads, attention.head_dim
    pre_norm = layer.self_attn_sublayer.pre_norm

    def norm(sublayer, inputs):
        layer_norm = sublayer.layer_norm
        return torch.layer_norm(inputs, layer_norm.normalized_shape, layer_norm.weight, layer_norm.bias,
                                layer_norm.eps)

    def self_attention(inputs):
        query, key, value = (projection.view(batch, positions, heads, head_dim).transpose(1, 2) for projection in
                             stacked_products((attention.q_proj, attention.k_proj, attention.v_proj), inputs))
        attended = functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=0.0, scale=attention.scaling, is_causal=False)
        return attention.out_proj.forward(attended.transpose(1, 2).contiguous().reshape(batch, positions, width))

    def feed_forward(inputs):
        return layer.ffn.fc2.forward(layer.ffn.activation(layer.ffn.fc1.forward(inputs)))

    for sublayer, function in ((layer.self_attn_sublayer, self_attention), (layer.ffn_sublayer, feed_forward)):
        if pre_norm:  # `ResidualSublayer`: x + f(LayerNorm(x)), or LayerNorm(x + f(x))
            hidden_states = hidden_states + function(norm(sublayer, hidden_states))
        else:
            hidden_states = norm(sublayer, hidden_states + function(hidden_states))
    return hidden_states


@contextlib.contextmanager
def encoder_layers_restated() -> Iterator[None]:
    """Within the block, baseline encoder layers called without a score modification run `restated_encoder_layer`."""
    from hf_srcfeat.modeling_srcfeat_transformer import SrcFeatEncoderLayer

    shipped = SrcFeatEncoderLayer.__call__

    def call(self, hidden_states, attention_mask, context, output_attentions=False):
        if (type(self) is not SrcFeatEncoderLayer or self.training or output_attentions
                or context.score_modification is not None):
            return shipped(self, hidden_states, attention_mask, context, output_attentions=output_attentions)
        return restated_encoder_layer(self, hidden_states, attention_mask), None

    SrcFeatEncoderLayer.__call__ = call  # type: ignore[method-assign]
    try:
        yield
    finally:
        SrcFeatEncoderLayer.__call__ = shipped  # type: ignore[method-assign]


def huge_page_copies(tensors: list, advise: bool) -> tuple[list, mmap.mmap]:
    """Copies of `tensors` (float32) one after another in one anonymous mapping, advised onto huge pages or not."""
    import torch

    total = sum(tensor.numel() for tensor in tensors)
    size = -(-total * 4 // (2 << 20)) * (2 << 20)
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if advise:
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        if ctypes.CDLL(None, use_errno=True).madvise(ctypes.c_void_p(address), ctypes.c_size_t(size),
                                                     MADV_HUGEPAGE) != 0:
            raise OSError(ctypes.get_errno(), "madvise(MADV_HUGEPAGE) failed")
    flat = torch.frombuffer(mapping, dtype=torch.float32, count=total)
    copies, offset = [], 0
    for tensor in tensors:
        copy = flat[offset:offset + tensor.numel()].view(tensor.shape)
        copy.copy_(tensor)
        copies.append(copy)
        offset += tensor.numel()
    return copies, mapping


def anonymous_huge_page_kilobytes() -> int | None:
    """The process's memory on transparent huge pages (Linux's /proc/self/smaps_rollup), None where unknown."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def main(argv: list[str] | None = None) -> dict:
    from benchmarks.greedy_step_costs import check_counts, one_sentence_benchmark_parser

    parser = one_sentence_benchmark_parser(__doc__)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    check_counts(parser, args)

    import torch
    from transformers import AutoModelForSeq2SeqLM

    from benchmarks.greedy_step_costs import encoder_seconds, step_seconds, step_weight_matrices
    from hf_srcfeat import linear
    from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
    from hf_srcfeat.provenance import code_version, processor_name
    from hf_srcfeat.safe_writing import write_json_atomically
    from hf_srcfeat.single_row_products import set_cpu_threads
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer
    from hf_srcfeat.tokenization_source_features import encoding_options

    code_version()  # read now: the run keeps the code it imported
    set_cpu_threads(1)
    tokenizer = load_tokenizer(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    sources = list(load_multi30k("test_2016_flickr", data_dir=args.data_dir, limit=args.sentences)["source"])
    encoded = [tokenizer(source, return_tensors="pt", **encoding_options(model.config)) for source in sources]
    encoder = model.get_encoder()

    def decode(inputs) -> None:
        model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=args.max_new_tokens)

    def encoder_milliseconds(after_decoding: bool) -> float:
        """A sentence's encoder, on average (`greedy_step_costs.encoder_seconds`)."""
        return 1e3 * encoder_seconds(model, encoded, args.max_new_tokens, after_decoding) / len(encoded)

    def restated(arm: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            with encoder_layers_restated():
                return arm()
        return run

    # The weight matrices one decoding step multiplies a row by, transposed as the loops read them.
    step_weights = [weight.t().contiguous() for weight in step_weight_matrices(model)]
    rows = [torch.randn(1, weight.shape[0]) for weight in step_weights]
    separate = [weight.clone() for weight in step_weights]
    huge_pages_advised = sys.platform == "linux"
    on_huge_pages, _mapping = huge_page_copies(step_weights, advise=huge_pages_advised)  # the copies' memory
    huge_page_kilobytes = anonymous_huge_page_kilobytes()  # whether the kernel took the advice
    output_projection = step_weights[-1]
    output_row = rows[-1]
    output_projection_bfloat16, output_row_bfloat16 = output_projection.bfloat16(), output_row.bfloat16()
    other_memory = torch.zeros(sum(weight.numel() for weight in step_weights))

    def milliseconds_per_step(step: Callable[[], object], touch_other_memory: bool = False) -> float:
        """The median of 100 calls of `step`, in milliseconds (the writes to other memory before each not counted)."""
        return 1e3 * statistics.median(step_seconds(
            step, before_each=(lambda: other_memory.add_(1.0)) if touch_other_memory else None))

    def step_products(weights: list) -> Callable[[], None]:
        def step() -> None:
            for row, weight in zip(rows, weights, strict=True):
                torch.mm(row, weight)
        return step

    def float32_output() -> object:
        return torch.mm(output_row, output_projection)

    def bfloat16_output() -> object:
        return torch.mm(output_row_bfloat16, output_projection_bfloat16)

    arms: dict[str, Callable[[], float]] = {
        "encoder_modules_back_to_back": lambda: encoder_milliseconds(False),
        "encoder_layers_restated_back_to_back": restated(lambda: encoder_milliseconds(False)),
        "encoder_modules_after_decoding": lambda: encoder_milliseconds(True),
        "encoder_layers_restated_after_decoding": restated(lambda: encoder_milliseconds(True)),
        "output_projection_float32": lambda: milliseconds_per_step(float32_output),
        "output_projection_bfloat16": lambda: milliseconds_per_step(bfloat16_output),
        "output_projection_float32_after_other_memory": lambda: milliseconds_per_step(float32_output, True),
        "output_projection_bfloat16_after_other_memory": lambda: milliseconds_per_step(bfloat16_output, True),
        "step_products_separate_weights": lambda: milliseconds_per_step(step_products(separate)),
        "step_products_weights_on_huge_pages": lambda: milliseconds_per_step(step_products(on_huge_pages)),
    }
    milliseconds: dict[str, list[float]] = {name: [] for name in arms}
    with torch.no_grad(), linear.prepared_inference_weights(model):
        for inputs in encoded:  # warm-up: prepares the weights' copies
            decode(inputs)
        modules_outputs = [encoder(**inputs).last_hidden_state for inputs in encoded]
        with encoder_layers_restated():
            restated_outputs = [encoder(**inputs).last_hidden_state for inputs in encoded]
        identical = all(torch.equal(ours, theirs) for ours, theirs in zip(modules_outputs, restated_outputs,
                                                                          strict=True))
        for arm in arms.values():
            arm()
        for _ in range(args.rounds):
            for name, arm in arms.items():
                milliseconds[name].append(arm())
    median = {name: statistics.median(values) for name, values in milliseconds.items()}
    result = {
        "command": "python -m benchmarks.batch1_alternatives " + " ".join(
            f"--{key} {value}" for key, value in vars(args).items() if value is not None),
        "code_version": code_version(), "processor": processor_name(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "model": str(args.model),
        "data": str(multi30k_file("test_2016_flickr", "en", args.data_dir)), "sentences": len(sources),
        "rounds": args.rounds, "encoder_layers_restated_identical": identical,
        "huge_pages_advised": huge_pages_advised, "anonymous_huge_page_kilobytes": huge_page_kilobytes,
        "milliseconds_per_sentence": {name: value for name, value in median.items() if name.startswith("encoder_")},
        "milliseconds_per_step": {name: value for name, value in median.items() if not name.startswith("encoder_")},
        "milliseconds_per_round": milliseconds,
    }
    write_json_atomically(args.output, result)
    print({key: result[key] for key in ("encoder_layers_restated_identical", "milliseconds_per_sentence",
                                        "milliseconds_per_step")})
    return result


if __name__ == "__main__":
    main()
