"""Dynamic int8 quantization for CPU decoding: the linear layers' weights stored as int8 and their inputs quantized
on the fly per batch (PyTorch's `quantize_dynamic`), which every model type takes, since all of its matrix products
with weights go through `nn.Linear`. Translations may differ from float32 ones where two candidates score almost
alike (`benchmarks/measure_quantization.py` measures how often)."""

from __future__ import annotations

import warnings

QUANTIZATIONS = ("int8",)


def quantize_linear_layers(model, quantization: str = "int8"):
    """`model` (on the CPU, float32) with its `nn.Linear` layers quantized to int8 in place; returned for chaining.

    The embeddings and the output projection tied to them stay float32 (a tied weight is shared with an embedding
    table, which dynamic quantization does not cover)."""
    import torch

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {list(QUANTIZATIONS)}, got {quantization!r}.")
    parameter = next(model.parameters())
    if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
        raise ValueError(f"int8 dynamic quantization runs on the CPU from float32 weights; the model is "
                         f"{parameter.dtype} on {parameter.device}.")
    embedding_tables = {id(module.weight) for module in model.modules() if isinstance(module, torch.nn.Embedding)}
    names = {name for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and id(module.weight) not in embedding_tables}
    for name, module in model.named_modules():
        if name in names:
            # The backbone's `Linear` only adds a float32 kernel choice; `quantize_dynamic` swaps exact nn.Linear.
            # The layers left float32 (the tied output projection) keep it.
            module.__class__ = torch.nn.Linear
    with warnings.catch_warnings():
        # torch 2.13 marks its quantized tensor types as deprecated in favour of torchao, yet they are what
        # `quantize_dynamic` builds and they work; the warning would come with every translate --quantize run.
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization.*deprecated", category=DeprecationWarning)
        return torch.ao.quantization.quantize_dynamic(model, names, dtype=torch.qint8, inplace=True)

