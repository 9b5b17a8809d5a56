#!/usr/bin/env python
"""One attention call's forward and backward at a token batch's shape, by SDPA with the padding mask (what the
compiled training step runs), and by FlexAttention and by SDPA's memory-efficient kernel over several sentences
packed into each row, on a CUDA GPU.

    python -m benchmarks.measure_attention_packing --output benchmarks/results/attention_packing.json

A token batch of short sentences gives attention thousands of problems of at most `--length` positions (Multi30k:
1,100 sentences of <= 32 tokens, 8 heads: 8,800 problems of 32 x 32 per call), which every SDPA kernel runs far
below the GPU's matrix rate. Packed, `--groups` G consecutive sentences share one row of G x length positions: a
view of the projections' [sentences, positions, heads, head_dim] layout (no copy), attended under a block-diagonal
`mask_mod` (each position sees its own sentence's real positions; in the decoder's causal attention, only the
earlier ones), so FlexAttention computes whole blocks of G x G sentences' scores instead of one tile per short
problem; SDPA takes the same rows with the block-diagonal mask as an additive bias (`--sdpa_groups`): its
memory-efficient kernel then covers two 32-position problems with one 64 x 64 tile instead of two tiles each mostly
padding (four problems take a 128 x 128 block, as many tiles as unpacked, half of them masked). Every way is checked
against float32 math on the unpacked batch (relative error of the real positions' outputs and of the three input
gradients), then timed by CUDA events (median of `--repeats`). Sentence lengths are drawn uniformly from a quarter
of `--length` to `--length`; the values are random (the cost does not depend on them). `--device cpu` checks the
packing only (FlexAttention's outputs, as it has no backward on the CPU; SDPA's outputs and gradients, by its math
kernel) and times nothing. Writes JSON with the device, the software versions and the code version.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from hf_srcfeat.commands.train import code_version
from hf_srcfeat.safe_writing import write_json_atomically

#: An attention way: (queries, keys, values) as [sentences, positions, heads, head_dim] -> [sentences, heads,
#: positions, head_dim], as SDPA returns it.
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class TokenBatch:
    """Random projections of `sentences` sentences padded to `length` positions, their real positions, and the
    additive padding (and causal) mask SDPA takes."""

    def __init__(self, sentences: int, length: int, heads: int, head_dim: int, causal: bool, device: str,
                 dtype: torch.dtype, seed: int = 0):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        lengths = torch.randint(max(1, length // 4), length + 1, (sentences,), generator=generator)
        self.real = (torch.arange(length)[None, :] < lengths[:, None]).to(device)  # [sentences, length]
        self.projections = [torch.randn(sentences, length, heads, head_dim, generator=generator).to(device, dtype)
                            for _ in range(3)]
        self.output_gradient = torch.randn(sentences, heads, length, head_dim, generator=generator).to(device, dtype)
        allowed = self.real[:, None, None, :].expand(sentences, 1, length, length)
        if causal:
            allowed = allowed & torch.ones(length, length, dtype=torch.bool, device=device).tril()
        self.mask = torch.zeros(allowed.shape, device=device, dtype=dtype).masked_fill(~allowed,
                                                                                        torch.finfo(dtype).min)
        self.causal = causal


def sdpa(batch: TokenBatch, backend: SDPBackend) -> Attention:
    def attention(queries, keys, values):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(queries.transpose(1, 2), keys.transpose(1, 2),
                                                  values.transpose(1, 2), attn_mask=batch.mask)
    return attention


def packed_flex(batch: TokenBatch, groups: int, compiled: bool) -> Attention:
    """FlexAttention over `groups` consecutive sentences per row, under a block-diagonal mask."""
    sentences, length = batch.real.shape
    rows, width = sentences // groups, groups * length
    real = batch.real.reshape(rows, width)
    causal = batch.causal

    def mask_mod(row, head, query_index, key_index):
        allowed = ((query_index // length) == (key_index // length)) & real[row, key_index]
        return allowed & (query_index >= key_index) if causal else allowed

    block_mask = create_block_mask(mask_mod, rows, None, width, width, device=str(real.device))
    flex = torch.compile(flex_attention) if compiled else flex_attention

    def attention(queries, keys, values):
        heads, head_dim = queries.shape[2:]
        output = flex(*(x.reshape(rows, width, heads, head_dim).transpose(1, 2) for x in (queries, keys, values)),
                      block_mask=block_mask)
        return output.transpose(1, 2).reshape(sentences, length, heads, head_dim).transpose(1, 2)
    return attention


def packed_sdpa(batch: TokenBatch, groups: int, backend: SDPBackend) -> Attention:
    """SDPA over `groups` consecutive sentences per row (the same view as `packed_flex`), under a block-diagonal
    additive mask built once per batch, as a model would build it once for all its layers."""
    sentences, length = batch.real.shape
    rows, width = sentences // groups, groups * length
    position = torch.arange(width, device=batch.real.device)
    allowed = ((position[:, None] // length) == (position[None, :] // length))[None] & \
        batch.real.reshape(rows, 1, width)
    if batch.causal:
        allowed = allowed & (position[:, None] >= position[None, :])
    mask = torch.zeros(allowed.shape, device=allowed.device, dtype=batch.mask.dtype).masked_fill(
        ~allowed, torch.finfo(batch.mask.dtype).min)[:, None]

    def attention(queries, keys, values):
        heads, head_dim = queries.shape[2:]
        with sdpa_kernel([backend]):
            output = F.scaled_dot_product_attention(
                *(x.reshape(rows, width, heads, head_dim).transpose(1, 2) for x in (queries, keys, values)),
                attn_mask=mask)
        return output.transpose(1, 2).reshape(sentences, length, heads, head_dim).transpose(1, 2)
    return attention


def relative_errors(batch: TokenBatch, attention: Attention, backward: bool) -> list[float]:
    """Relative errors against float32 math on the unpacked batch: the real positions' outputs (a padded query
    position's output is read by nothing), then each input's gradient when `backward`."""
    leaves = [projection.detach().requires_grad_(backward) for projection in batch.projections]
    output = attention(*leaves)
    references = [projection.detach().float().requires_grad_(backward) for projection in batch.projections]
    with sdpa_kernel([SDPBackend.MATH]):
        reference = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in references),
                                                   attn_mask=batch.mask.float())
    real = batch.real[:, None, :, None]
    exact = reference.detach()
    errors = [float(((output.detach().float() - exact) * real).norm() / (exact * real).norm())]
    if backward:
        output.backward(batch.output_gradient)
        reference.backward(batch.output_gradient.float())
        errors += [float((leaf.grad.float() - ref.grad).norm() / ref.grad.norm())
                   for leaf, ref in zip(leaves, references, strict=True)]
    return errors


def microseconds(batch: TokenBatch, attention: Attention, repeats: int) -> float:
    """Median CUDA-event time of one forward and backward, after three warm-ups."""
    leaves = [projection.detach().requires_grad_() for projection in batch.projections]
    for _ in range(3):
        attention(*leaves).backward(batch.output_gradient)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        attention(*leaves).backward(batch.output_gradient)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=1104, help="sentences in the batch (default 1104)")
    parser.add_argument("--length", type=int, default=32, help="positions each sentence is padded to (default 32)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 8],
                        help="sentences per packed row for FlexAttention")
    parser.add_argument("--sdpa_groups", type=int, nargs="+", default=[2, 4],
                        help="sentences per packed row for SDPA's memory-efficient kernel (on the CPU: its math)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to check the packing's outputs")
    args = parser.parse_args(argv)
    for option in ("sentences", "length", "heads", "head_dim", "repeats"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    for option in ("groups", "sdpa_groups"):
        uneven = [group for group in getattr(args, option) if group < 1 or args.sentences % group]
        if uneven:
            parser.error(f"--{option} {' '.join(map(str, uneven))}: each must be at least 1 and divide --sentences "
                         f"{args.sentences}")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("measure_attention_packing times a CUDA GPU; this machine has none (--device cpu checks "
                         "the packing only).")
    dtype = torch.bfloat16 if cuda else torch.float32
    result: dict = {
        "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
        "cuda": torch.version.cuda, "code_version": code_version(),
        "command": "python -m benchmarks.measure_attention_packing " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "settings": {"sentences": args.sentences, "length": args.length, "heads": args.heads,
                     "head_dim": args.head_dim, "dtype": str(dtype).removeprefix("torch."),
                     "lengths": f"uniform from {max(1, args.length // 4)} to {args.length}"},
        "ways": {},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for causal in (False, True):
        batch = TokenBatch(args.sentences, args.length, args.heads, args.head_dim, causal, args.device, dtype)
        kind = "causal" if causal else "bidirectional"
        ways: dict[str, Attention] = {}
        if cuda:
            ways |= {f"sdpa_{backend.name.lower()}": sdpa(batch, backend)
                     for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION)}
        ways |= {f"flex_packed_{group}": packed_flex(batch, group, compiled=cuda) for group in args.groups}
        packed_backend = SDPBackend.EFFICIENT_ATTENTION if cuda else SDPBackend.MATH
        ways |= {f"sdpa_{packed_backend.name.lower()}_packed_{group}": packed_sdpa(batch, group, packed_backend)
                 for group in args.sdpa_groups}
        for name, attention in ways.items():
            try:
                measured: dict = {"relative_errors": [round(error, 7) for error in
                                                      relative_errors(batch, attention, backward=cuda or
                                                                      not name.startswith("flex"))]}
                if cuda:
                    measured["microseconds_forward_backward"] = round(microseconds(batch, attention, args.repeats))
            except Exception as error:  # noqa: BLE001 - recorded, the other ways go on
                measured = {"error": f"{type(error).__name__}: {str(error)[:500]}"}
            result["ways"][f"{kind}_{name}"] = measured
            print(f"{kind:13s} {name:28s} {measured}", flush=True)
            write_json_atomically(args.output, result)


if __name__ == "__main__":
    main()
