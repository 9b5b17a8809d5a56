"""Second follow-up of dropout_layer_norm.py: the compiled post-norm sublayer's backward is slow only when dropout's
backward is fused with the reduction of LayerNorm's weight and bias gradients (dropout_layer_norm_variants.py).
Does stating the affine part apart (LayerNorm without weights, then * weight + bias) let inductor reduce the
gradients in a kernel of their own? The same kernel-time measurement. Run: python3 dropout_layer_norm_affine.py OUT.json"""
import json
import sys
import time

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F

torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
D = 512
shape = (1100, 29, D)  # 31,900 positions
warm_shape = (1000, 31, D)

def sublayer(x, y, w, b):
    return F.layer_norm(x + F.dropout(y, 0.1, True), (D,), w, b)

def inputs(s, weight_gradients=True):
    x = torch.randn(s, device=dev, requires_grad=True)
    y = torch.randn(s, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(D, device=dev, requires_grad=weight_gradients)
    b = torch.zeros(D, device=dev, requires_grad=weight_gradients)
    return x, y, w, b

def timing(fn, s, reps=40, weight_gradients=True):
    args = inputs(s, weight_gradients)
    g = torch.randn(s, device=dev)
    for _ in range(5):
        fn(*args).backward(g)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(*args).backward(g)
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0
              and not any(mark in e.key for mark in ("Compiled", "##", "ProfilerStep", "autograd"))]
    kernel_us = sum(e.self_device_time_total for e in events)
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:4]:
        print("   ", round(e.self_device_time_total / reps, 1), e.count // reps, e.key[:110])
    return kernel_us / reps

n = shape[0] * shape[1] * D
min_bytes = n * (4 + 2 + 4) + n * (4 + 4 + 2 + 1)
results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": shape, "min_bytes": min_bytes}
def no_dropout(x, y, w, b):
    return F.layer_norm(x + y, (D,), w, b)

def fp32_dropout(x, y, w, b):
    return F.layer_norm(x + F.dropout(y.float(), 0.1, True), (D,), w, b)

def split_affine(x, y, w, b):
    return F.layer_norm(x + F.dropout(y, 0.1, True), (D,)) * w + b

def split_affine_no_dropout(x, y, w, b):
    return F.layer_norm(x + y, (D,)) * w + b

# The arrangement in the benchmark's (pre-norm) models: h + Dropout(LN(h) @ W), two sublayers in a row, so that
# one sublayer's LayerNorm backward meets the other's dropout backward as in the step's fused kernels.
W1 = (torch.randn(D, D, device=dev) * D ** -0.5).to(torch.bfloat16)
W2 = (torch.randn(D, D, device=dev) * D ** -0.5).to(torch.bfloat16)

def pre_norm_chain(x, y, w, b):
    h = x
    for W in (W1, W2):
        h = h + F.dropout(F.layer_norm(h, (D,), w, b).to(torch.bfloat16) @ W, 0.1, True)
    return h

def pre_norm_chain_no_dropout(x, y, w, b):
    h = x
    for W in (W1, W2):
        h = h + F.layer_norm(h, (D,), w, b).to(torch.bfloat16) @ W
    return h

variants = [("dynamic", lambda: torch.compile(sublayer, dynamic=True), {}),
            ("pre_norm_chain", lambda: torch.compile(pre_norm_chain, dynamic=True), {}),
            ("pre_norm_chain_no_dropout", lambda: torch.compile(pre_norm_chain_no_dropout, dynamic=True), {}),
            ("pre_norm_chain_no_weight_gradients", lambda: torch.compile(pre_norm_chain, dynamic=True), {}),
            ("dynamic_split_affine", lambda: torch.compile(split_affine, dynamic=True), {}),
            ("dynamic_split_affine_no_dropout", lambda: torch.compile(split_affine_no_dropout, dynamic=True), {}),
            ("dynamic_no_weight_gradients", lambda: torch.compile(sublayer, dynamic=True), {})]
for name, make, settings in variants:
    torch._dynamo.reset()
    start = time.perf_counter()
    with inductor_config.patch(settings):
        fn = make()
        if name.startswith("dynamic"):
            timing(fn, warm_shape, reps=2, weight_gradients=not name.endswith("no_weight_gradients"))
        us = timing(fn, shape, weight_gradients=not name.endswith("no_weight_gradients"))
    results[name] = {"kernel_microseconds": round(us, 1), "GB_per_s_min_traffic": round(min_bytes / us / 1e3, 1),
                     "seconds_incl_compile": round(time.perf_counter() - start, 1)}
    print(name, results[name], flush=True)
json.dump(results, open(sys.argv[1], "w"), indent=1)
