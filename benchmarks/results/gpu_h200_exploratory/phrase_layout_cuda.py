"""The phrase layout's pooling on CUDA equals the CPU's, values and gradients, under deterministic algorithms."""
import torch

from hf_srcfeat.modeling_phrase_rep import PhraseLayout

torch.manual_seed(0)
phrase_index = torch.tensor([[0, 0, 1, 1, 1, 2, -1], [0, 1, 1, 2, 2, 3, 3]])
for dtype in (torch.float32, torch.bfloat16):
    values = torch.randn(2, 7, 5, dtype=dtype, requires_grad=True)
    layout = PhraseLayout.from_phrase_index(phrase_index)
    on_cpu = [layout.max(values), layout.sum(values), layout.spread(layout.max(values))]
    gradients = torch.autograd.grad(sum(result.float().sum() for result in on_cpu), values)
    cuda_values = values.detach().cuda().requires_grad_()
    cuda_layout = PhraseLayout.from_phrase_index(phrase_index.cuda())
    torch.use_deterministic_algorithms(True)
    on_cuda = [cuda_layout.max(cuda_values), cuda_layout.sum(cuda_values),
               cuda_layout.spread(cuda_layout.max(cuda_values))]
    cuda_gradients = torch.autograd.grad(sum(result.float().sum() for result in on_cuda), cuda_values)
    torch.use_deterministic_algorithms(False)
    for expected, result in zip([*on_cpu, *gradients], [*on_cuda, *cuda_gradients], strict=True):
        torch.testing.assert_close(result.cpu(), expected.detach())
    print(dtype, "same on CUDA as on the CPU, deterministic algorithms on")
