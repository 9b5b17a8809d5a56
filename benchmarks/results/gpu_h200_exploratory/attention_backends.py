"""Exploratory: attention forward+backward for a token batch's shapes (1,100 sentences of <= 32 tokens, 8 heads of
64, bf16, padding mask) by each SDPA backend and FlexAttention ."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.manual_seed(0)
B, H, S, D = 1100, 8, 32, 64
lengths = torch.randint(8, S + 1, (B,), device="cuda")
keep = torch.arange(S, device="cuda")[None, :] < lengths[:, None]  # [B, S]
bool_mask = keep[:, None, None, :].expand(B, 1, S, S)
float_mask = torch.zeros(B, 1, S, S, device="cuda", dtype=torch.bfloat16).masked_fill(~bool_mask, torch.finfo(torch.bfloat16).min)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
grad = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)


def bench(fn, label):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    print(f"{label:40s} {times[len(times)//2]*1000:8.0f} us fwd+bwd", flush=True)


def sdpa(backend, mask):
    def run():
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.backward(grad)
    return run

reference = None
for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
    for mask_name, mask in (("bool", bool_mask), ("float", float_mask)):
        try:
            bench(sdpa(backend, mask), f"{backend.name} {mask_name} mask")
        except Exception as error:
            print(f"{backend.name} {mask_name}: {type(error).__name__}: {str(error)[:150]}")
try:
    bench(sdpa(SDPBackend.FLASH_ATTENTION, None), "FLASH no mask (lower bound)")
except Exception as error:
    print("flash", error)
block_mask = create_block_mask(lambda b, h, qi, ki: keep[b, ki], B, None, S, S, device="cuda")
compiled_flex = torch.compile(flex_attention)
def flex():
    compiled_flex(q, k, v, block_mask=block_mask).backward(grad)
bench(flex, "flex_attention block mask")
# outputs agree?
with sdpa_kernel([SDPBackend.MATH]):
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bool_mask)
for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask).float()
    print(backend.name, "rel err", float((out - ref).norm() / ref.norm()))
print("flex rel err", float((compiled_flex(q, k, v, block_mask=block_mask).float() - ref).norm() / ref.norm()))
