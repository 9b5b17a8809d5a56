"""Where the host's time goes in a whole-compiled fusing_diverse training step (it keeps the GPU busy for only
about half of its profiled step, the baseline for two thirds): torch.profiler with CPU and CUDA activities over 2
steps after a warm-up, each system's operators by self CPU time, and the recurrence operators' CPU and CUDA time.
Run from the repository root: python3 .gpurun/diverse_host_time.py OUTPUT.json [cuda|cpu] [base|benchmark]"""
import argparse
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import gpu_throughput as gt

output, device = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "cuda")
size = sys.argv[3] if len(sys.argv) > 3 else "base"
args = argparse.Namespace(tokenizer=".gpurun/tokenizer", source_conllu=".gpurun/parses/train.en.conllu.gz",
                          data_dir=".gpurun/multi30k", pairs=4000 if size == "base" else 600, device=device)
tokenizer, rows, _ = gt.encoded_pairs(args)
batches = gt.token_batches(tokenizer, rows, 32768 if size == "base" else 1024, seed=1)
results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
           "size": size, "batches": len(batches)}
for system in ("baseline", "fusing_diverse"):
    trainee = gt.Trainee(gt.build(system, size, tokenizer), device, whole_model=True)
    start = time.perf_counter()
    for index in range(8 if size == "base" else 3):
        trainee.step(batches[index % len(batches)])
    gt.synchronize(device)
    warmup = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for batch in batches[:2]:
            trainee.step(batch)
        gt.synchronize(device)
        wall = (time.perf_counter() - start) / 2
    events = prof.key_averages()
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:30]
    rows_ = [{"name": e.key[:160], "calls_per_step": e.count / 2, "self_cpu_ms_per_step": round(e.self_cpu_time_total / 2e3, 3),
              "cpu_total_ms_per_step": round(e.cpu_time_total / 2e3, 3),
              "device_ms_per_step": round(getattr(e, "device_time_total", 0) / 2e3, 3)} for e in top]
    recurrence = [{"name": e.key, "calls_per_step": e.count / 2, "cpu_total_ms_per_step": round(e.cpu_time_total / 2e3, 3),
                   "device_ms_per_step": round(getattr(e, "device_time_total", 0) / 2e3, 3)}
                  for e in events if "recurrence" in e.key or "rnn" in e.key.lower() or "gru" in e.key.lower()]
    results[system] = {"warmup_seconds": round(warmup, 1), "profiled_wall_ms_per_step": round(wall * 1e3, 2),
                       "top_self_cpu": rows_, "recurrence": recurrence}
    print(system, "warm-up", round(warmup, 1), "s; profiled step", round(wall * 1e3, 1), "ms", flush=True)
    for row in rows_[:25]:
        print(f"  {row['self_cpu_ms_per_step']:9.3f} ms self CPU {row['cpu_total_ms_per_step']:9.3f} total "
              f"{row['device_ms_per_step']:8.3f} device {row['calls_per_step']:6.1f} calls  {row['name'][:90]}")
    for row in recurrence:
        print("  recurrence:", row)
    json.dump(results, open(output, "w"), indent=1)
    del trainee
