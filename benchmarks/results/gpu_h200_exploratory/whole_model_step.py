"""Device diagnosis: the whole forward with the loss as one compiled graph (mode argv[1]), step by step."""
import argparse
import faulthandler
import sys
import time

import torch

from benchmarks import gpu_throughput as g

faulthandler.enable()
start = time.time()
args = argparse.Namespace(data_dir=".gpurun/multi30k", pairs=8000, source_conllu=".gpurun/parses/train.en.conllu.gz",
                          device="cuda", tokenizer=".gpurun/tokenizer")
tokenizer, rows, _ = g.encoded_pairs(args)
batches = [{k: v.pin_memory() for k, v in b.items()}
           for b in g.token_batches(tokenizer, rows, 32768, seed=1, pad_to_multiple_of=8)]
print("batches", [tuple(b["labels"].shape) for b in batches], round(time.time() - start, 1), flush=True)
torch.backends.cuda.matmul.allow_tf32 = True
mode = None if sys.argv[1] == "default" else sys.argv[1]
trainee = g.Trainee(g.build("baseline", "base", tokenizer), "cuda", whole_model=True, mode=mode)
for rep in range(3):
    for index, batch in enumerate(batches):
        step = time.time()
        trainee.step(batch)
        torch.cuda.synchronize()
        print(rep, index, tuple(batch["labels"].shape), f"{time.time() - step:.3f} s, at {time.time() - start:.0f} s",
              flush=True)
tokens, step = 0, time.time()
for batch in batches * 3:
    trainee.step(batch)
    tokens += int((batch["labels"] != -100).sum())
torch.cuda.synchronize()
print("timed", len(batches) * 3, "steps", f"{tokens / (time.time() - step):,.0f} target tokens/s", flush=True)
print("cudagraph skips", dict(torch._dynamo.utils.counters["inductor"]), flush=True)
