"""Where a piece of GPU work spends the device's time, and whether the host keeps the device busy.

`torch.profiler` records every kernel and copy the device runs, with its duration, and every CUDA runtime call
the host makes (launches, synchronisations). From them: the device's busy time against the wall time (a device busy
for a fraction of the wall time waits for the host: launches, Python, synchronisations), the busy time by kind of
kernel (matrix products, attention, inductor's fused kernels, the optimiser, copies, the rest) and by kernel, and
the launches and host synchronisations per unit of work. (`benchmarks/op_timing.py` times operations by the wall
clock instead: on the CPU, where they run as they are called; on a GPU they only queue kernels.)
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

import torch

#: How many of the longest kernels a breakdown lists (a whole compiled step's element-wise time spreads over more
#: than 20).
LONGEST_KERNELS = 40

#: Kinds of device work, tried in order on a kernel's name (lower-cased); the first that matches names its kind.
#: Inductor's kernels first: their names list the operations they fuse (e.g. the padding of an attention mask), not
#: what the kernel is; its templates (`triton_tem_`) are matrix products or FlexAttention, which the name does not
#: tell apart.
KERNEL_KINDS = (
    ("fused element-wise (inductor)", re.compile(r"^triton_(poi|red|per|for)_")),
    ("template: matrix product or FlexAttention (inductor)", re.compile(r"^triton_tem_")),
    ("attention", re.compile(r"attention|fmha|flash|sdpa|flex|cudnn::fusion")),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach")),
    ("matrix product", re.compile(r"gemm|cutlass|cublas|matmul|sm\d+_xmma|nvjet|wgmma")),
    ("copy or fill", re.compile(r"^memcpy|^memset|copy_kernel|fill_kernel|fillfunctor|catarray")),
    ("element-wise or reduction (ATen)", re.compile(r"elementwise|reduce_kernel|softmax|norm|dropout|embedding|"
                                                    r"index|scatter|gather|cross_entropy|nll_loss")),
)
#: Host calls that wait for the device (each drains its queue of work) and calls that launch device work.
SYNCHRONIZING_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
LAUNCHING_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                   "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync")


def kernel_kind(name: str) -> str:
    """The kind of device work a kernel or copy named `name` does (`KERNEL_KINDS`; "other" if none matches)."""
    lowered = name.lower()
    return next((kind for kind, pattern in KERNEL_KINDS if pattern.search(lowered)), "other")


def summarize(device_work: Iterable[tuple[str, float]], host_calls: Counter[str], wall_seconds: float,
              units: float, unit: str, top: int = LONGEST_KERNELS) -> dict:
    """The breakdown of `device_work` ((kernel or copy name, microseconds) as the device ran them) and `host_calls`
    (CUDA runtime call name -> count) over `wall_seconds` of work covering `units` `unit`s, all per unit."""
    microseconds: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    for name, duration in device_work:
        microseconds[name] += duration
        calls[name] += 1
    busy = sum(microseconds.values()) or 1e-9  # no device work: every share 0, not a division by zero
    by_kind: defaultdict[str, float] = defaultdict(float)
    for name, duration in microseconds.items():
        by_kind[kernel_kind(name)] += duration

    def longest_first(durations: dict[str, float]) -> list[tuple[str, float]]:
        return sorted(durations.items(), key=lambda item: -item[1])

    def per_unit_ms(duration_us: float) -> float:
        return round(duration_us / 1e3 / units, 4)

    return {
        "unit": unit,
        "wall_milliseconds_per_unit_profiled": round(wall_seconds * 1e3 / units, 3),
        "device_busy_milliseconds_per_unit": per_unit_ms(busy),
        # Kernels of one stream do not overlap; work on several streams at once would count more than once.
        "device_busy_share_of_wall": round(busy / 1e6 / wall_seconds, 3) if wall_seconds else None,
        "kernels_per_unit": round(sum(calls.values()) / units, 1),
        "launches_per_unit": round(sum(host_calls[name] for name in LAUNCHING_CALLS) / units, 1),
        "host_synchronizations_per_unit": round(sum(host_calls[name] for name in SYNCHRONIZING_CALLS) / units, 2),
        "by_kind": [{"kind": kind, "milliseconds_per_unit": per_unit_ms(duration),
                     "share": round(duration / busy, 4)} for kind, duration in longest_first(by_kind)],
        "kernels": [{"name": name[:200], "kind": kernel_kind(name), "milliseconds_per_unit": per_unit_ms(duration),
                     "calls_per_unit": round(calls[name] / units, 2), "share": round(duration / busy, 4)}
                    for name, duration in longest_first(microseconds)[:top]],
    }


def device_work_and_host_calls(events: Iterable) -> tuple[list[tuple[str, float]], Counter[str]]:
    """From `torch.profiler`'s events: (name, microseconds) of each kernel, copy and fill the device ran, and the
    count of each launching or synchronising CUDA runtime call. Annotations shown on the device's timeline (e.g. the
    optimiser's `Optimizer.step#AdamW.step` span, which covers kernels counted already) and the profiler's own buffer
    requests are not device work."""
    from torch.autograd import DeviceType

    device_work: list[tuple[str, float]] = []
    host_calls: Counter[str] = Counter()
    for event in events:
        if event.device_type == DeviceType.CUDA:
            if not getattr(event, "is_user_annotation", False) and not event.name.startswith("Activity Buffer"):
                device_work.append((event.name, event.time_range.elapsed_us()))
        elif event.name in SYNCHRONIZING_CALLS or event.name in LAUNCHING_CALLS:
            host_calls[event.name] += 1
    return device_work, host_calls


def gpu_time_breakdown(work: Callable[[], object], units: float, unit: str,
                       top: int = LONGEST_KERNELS) -> dict:
    """Run `work` (which must synchronise the device before it returns) once under `torch.profiler` with the CUDA
    activity and summarise what the device and the host did (`summarize`), per `unit` of which `work` does `units`.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        start = time.perf_counter()
        work()
        wall = time.perf_counter() - start
    device_work, host_calls = device_work_and_host_calls(profiler.events())
    if not device_work and torch.cuda.is_available():
        raise RuntimeError("the profiler recorded no device work: is `work` running on the GPU?")
    return summarize(device_work, host_calls, wall, units, unit, top)


__all__ = ["KERNEL_KINDS", "device_work_and_host_calls", "gpu_time_breakdown", "kernel_kind", "summarize"]
