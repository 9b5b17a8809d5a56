"""The CPU product of one row by a weight (a greedy step of one sentence): through numpy's OpenBLAS where numpy has
it and both it and PyTorch run one thread, else through PyTorch (MKL).

A one-row product reads the whole weight once and does two operations per weight it reads: how fast it runs is how
fast its kernel streams the weight in. On the AMD EPYC measured, OpenBLAS's matrix-vector kernel multiplies a
decoder step's 19 weights about as fast as the MKL kernel PyTorch calls while they are in the cache (0.38 against
0.40 ms) and in two thirds of its time once as many bytes of other memory have passed through it (0.50 against
0.76 ms), as in a decoding loop (`benchmarks/greedy_step_costs.py`); greedy decoding of one sentence takes about a
sixth less (`benchmarks/measure_decoding_speed.py`, its `fast_mkl_rows` arm). PyTorch offers no other BLAS, and
numpy (a dependency of Transformers) ships OpenBLAS in its wheels: the product calls it on views of the tensors'
memory, without copies. It rounds otherwise than MKL; every path of the zoo that multiplies one row by a prepared
copy (the decoding loops' steps and the layers' own calls) multiplies through the same function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy
import torch

try:  # a published model's code may run where only Transformers' own dependencies are: PyTorch's kernel then
    import threadpoolctl
except ImportError:
    threadpoolctl = None  # type: ignore[assignment]

#: False: one-row products through PyTorch (MKL) whatever numpy's BLAS (the benchmarks compare the two).
OPENBLAS_SINGLE_ROWS = True


@functools.cache
def _loaded_openblas() -> tuple:
    """threadpoolctl's controllers of the OpenBLAS libraries loaded at the first call (numpy's among them) where
    numpy's BLAS is OpenBLAS and threadpoolctl is installed, else ()."""
    try:
        blas_name = str(numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"])
    except (KeyError, TypeError):  # a numpy that does not report its BLAS
        return ()
    if "openblas" not in blas_name.lower() or threadpoolctl is None:  # e.g. MKL, or Accelerate on macOS
        return ()
    return tuple(threadpoolctl.ThreadpoolController().select(internal_api="openblas").lib_controllers)


def openblas_applies() -> bool:
    """Whether one-row products go through numpy's OpenBLAS now: numpy's BLAS is OpenBLAS, and PyTorch and every
    loaded OpenBLAS run one thread each (`set_cpu_threads(1)`, or `OMP_NUM_THREADS=1`), as a process decoding one
    sentence at a time per core does. With more threads the two libraries' thread pools would contend for the same
    cores (PyTorch's OpenMP threads spin-wait between operations): at two threads each, a measured step ran from a
    little faster than MKL's to 4.6 times slower."""
    if not OPENBLAS_SINGLE_ROWS or torch.get_num_threads() != 1:
        return False
    libraries = _loaded_openblas()
    return bool(libraries) and all(library.num_threads == 1 for library in libraries)


def set_cpu_threads(threads: int) -> None:
    """PyTorch's intra-op threads and every loaded BLAS's (numpy's OpenBLAS among them) set to `threads`: on one
    thread, single rows are then multiplied through OpenBLAS (`openblas_applies`)."""
    torch.set_num_threads(threads)
    if threadpoolctl is not None:
        threadpoolctl.threadpool_limits(threads, user_api="blas")


def row_product(transposed: torch.Tensor, bias: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """`lambda row: row @ transposed + bias` for one CPU row [1, in_features] and a weight's transposed copy
    [in_features, out_features] (contiguous, float32, no gradient), by the kernel `openblas_applies` chooses now
    (PyTorch's for a row numpy may not read: `plain_row`)."""
    def through_pytorch(row: torch.Tensor) -> torch.Tensor:
        return torch.mm(row, transposed) if bias is None else torch.addmm(bias, row, transposed)

    if not openblas_applies():
        return through_pytorch
    array = transposed.numpy()

    def through_openblas(row: torch.Tensor) -> torch.Tensor:
        if not plain_row(row):
            return through_pytorch(row)
        outputs = torch.from_numpy(numpy.matmul(row.numpy(), array))
        return outputs if bias is None else outputs.add_(bias)
    return through_openblas


def plain_row(inputs: torch.Tensor) -> bool:
    """Whether numpy may stand in for PyTorch's product of `inputs` (a CPU tensor): a plain tensor (no subclass, no
    fake or functorch-wrapped tensor) that autograd does not track, with no dispatch mode active (tracing, operation
    timers and FLOP counters must see the product)."""
    return (type(inputs) is torch.Tensor and not inputs.requires_grad
            and not torch._C._functorch.is_functorch_wrapped_tensor(inputs)
            and torch._C._len_torch_dispatch_stack() == 0)


__all__ = ["OPENBLAS_SINGLE_ROWS", "openblas_applies", "plain_row", "row_product", "set_cpu_threads"]
