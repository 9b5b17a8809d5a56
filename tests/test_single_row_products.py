"""One-row products through numpy's OpenBLAS (`hf_srcfeat.single_row_products`): where they apply, that every path
multiplying one row by a prepared copy uses the same kernel, which rows stay with PyTorch, and that what is kept for
later calls follows the kernel."""

import numpy
import pytest
import torch
from threadpoolctl import threadpool_limits
from torch.utils._python_dispatch import TorchDispatchMode

from hf_srcfeat import linear, single_row_products
from hf_srcfeat.single_row_products import openblas_applies, set_cpu_threads

needs_openblas = pytest.mark.skipif(not single_row_products._loaded_openblas(),
                                    reason="numpy's BLAS is not OpenBLAS here")


@pytest.fixture
def one_thread():
    """PyTorch and every BLAS on one thread each (as conftest starts them), restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1, user_api="blas"):
        yield
    torch.set_num_threads(threads)


@needs_openblas
def test_openblas_multiplies_single_rows_only_while_it_and_pytorch_run_one_thread_each(one_thread, monkeypatch):
    assert openblas_applies()
    with threadpool_limits(2, user_api="blas"):  # more cores than PyTorch was given
        assert not openblas_applies()
    torch.set_num_threads(2)
    assert not openblas_applies()
    with threadpool_limits(2, user_api="blas"):  # two pools on the same cores
        assert not openblas_applies()
    set_cpu_threads(1)
    assert openblas_applies()
    monkeypatch.setattr(single_row_products, "OPENBLAS_SINGLE_ROWS", False)
    assert not openblas_applies()


@pytest.mark.parametrize("reported", [{"name": "mkl-sdl"}, None])
def test_a_numpy_without_openblas_or_that_does_not_say_leaves_single_rows_to_pytorch(one_thread, monkeypatch,
                                                                                     reported):
    def show_config(mode: str = "stdout"):
        if reported is None:
            raise TypeError("show_config() got an unexpected keyword argument 'mode'")  # numpy before 1.25
        return {"Build Dependencies": {"blas": reported}}

    monkeypatch.setattr(numpy, "show_config", show_config)
    single_row_products._loaded_openblas.cache_clear()
    try:
        assert not openblas_applies()
        weight, row = torch.randn(8, 4), torch.randn(1, 8)
        assert torch.equal(single_row_products.row_product(weight, None)(row), torch.mm(row, weight))
    finally:
        single_row_products._loaded_openblas.cache_clear()


def test_without_threadpoolctl_single_rows_stay_with_pytorch(one_thread, monkeypatch):
    # A published model's code may run where only Transformers' dependencies are installed.
    monkeypatch.setattr(single_row_products, "threadpoolctl", None)
    single_row_products._loaded_openblas.cache_clear()
    try:
        assert not openblas_applies()
        set_cpu_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        single_row_products._loaded_openblas.cache_clear()


@needs_openblas
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_and_a_looked_up_product_multiply_one_row_by_the_kernel_chosen(one_thread, monkeypatch, bias):
    torch.manual_seed(0)
    layer = linear.Linear(256, 768, bias=bias)
    row = torch.randn(1, 256)
    transposed = layer.weight.detach().t().contiguous()
    by_kernel = {  # each kernel's own result, to the bit
        True: torch.from_numpy(row.numpy() @ transposed.numpy()),
        False: torch.mm(row, transposed) if not bias else torch.addmm(layer.bias.detach(), row, transposed)}
    if bias:
        by_kernel[True] += layer.bias.detach()
    assert not torch.equal(by_kernel[True], by_kernel[False])  # they round differently: the choice shows
    with torch.no_grad():
        for openblas in (True, False):
            monkeypatch.setattr(single_row_products, "OPENBLAS_SINGLE_ROWS", openblas)
            with linear.prepared_inference_weights(layer):
                from_layer, looked_up = layer(row), linear.inference_product(layer, rows=1)(row)
                assert linear._PREPARED_WEIGHTS[layer].transposed is not None  # the one-row copy was read
            assert torch.equal(from_layer, by_kernel[openblas]) and torch.equal(looked_up, by_kernel[openblas])
            torch.testing.assert_close(from_layer, torch.nn.functional.linear(row, layer.weight, layer.bias))


class CountedOperations(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@needs_openblas
def test_rows_numpy_may_not_read_are_multiplied_by_pytorch(one_thread):
    torch.manual_seed(0)
    layer = linear.Linear(64, 32)
    rows = torch.randn(3, 64)
    expected = torch.nn.functional.linear(rows, layer.weight, layer.bias)
    with linear.prepared_inference_weights(layer):
        with torch.no_grad():
            layer(rows[:1])  # the one-row copy
            # A dispatch mode (tracing, timers, FLOP counters) sees the product
            with CountedOperations() as counted:
                torch.testing.assert_close(layer(rows[:1]), expected[:1])
            assert "aten.addmm" in counted.names
            # Under vmap each call sees a functorch-wrapped row of 64 values
            torch.testing.assert_close(torch.func.vmap(layer)(rows), expected)
        # A looked-up product (of frozen weights) given a row that autograd tracks keeps tracking it
        layer.requires_grad_(False)
        product = linear.inference_product(layer, rows=1)
        assert product != layer.forward  # the prepared copy's product
        tracked = rows[:1].clone().requires_grad_()
        outputs = product(tracked)
        outputs.sum().backward()
        torch.testing.assert_close(outputs.detach(), expected[:1])
        torch.testing.assert_close(tracked.grad, layer.weight.detach().sum(0, keepdim=True))


@needs_openblas
def test_what_a_decoding_call_keeps_is_kept_per_kernel(trained_baseline, subword_tokenizer, test_sentences,
                                                       one_thread, monkeypatch):
    model = trained_baseline[0]
    batch = subword_tokenizer(test_sentences[:1], return_tensors="pt")
    with torch.no_grad(), linear.prepared_inference_weights(model):
        with_openblas = model.generate(**batch, max_new_tokens=8, num_beams=1, do_sample=False)
        kept_with_openblas = linear.inference_memo(model.lm_head)
        monkeypatch.setattr(single_row_products, "OPENBLAS_SINGLE_ROWS", False)
        with_mkl = model.generate(**batch, max_new_tokens=8, num_beams=1, do_sample=False)
        kept_with_mkl = linear.inference_memo(model.lm_head)
    assert kept_with_openblas and kept_with_mkl and kept_with_openblas is not kept_with_mkl
    assert torch.equal(with_openblas, with_mkl)  # the same tokens: the kernels differ by rounding only
