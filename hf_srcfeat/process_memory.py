"""Keep freed memory in the process for reuse, in the commands' own processes.

PyTorch allocates CPU tensors with the C library's `malloc`. glibc's defaults hand large freed blocks back to the
operating system and map them anew at the next allocation, so a training step that allocates its activations again
every step pays a page fault for every 4 KB of them: 4% of the shipped training step's time in
`benchmarks/batching_efficiency.py` on the machine measured, 18% with padded sentence batches. `keep_freed_memory`
sets glibc's thresholds (`mallopt`) so that blocks up to 32 MiB come from the heap and freed memory stays there, as
the `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` and `MALLOC_TOP_PAD_` variables do when set before the process
starts. Python has no API for it (PyTorch's advice is to preload another allocator), hence ctypes.

The commands call it at start; `HF_SRCFEAT_KEEP_FREED_MEMORY=0` keeps the C library's defaults. A library user's
process is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

ENVIRONMENT_VARIABLE = "HF_SRCFEAT_KEEP_FREED_MEMORY"
# mallopt's parameters (malloc.h) and the values set: glibc's largest mmap threshold, no trimming below 2 GiB of free
# heap, heap growth in 256 MiB steps.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = {M_MMAP_THRESHOLD: 32 * 2**20, M_TRIM_THRESHOLD: 2**31 - 1, M_TOP_PAD: 256 * 2**20}


def is_glibc() -> bool:
    """Whether this process runs on the GNU C library (Linux distributions but Alpine's musl)."""
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):  # no confstr (Windows), or no such name (macOS, musl)
        return False


def keep_freed_memory() -> bool:
    """Set glibc's malloc to keep freed blocks for reuse; True when set, False where the C library is not glibc or
    `HF_SRCFEAT_KEEP_FREED_MEMORY=0` asks for its defaults."""
    if os.environ.get(ENVIRONMENT_VARIABLE, "1").strip().lower() in ("0", "false", "no") or not is_glibc():
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(parameter, value) == 1 for parameter, value in SETTINGS.items())


__all__ = ["ENVIRONMENT_VARIABLE", "is_glibc", "keep_freed_memory"]
