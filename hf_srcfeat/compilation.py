"""`torch.compile` for training on batches whose shapes change every step (token batches): one graph for all."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.fx.experimental._config as fx_config


@contextlib.contextmanager
def one_graph_for_all_batch_shapes(enabled: bool = True) -> Iterator[None]:
    """Within it, a model compiled without an explicit `dynamic` (as the Trainer's `--torch_compile` compiles it) is
    traced with dynamic sizes from its first batch, each size its own symbol, so one graph serves every batch shape.

    By default dynamo specialises the first graph to the first batch's sizes and compiles again at the next batch;
    and it gives sizes that are equal when it first traces them one symbol ("duck sizing"), so a first batch whose
    sources and targets are equally long is followed by a third compilation. Each compilation of a whole model's
    forward and backward takes minutes at Transformer-base size. `dynamic=False` given to `torch.compile` (or
    `ACCELERATE_DYNAMO_USE_DYNAMIC=0` to the Trainer) still wins."""
    if not enabled:
        yield
        return
    # torch gives its config modules `patch` when it installs them, which the type checker cannot see.
    no_duck_sizing = fx_config.patch(use_duck_shape=False)  # type: ignore[attr-defined]
    with torch._dynamo.config.patch(assume_static_by_default=False), no_duck_sizing:
        yield
