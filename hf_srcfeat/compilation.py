"""`torch.compile` for training on batches whose shapes change every step (token batches): one graph for all."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx.experimental._config as fx_config

#: The compiler settings, per config module, under which one trace serves every batch shape
#: (`one_graph_for_all_batch_shapes` says why each); a benchmark process may set them for good.
ONE_GRAPH_SETTINGS: tuple[tuple[Any, dict[str, bool]], ...] = (
    (torch._dynamo.config, {"assume_static_by_default": False, "specialize_float": True}),
    (fx_config, {"use_duck_shape": False}),
)


@contextlib.contextmanager
def one_graph_for_all_batch_shapes(enabled: bool = True) -> Iterator[None]:
    """Within it, a model compiled without an explicit `dynamic` (as the Trainer's `--torch_compile` compiles it) is
    traced with dynamic sizes from its first batch, each size its own symbol: one trace for every batch shape.

    By default dynamo specialises the first graph to the first batch's sizes, traces again at the next batch with
    the sizes that changed made dynamic, and again whenever a size that had not changed by then does (the batch
    size, say). Tracing dynamically from the first batch needs each size its own symbol too: otherwise sizes that
    are equal in the first batch (sources and targets of one length) become one symbol, and the next batch traces
    again. Each trace of a whole model's forward and backward compiles for minutes at Transformer-base size on a
    GPU. The compiler may still add guards of its own (inductor on a GPU: a length divisible by 8 or not).
    Floats stay constants (a model's dropout rates and label smoothing do not change between steps): traced with
    dynamic sizes from the start, dynamo would make each a symbol too, and a label smoothing passed to the loss's
    autograd Function makes it start the whole trace over once it finds that out (half of the compilation time at
    Transformer-base size). `dynamic=False` given to `torch.compile` (for the Trainer,
    `ACCELERATE_DYNAMO_USE_DYNAMIC=0`) still wins; the settings also apply to anything else compiled within
    (FlexAttention's kernels)."""
    with contextlib.ExitStack() as settings:
        if enabled:
            for config, values in ONE_GRAPH_SETTINGS:
                settings.enter_context(config.patch(**values))
        yield
