"""Exploratory: where a compiled base-size training step spends its time on the GPU."""
import time

import torch

from benchmarks import gpu_throughput as g

args = g.argparse.Namespace(pairs=29000, tokenizer=".gpu/tokenizer", source_conllu=".gpu/parses/train.en.conllu.gz",
                            data_dir=".gpu/multi30k", device="cuda")
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    args.pairs = 2000
tokenizer, rows, _ = g.encoded_pairs(args)
batches = g.token_batches(tokenizer, rows, 32768 if device == "cuda" else 4096, seed=1)
model = g.build("baseline", "base" if device == "cuda" else "benchmark", tokenizer)
g.compile_layers(model)
trainee = g.Trainee(model, device)
for batch in batches:
    trainee.step(batch)
g.synchronize(device)
for label, chunk in (("steady", batches[:8]),):
    g.synchronize(device)
    start = time.perf_counter()
    for batch in chunk:
        trainee.step(batch)
    g.synchronize(device)
    print(label, "ms/step", (time.perf_counter() - start) / len(chunk) * 1000, flush=True)
activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
with torch.profiler.profile(activities=activities) as prof:
    for batch in batches[:4]:
        trainee.step(batch)
    g.synchronize(device)
averages = prof.key_averages()
sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
print(averages.table(sort_by=sort, row_limit=40, max_name_column_width=70))
print(averages.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70))
# Host syncs: count cudaStreamSynchronize / cudaMemcpy calls
for event in averages:
    if "Synchronize" in event.key or "Memcpy" in event.key or "item" in event.key or "local_scalar" in event.key:
        print("SYNC", event.key, event.count, round(event.cpu_time_total / 1000, 2), "ms")
