"""One-row products through numpy's OpenBLAS (`hf_srcfeat.single_row_products`): where they apply, that every path
multiplying one row by a prepared copy uses the same kernel, and that what is kept for later calls follows it."""

import pytest
import torch
from threadpoolctl import threadpool_limits

from hf_srcfeat import linear, single_row_products
from hf_srcfeat.single_row_products import openblas_applies, set_cpu_threads

needs_openblas = pytest.mark.skipif(not single_row_products._loaded_openblas(),
                                    reason="numpy's BLAS is not OpenBLAS here")


@pytest.fixture
def one_thread():
    """PyTorch and OpenBLAS on one thread each (as the tests start them), restored after."""
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


@needs_openblas
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_and_a_looked_up_product_multiply_one_row_alike_with_either_kernel(one_thread, monkeypatch, bias):
    torch.manual_seed(0)
    layer = linear.Linear(256, 768, bias=bias)
    row = torch.randn(1, 256)
    with torch.no_grad():
        expected = torch.nn.functional.linear(row, layer.weight, layer.bias)
        outputs = {}
        for openblas in (True, False):
            monkeypatch.setattr(single_row_products, "OPENBLAS_SINGLE_ROWS", openblas)
            with linear.prepared_inference_weights(layer):
                from_layer, looked_up = layer(row), linear.inference_product(layer, rows=1)(row)
                assert linear._PREPARED_WEIGHTS[layer].transposed is not None  # the one-row copy was read
            assert torch.equal(from_layer, looked_up)  # the decoding loops' steps and the modules' path agree
            torch.testing.assert_close(from_layer, expected)
            outputs[openblas] = from_layer
    # The two kernels round differently (were they the same, the switch would change nothing)
    assert not torch.equal(outputs[True], outputs[False])


@needs_openblas
def test_rows_numpy_cannot_read_in_place_go_through_pytorch(one_thread):
    torch.manual_seed(0)
    layer = linear.Linear(64, 32)
    row = torch.randn(1, 64, requires_grad=True)  # tracked, but no gradient is being recorded
    with torch.no_grad(), linear.prepared_inference_weights(layer):
        torch.testing.assert_close(layer(row), torch.nn.functional.linear(row, layer.weight, layer.bias))
        # Under vmap each call sees a functorch-wrapped row of 64 values
        rows = torch.randn(3, 64)
        torch.testing.assert_close(torch.func.vmap(layer)(rows),
                                   torch.nn.functional.linear(rows, layer.weight, layer.bias))


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
    assert torch.equal(with_openblas, with_mkl)  # the same tokens, a sentence apart by rounding only
