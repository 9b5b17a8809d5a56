"""Where the time of a piece of work goes, operation by operation: every ATen call timed as it runs.

A `TorchDispatchMode` sees each tensor operation PyTorch dispatches (the backward pass's too: on the CPU the
autograd engine runs them on the calling thread) and times it with the wall clock. `torch.profiler` does not do for
this: on the machine measured it reported some of the training step's large operations many times slower than the
wall clock around the same calls; the times here add up to the work's own wall time but for what runs outside the
operations (Python, the autograd engine's bookkeeping). The mode costs a few microseconds a call, so small
operations read somewhat slower than they run; compare work measured the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from torch.utils._python_dispatch import TorchDispatchMode


class OperationTimer(TorchDispatchMode):
    """Within the block, the seconds spent in and the calls of every ATen operation (by name, e.g. `aten.addmm`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.perf_counter()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            name = str(func.overloadpacket)
            self.seconds[name] += time.perf_counter() - start
            self.calls[name] += 1


def operation_breakdown(work: Callable[[], object], units: float, unit: str, top: int = 25) -> dict:
    """Run `work` untimed, then under an `OperationTimer`, and report per `unit` (e.g. a sentence, of which `work`
    processes `units`): the wall time of each run, the time in operations, and the `top` operations by time with
    their milliseconds and calls per unit and share of the operations' time."""
    start = time.perf_counter()
    work()
    untimed = time.perf_counter() - start
    timer = OperationTimer()
    start = time.perf_counter()
    with timer:
        work()
    timed = time.perf_counter() - start
    in_operations = sum(timer.seconds.values())
    return {
        "unit": unit,
        "milliseconds_per_unit": round(untimed / units * 1e3, 3),
        "milliseconds_per_unit_timed": round(timed / units * 1e3, 3),
        "milliseconds_per_unit_in_operations": round(in_operations / units * 1e3, 3),
        "operation_calls_per_unit": round(sum(timer.calls.values()) / units, 1),
        "operations": [{"name": name, "milliseconds_per_unit": round(seconds / units * 1e3, 4),
                        "calls_per_unit": round(timer.calls[name] / units, 2),
                        "share": round(seconds / in_operations, 4)}
                       for name, seconds in timer.seconds.most_common(top)],
    }


__all__ = ["OperationTimer", "operation_breakdown"]
