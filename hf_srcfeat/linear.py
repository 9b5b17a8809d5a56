"""The linear layer of the shared backbone (attention projections, feed-forward, output projection).

An `nn.Linear` whose products on the CPU in float32 run through oneDNN once a call has enough rows: there PyTorch's
default (MKL) reaches about half of a core's float32 peak on AMD processors and oneDNN close to it
(`benchmarks/measure_decoding_speed.py`, `benchmarks/batching_efficiency.py`). In training the three products of a
layer (the output, the input's and the weight's gradients) all run through oneDNN.

Within `prepared_inference_weights(model)` (translation: the translate command and the pipeline decode within it),
products without gradients read the weight from a copy in the layout the kernel reads fastest, made on first use:
packed into oneDNN's blocked layout for products of several rows, transposed for one row (greedy decoding of one
sentence), where a matrix-vector kernel (OpenBLAS or MKL: `single_row_products`) then streams it row by row.
Decoding reads every weight of the decoder each step, from memory rather than cache once the model outgrows the
cache; read in these layouts the products of a greedy step of one sentence take about half as long, those of a
batched step about a tenth less (`benchmarks/measure_decoding_speed.py`). A layer keeps one copy (packed once it met
several rows, for single rows too), which costs the weight's size again until the block ends. The copy is remade
when PyTorch counts a change of the weight; updates it does not count (writes through `.data`, fused optimizers) are
why the copies live only within the block, whose caller promises that the weights stay as they are. Layers that read
the same input (an attention's query, key and value projections) can multiply it once with their weights stacked
(`stacked_products`): one prepared copy of the stack then stands in for theirs. A layer over concatenated inputs can
multiply each part by its own block of the weight (`products_of_concatenated_inputs`), so that a part shared by
several rows (a phrase's summary beside each of its tokens) is multiplied once.

Other dtypes and devices, autocast and compiled graphs take `nn.Linear`'s own path (`F.linear` on the weight's
column blocks for `products_of_concatenated_inputs`); the parameters and saved weights are `nn.Linear`'s.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

from .single_row_products import openblas_applies, row_product

#: Below this many rows (e.g. greedy decoding of one sentence) MKL's matrix-vector kernels are the faster ones.
ONEDNN_MIN_ROWS = 16
#: Within `prepared_inference_weights`, products without gradients read the weight in a prepared layout (False:
#: the training kernels' path there too).
PREPARED_INFERENCE_WEIGHTS = True
#: The row count oneDNN packs the weight for; products of any number of rows read it, fastest from about 4 rows.
PACKING_ROWS_HINT = 64


def onednn_product(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`inputs @ weight.T + bias` by oneDNN (`weight` is `[out_features, in_features]`, as `nn.Linear` keeps it)."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


def _zoo_kernels_enabled() -> bool:
    """What the zoo's CPU kernels need whatever the tensors: eager mode, oneDNN, no CPU autocast."""
    # Compiled graphs first: tracing `mkldnn.is_available` would break them.
    return (not torch.compiler.is_compiling() and torch.backends.mkldnn.is_available()
            and not torch.is_autocast_enabled("cpu"))


def _cpu_float32_eager(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    """Where the zoo's CPU kernels apply at all: eager float32 on the CPU with oneDNN, no autocast."""
    return (inputs.dtype == torch.float32 and weight.dtype == torch.float32 and inputs.device.type == "cpu"
            and _zoo_kernels_enabled())


def onednn_applies(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the zoo's oneDNN products serve `inputs @ weight.T`: eager float32 on the CPU, enough rows."""
    return _cpu_float32_eager(inputs, weight) and inputs.numel() >= ONEDNN_MIN_ROWS * weight.shape[1]


def runs_more_than_forward(module: nn.Module) -> bool:
    """Whether calling `module` does more than its class's `forward`: its own hooks or global ones, a `forward`
    replaced on the instance (Accelerate's device placement does so), an in-place `compile()`. What restates the
    module's computation (a stacked product, a decoder step, a fused loss) would skip it."""
    return _global_hooks_registered() or _own_call_runs_more_than_forward(module)


def any_runs_more_than_forward(modules: Iterable[nn.Module]) -> bool:
    """`any(runs_more_than_forward(module) for module in modules)`, the global hooks looked at once."""
    return _global_hooks_registered() or any(_own_call_runs_more_than_forward(module) for module in modules)


def _global_hooks_registered() -> bool:
    return bool(module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks
                or module_hooks._global_backward_hooks or module_hooks._global_backward_pre_hooks)


def _own_call_runs_more_than_forward(module: nn.Module) -> bool:
    # Read from the instance's own attributes: `hasattr` of a missing one goes through `nn.Module.__getattr__` and
    # its AttributeError, several times slower, and the decoding loops check every decoder module per call.
    attributes = vars(module)
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or "_hf_hook" in attributes or "forward" in attributes
                or attributes.get("_compiled_call_impl") is not None)


def _is_plain_product(layer: nn.Module) -> bool:
    """A `Linear` of this module (not e.g. an adapter, a quantized or parametrized layer) whose call is its product."""
    return type(layer) is Linear and not runs_more_than_forward(layer)


def _needs_gradient(inputs: torch.Tensor, layer: nn.Linear) -> bool:
    return torch.is_grad_enabled() and (layer.weight.requires_grad or inputs.requires_grad
                                        or (layer.bias is not None and layer.bias.requires_grad))


class OneDNNLinearFunction(torch.autograd.Function):
    """A linear layer whose forward and backward products all run through oneDNN."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(inputs, weight)
        ctx.has_bias = bias is not None
        return onednn_product(inputs, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        inputs, weight = ctx.saved_tensors
        return linear_gradients(grad_output, inputs, weight, ctx.has_bias, ctx.needs_input_grad)


def linear_gradients(grad_output: torch.Tensor, inputs: torch.Tensor, weight: torch.Tensor, has_bias: bool,
                     needs_input_grad: Sequence[bool], product: Callable = onednn_product
                     ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The gradients of `inputs @ weight.T + bias` for the inputs, the weight and the bias (None where
    `needs_input_grad` says none is needed), every product by `product(left, right)` = `left @ right.T`."""
    grad_rows = grad_output.reshape(-1, grad_output.shape[-1])
    grad_inputs = grad_weight = grad_bias = None
    # oneDNN reads a transposed right operand in place: copying it first would take as long as some products.
    if needs_input_grad[0]:  # grad_output @ weight
        grad_inputs = product(grad_rows, weight.t()).view(inputs.shape)
    if needs_input_grad[1]:  # grad_output.T @ inputs
        input_rows = inputs.reshape(-1, inputs.shape[-1])
        # oneDNN copies its transposed left operand first: let that be the narrower of the two.
        if weight.shape[1] < weight.shape[0]:
            grad_weight = product(input_rows.t(), grad_rows.t()).t()
        else:
            grad_weight = product(grad_rows.t(), input_rows.t())
    if has_bias and needs_input_grad[2]:
        grad_bias = grad_rows.sum(0)
    return grad_inputs, grad_weight, grad_bias


def products_of_concatenated_inputs(layer: nn.Linear, parts: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
    """`layer(torch.cat(parts, -1))` stated block by block: `[part_i @ W_i.T]`, W_i the columns of `layer.weight`
    that read part i, the bias added to the first. Parts may have different leading shapes (e.g. one row per token
    and one per phrase): the caller broadcasts and sums the products, so a part shared by several rows is
    multiplied once. Within `prepared_inference_weights` each block is read from its own prepared copy. None where
    the layer's own call serves: it is more than its product (hooks, adapters, a quantized layer); the caller then
    concatenates and calls the layer."""
    weight = layer.weight
    if not _is_plain_product(layer) or type(weight) not in (torch.Tensor, nn.Parameter):
        return None
    prepared = _PREPARED_WEIGHTS.get(layer)
    if prepared is not None and all(_prepared_inference_applies(part, layer) for part in parts):
        return _prepared_block_products(layer, parts, prepared)
    blocks = weight.split([part.shape[-1] for part in parts], dim=1)
    biases = [layer.bias, *(None,) * (len(parts) - 1)]
    if not all(onednn_applies(part, block) for part, block in zip(parts, blocks, strict=True)):
        return [nn.functional.linear(part, block, bias) for part, block, bias in zip(parts, blocks, biases, strict=True)]
    if any(_needs_gradient(part, layer) for part in parts):
        return list(OneDNNBlockLinearFunction.apply(weight, layer.bias, *parts))
    # oneDNN reads a column block in place only through its reference kernel (seconds, not milliseconds): copy it
    return [onednn_product(part, block.contiguous(), bias) for part, block, bias in zip(parts, blocks, biases,
                                                                                         strict=True)]


class OneDNNBlockLinearFunction(torch.autograd.Function):
    """`products_of_concatenated_inputs` in CPU float32 training: each block's three products through oneDNN, from
    contiguous copies of the weight's column blocks (kept for the backward pass), the weight's gradient written
    block beside block."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, bias: torch.Tensor | None, *parts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        blocks = [block.contiguous() for block in weight.split([part.shape[-1] for part in parts], dim=1)]
        ctx.save_for_backward(*parts, *blocks)
        ctx.has_bias = bias is not None
        return tuple(onednn_product(part, block, bias if index == 0 else None)
                     for index, (part, block) in enumerate(zip(parts, blocks, strict=True)))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs: torch.Tensor):
        saved = ctx.saved_tensors
        parts, blocks = saved[:len(saved) // 2], saved[len(saved) // 2:]
        needs_weight, needs_bias = ctx.needs_input_grad[:2]
        gradients = [linear_gradients(grad_output, part, block, index == 0 and ctx.has_bias,
                                      (ctx.needs_input_grad[2 + index], needs_weight, index == 0 and needs_bias))
                     for index, (grad_output, part, block) in enumerate(zip(grad_outputs, parts, blocks, strict=True))]
        grad_weight = (torch.cat([grad_block for _, grad_block, _ in gradients if grad_block is not None], dim=1)
                       if needs_weight else None)
        return grad_weight, gradients[0][2], *(grad_part for grad_part, _, _ in gradients)


@dataclass
class PreparedWeight:
    """A layer's weight in the layout inference reads, made on first use, for one state of the weight."""

    scopes: int = 0  # `prepared_inference_weights` blocks open for the layer
    state: tuple | None = None  # the weight the copy was made from (`_parameters_state`)
    transposed: torch.Tensor | None = None  # [in_features, out_features], contiguous
    packed: torch.Tensor | None = None  # oneDNN's blocked layout (an opaque mkldnn tensor)
    # column widths -> a copy of each column block (`products_of_concatenated_inputs`), for the same state
    blocks: dict[tuple[int, ...], list[PreparedWeight]] = field(default_factory=dict)
    stacked: StackedWeights | None = None  # the layer's weight stacked with others' (`prepared_stacked_products`)
    # What callers made from the copies for later calls (`inference_memo`), kept and dropped with them
    derived: dict[Any, Any] = field(default_factory=dict)


# Kept beside the layers rather than on them, so that copying, pickling or saving a layer never meets the opaque
# oneDNN tensor; an entry goes when its layer does, and when the last scope open for it closes.
_PREPARED_WEIGHTS: weakref.WeakKeyDictionary[nn.Module, PreparedWeight] = weakref.WeakKeyDictionary()
_PREPARED_WEIGHTS_LOCK = threading.Lock()


@contextlib.contextmanager
def prepared_inference_weights(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, `model`'s linear layers read their weights from copies prepared for inference (CPU,
    float32, no gradient), made on first use and freed when the block ends. The caller promises not to change the
    weights inside the block: updates that PyTorch does not count (writes through `.data`, fused optimizers) would
    not reach the copies. `hf-srcfeat-translate` and the translation pipeline decode within such a block."""
    layers = [layer for layer in model.modules() if isinstance(layer, Linear)]
    with _PREPARED_WEIGHTS_LOCK:
        for layer in layers:
            _PREPARED_WEIGHTS.setdefault(layer, PreparedWeight()).scopes += 1
    try:
        yield model
    finally:
        with _PREPARED_WEIGHTS_LOCK:
            for layer in layers:
                prepared = _PREPARED_WEIGHTS.get(layer)
                if prepared is not None:
                    prepared.scopes -= 1
                    if prepared.scopes <= 0:
                        del _PREPARED_WEIGHTS[layer]


def _prepared_inference_applies(inputs: torch.Tensor, layer: nn.Linear) -> bool:
    weight = layer.weight
    return (PREPARED_INFERENCE_WEIGHTS and _cpu_float32_eager(inputs, weight) and not torch.jit.is_tracing()
            and type(weight) in (torch.Tensor, nn.Parameter) and not weight.is_inference()
            and not torch._C._functorch.is_functorch_wrapped_tensor(weight)  # vmap / jvp: no storage of its own
            and not _needs_gradient(inputs, layer))


class Linear(nn.Linear):
    """`nn.Linear`; CPU float32 products of batches of rows run oneDNN's matrix multiplication, in inference and
    training, and inference within `prepared_inference_weights` reads the weight in a prepared layout."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        prepared = _PREPARED_WEIGHTS.get(self)
        if prepared is not None and _prepared_inference_applies(inputs, self):
            return _prepared_product(inputs, self.weight, self.bias, prepared)
        if not onednn_applies(inputs, self.weight):
            return super().forward(inputs)
        if _needs_gradient(inputs, self):
            return OneDNNLinearFunction.apply(inputs, self.weight, self.bias)
        return onednn_product(inputs, self.weight, self.bias)


def _prepared_product(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      prepared: PreparedWeight) -> torch.Tensor:
    """`inputs @ weight.T + bias` reading `weight` from the copy `prepared` holds, made (or remade) here when it is
    missing or was made from another tensor or state of `weight`."""
    _forget_copies_of_other_weights(prepared, weight)
    return _product_making_copy(inputs, prepared, bias, lambda: weight)


def _forget_copies_of_other_weights(prepared: PreparedWeight, weight: torch.Tensor) -> None:
    """Drop `prepared`'s copies when they were made from another tensor or state of `weight` (the next product makes
    one anew)."""
    if not _unchanged(prepared.state, (weight,)):
        prepared.transposed = prepared.packed = None
        prepared.blocks = {}
        prepared.state = _parameters_state((weight,))


def _prepared_block_products(layer: nn.Linear, parts: Sequence[torch.Tensor],
                             prepared: PreparedWeight) -> list[torch.Tensor]:
    """`products_of_concatenated_inputs` from prepared copies of the weight's column blocks, made on first use."""
    _forget_copies_of_other_weights(prepared, layer.weight)
    widths = tuple(part.shape[-1] for part in parts)
    blocks = prepared.blocks.get(widths)
    if blocks is None:
        blocks = prepared.blocks[widths] = [PreparedWeight() for _ in widths]

    def column_block(index: int) -> Callable[[], torch.Tensor]:
        return lambda: layer.weight.detach().split(widths, dim=1)[index].contiguous()

    return [_product_making_copy(part, block, layer.bias if index == 0 else None, column_block(index))
            for index, (part, block) in enumerate(zip(parts, blocks, strict=True))]


def _product_making_copy(inputs: torch.Tensor, prepared: PreparedWeight, bias: torch.Tensor | None,
                         weight: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The product from `prepared`'s copy, made first from `weight()` when none suits `inputs`."""
    outputs = _product_from_copy(inputs, prepared, bias)
    if outputs is None:
        made_from = weight()
        _make_copy(made_from, prepared, rows=inputs.numel() // made_from.shape[1])
        outputs = _product_from_copy(inputs, prepared, bias)
    assert outputs is not None  # the copy just made suits these inputs
    return outputs


def _product_from_copy(inputs: torch.Tensor, prepared: PreparedWeight,
                       bias: torch.Tensor | None) -> torch.Tensor | None:
    """The product from `prepared`'s copy where one suits `inputs` (the packed one suits any number of rows, the
    transposed one a single row), else None."""
    # Read into locals once: another thread may replace the copies meanwhile, never mutate them.
    transposed, packed = prepared.transposed, prepared.packed
    if packed is not None:
        return torch.ops.mkldnn._linear_pointwise(inputs, packed, bias, "none", [], "")
    if transposed is None or inputs.numel() != transposed.shape[0]:
        return None
    outputs = row_product(transposed, bias)(inputs.reshape(1, transposed.shape[0]))
    return outputs.view(*inputs.shape[:-1], transposed.shape[1])


def _make_copy(weight: torch.Tensor, prepared: PreparedWeight, rows: int) -> None:
    """The copy of `weight` for products of `rows` rows: transposed for one row, else packed for oneDNN. One copy
    per layer: once several rows came, single rows read the packed copy too."""
    if rows == 1:
        prepared.transposed, prepared.packed = weight.detach().t().contiguous(), None
    else:
        prepared.transposed = None
        prepared.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKING_ROWS_HINT)


@dataclass
class StackedWeights:
    """The copy several layers' weights make stacked into one (the stacked weight itself is not kept), and their
    biases stacked, for one state of each."""

    state: tuple  # the weights and biases stacked (`_parameters_state`)
    bias: torch.Tensor | None
    prepared: PreparedWeight


def _parameters_state(parameters: Sequence[torch.Tensor]) -> tuple:
    """What a copy made from `parameters` depends on: each one's identity (weakly held: a new tensor may take a freed
    one's address), data_ptr and version."""
    return tuple((weakref.ref(parameter), parameter.data_ptr(), parameter._version) for parameter in parameters)


def _unchanged(state: tuple | None, parameters: Sequence[torch.Tensor]) -> bool:
    """Whether `parameters` are those `state` was taken from, with no change PyTorch counts since."""
    return state is not None and len(state) == len(parameters) and all(
        reference() is parameter and data_ptr == parameter.data_ptr() and version == parameter._version
        for (reference, data_ptr, version), parameter in zip(state, parameters, strict=True))


def prepared_stacked_products(layers: Sequence[nn.Linear], inputs: torch.Tensor) -> list[torch.Tensor] | None:
    """`[layer(inputs) for layer in layers]` as one product with the layers' weights stacked (one kernel call and one
    pass over `inputs` instead of one per layer, e.g. an attention's query, key and value projections), within
    `prepared_inference_weights`; None where its prepared path does not apply to every layer (the caller then calls
    them one by one). The stacked copy lives with the first layer's prepared copy, in place of the layers' own, and
    is remade when any of the layers' parameters changes as PyTorch counts it."""
    stacked = _stacked_weights(layers, inputs)
    if stacked is None:
        return None
    outputs = _product_making_copy(inputs, stacked.prepared, stacked.bias, _stacked_weight(layers))
    return list(outputs.split([layer.out_features for layer in layers], dim=-1))


def stacked_products(layers: Sequence[nn.Linear], inputs: torch.Tensor) -> list[torch.Tensor]:
    """`[layer(inputs) for layer in layers]`: one product with the layers' weights stacked within
    `prepared_inference_weights` (`prepared_stacked_products`), elsewhere the layers called one by one. (In CPU
    training a stack made anew at each step, with the input's gradient as one product, measured no faster at the
    benchmark's size: the copies of the stack and of the split gradients cost what the fewer products save.)"""
    outputs = prepared_stacked_products(layers, inputs)
    return outputs if outputs is not None else [layer(inputs) for layer in layers]


def _stacked_weights(layers: Sequence[nn.Linear], inputs: torch.Tensor) -> StackedWeights | None:
    """The layers' `StackedWeights` for the current state of their parameters (new, without a copy yet, when there
    was none or they changed), or None where the prepared path does not apply to every layer for `inputs`."""
    holder = _PREPARED_WEIGHTS.get(layers[0])
    if holder is None or not all(_is_plain_product(layer) and layer in _PREPARED_WEIGHTS
                                 and _prepared_inference_applies(inputs, layer) for layer in layers):
        return None
    if len({layer.in_features for layer in layers}) != 1:
        return None
    parameters = [parameter for layer in layers for parameter in (layer.weight, layer.bias) if parameter is not None]
    stacked = holder.stacked  # read once (threads)
    if stacked is None or not _unchanged(stacked.state, parameters):
        bias = None
        if any(layer.bias is not None for layer in layers):
            bias = torch.cat([layer.bias.detach() if layer.bias is not None else layer.weight.new_zeros(
                layer.out_features) for layer in layers])
        stacked = StackedWeights(_parameters_state(parameters), bias, PreparedWeight())
        holder.stacked = stacked
    return stacked


def _stacked_weight(layers: Sequence[nn.Linear]) -> Callable[[], torch.Tensor]:
    # The stacked weight lives only while its copy is made.
    return lambda: torch.cat([layer.weight.detach() for layer in layers])


def inference_product(layer: nn.Linear, rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`layer`'s product for 2-D inputs [rows, in_features], for a caller that makes many products while the weights
    stay as they are (a decoding loop). Within `prepared_inference_weights` the prepared copy for `rows` rows is
    looked up (made when missing) here, once, instead of at every call, and the products read it as the layer's
    own calls would; elsewhere the layer's own `forward` (no module hooks: the caller checks there are none)."""
    prepared = _PREPARED_WEIGHTS.get(layer)
    example = layer.weight.new_empty(rows, layer.in_features)  # for the checks: its values are never read
    if type(layer) is not Linear or prepared is None or not _prepared_inference_applies(example, layer):
        return layer.forward
    _forget_copies_of_other_weights(prepared, layer.weight)
    return _product_reading_copy(prepared, layer.bias, lambda: layer.weight, rows)


def inference_stacked_product(layers: Sequence[nn.Linear], rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`lambda inputs: torch.cat([layer(inputs) for layer in layers], -1)` for 2-D inputs [rows, in_features]: the
    one product with the weights stacked where `prepared_stacked_products` applies (no concatenation then), the copy
    looked up once here as `inference_product` does; elsewhere the layers' own `forward`, concatenated."""
    stacked = _stacked_weights(layers, layers[0].weight.new_empty(rows, layers[0].in_features))
    if stacked is None:
        return lambda inputs: torch.cat([layer.forward(inputs) for layer in layers], -1)
    return _product_reading_copy(stacked.prepared, stacked.bias, _stacked_weight(layers), rows)


def inference_memo(layer: nn.Module) -> dict[Any, Any] | None:
    """Where a caller keeps what it made from `layer`'s prepared copies for later calls (a decoding step's looked-up
    products): a dict that lives as long as the layer's `prepared_inference_weights` block. None outside one, and
    where products would not read the copies now (`PREPARED_INFERENCE_WEIGHTS` off, gradients, autocast, tracing or
    compiling): what was made from them must not stand in then. What is kept under one kernel for single rows is kept
    apart from what is kept under the other (`single_row_products.openblas_applies`, which follows the thread
    counts)."""
    prepared = _PREPARED_WEIGHTS.get(layer)
    if prepared is None or not _prepared_products_enabled():
        return None
    return prepared.derived.setdefault(openblas_applies(), {})


def _prepared_products_enabled() -> bool:
    """The conditions of `_prepared_inference_applies` that are the same for every layer, gradients off."""
    return (PREPARED_INFERENCE_WEIGHTS and not torch.is_grad_enabled() and _zoo_kernels_enabled()
            and not torch.jit.is_tracing())


def prepared_copies_state(layers: Sequence[nn.Linear]) -> tuple | None:
    """What the products that `inference_product` and `inference_stacked_product` look up for `layers` read: each
    layer's prepared copies (the objects themselves) and its parameters' state (`_parameters_state`), or None where a
    layer has none (outside `prepared_inference_weights`). Products looked up just after this was taken read what a
    lookup would read for as long as `prepared_copies_unchanged` holds."""
    copies = _prepared_copies(layers)
    return None if copies is None else (copies, _parameters_state(_parameters_of(layers)))


def prepared_copies_unchanged(state: tuple, layers: Sequence[nn.Linear]) -> bool:
    """Whether `layers` have the prepared copies they had when `state` (`prepared_copies_state`) was taken, and their
    parameters no change PyTorch counts since."""
    copies = _prepared_copies(layers)
    return copies is not None and same_objects(copies, state[0]) and _unchanged(state[1], _parameters_of(layers))


def _prepared_copies(layers: Sequence[nn.Linear]) -> tuple | None:
    copies: list[Any] = []
    for layer in layers:
        prepared = _PREPARED_WEIGHTS.get(layer)
        if prepared is None:
            return None
        stacked = prepared.stacked
        copies += (prepared, prepared.transposed, prepared.packed, stacked,
                   None if stacked is None else stacked.prepared.transposed,
                   None if stacked is None else stacked.prepared.packed)
    return tuple(copies)


def _parameters_of(layers: Sequence[nn.Linear]) -> list[torch.Tensor]:
    # Read from the modules' own dicts: `nn.Module.__getattr__` would take most of a decoding call's check here.
    return [parameter for layer in layers
            for parameter in (layer._parameters.get("weight"), layer._parameters.get("bias")) if parameter is not None]


def same_objects(first: Sequence[Any], second: Sequence[Any]) -> bool:
    """Whether two sequences hold the same objects (identity, not equality: tensors among them), in order."""
    return len(first) == len(second) and all(one is other for one, other in zip(first, second, strict=True))


def _product_reading_copy(prepared: PreparedWeight, bias: torch.Tensor | None, made_from: Callable[[], torch.Tensor],
                          rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The product with the copy `prepared` holds for `rows` rows (made now from `made_from()` when none suits), read
    as `_product_from_copy` reads it, for 2-D inputs."""
    if prepared.packed is None and (prepared.transposed is None or rows != 1):
        _make_copy(made_from(), prepared, rows)
    packed, transposed = prepared.packed, prepared.transposed  # read once (threads)

    def other_rows(inputs: torch.Tensor) -> torch.Tensor:
        """Inputs the copy read above does not suit, or no copy (another thread was replacing it): as the layers'
        own calls do."""
        return _product_making_copy(inputs, prepared, bias, made_from)

    if packed is not None:
        return lambda inputs: torch.ops.mkldnn._linear_pointwise(inputs, packed, bias, "none", [], "")
    if transposed is None:
        return other_rows
    one_row = row_product(transposed, bias)
    return lambda inputs: one_row(inputs) if inputs.shape[0] == 1 else other_rows(inputs)


__all__ = ["Linear", "ONEDNN_MIN_ROWS", "OneDNNBlockLinearFunction", "OneDNNLinearFunction", "PREPARED_INFERENCE_WEIGHTS",
           "any_runs_more_than_forward", "inference_memo", "inference_product", "inference_stacked_product",
           "linear_gradients", "onednn_applies", "onednn_product", "prepared_copies_state", "prepared_copies_unchanged",
           "prepared_inference_weights",
           "prepared_stacked_products", "products_of_concatenated_inputs", "runs_more_than_forward", "same_objects",
           "stacked_products"]
