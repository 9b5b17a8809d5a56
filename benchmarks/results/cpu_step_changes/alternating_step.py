"""One token batch's shipped CPU training step at the benchmark's size, alternating with the step with one change
undone (`benchmarks/undone_changes.py`), and one dropout call's forward and backward with either kind of mask.
Prints JSON. Run from the repository root, one thread, the allocator thresholds set:
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=8589934592 MALLOC_TOP_PAD_=268435456 OMP_NUM_THREADS=1 \
  PYTHONPATH=. python benchmarks/results/cpu_step_changes/alternating_step.py runs/quickstart \
  .gpu/parses/train.en.conllu.gz
(the output kept beside it came from that command with the repository on PYTHONPATH by an absolute path)."""
import json
import statistics
import sys
import time

import torch
from transformers import AutoTokenizer, DataCollatorForSeq2Seq

from benchmarks import benchmark
from benchmarks.batching_efficiency import MODEL_SIZES, source_annotations
from benchmarks.undone_changes import undone
from hf_srcfeat import dropout
from hf_srcfeat.commands import train
from hf_srcfeat.data.batching import TokenBudgetBatchSampler
from hf_srcfeat.data.multi30k import load_multi30k
from hf_srcfeat.process_memory import keep_freed_memory

tokenizer_folder, parses = sys.argv[1], sys.argv[2]
keep_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(1)
pairs = load_multi30k("train", "en", "de", None, limit=3000)
annotations = source_annotations(list(pairs["source"]), parses)
tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
encodings = tokenizer(annotations=annotations, text_target=list(pairs["target"]), truncation=True, max_length=128)
rows = [{name: encodings[name][index] for name in encodings} for index in range(len(annotations))]
lengths = [(len(row["input_ids"]), len(row["labels"])) for row in rows]
collate = DataCollatorForSeq2Seq(tokenizer)
batch = [collate([rows[index] for index in indices])
         for indices in TokenBudgetBatchSampler(lengths, 1024, seed=1)][3]
shared = benchmark.SHARED_ARGUMENTS
model_arguments = train.ModelArguments(**{**{key: shared[key] for key in (
    "d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "dropout", "label_smoothing",
    "layernorm_position")}, **MODEL_SIZES["benchmark"]})
model = train.build_model(model_arguments, tokenizer, seed=1).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def step() -> None:
    model(**batch, skip_logits=True).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def milliseconds(work, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1e3)
    return times


result = {"code_version": train.code_version(), "torch": torch.__version__, "threads": 1,
          "command": "PYTHONPATH=. python benchmarks/results/cpu_step_changes/alternating_step.py "
                     + " ".join(sys.argv[1:]),
          "data": "Multi30k train, first 3,000 pairs, the fourth token batch of 1,024 tokens (TokenBudgetBatchSampler "
                  "seed 1)", "batch": {"sentences": len(batch["labels"]), "source_length": batch["input_ids"].shape[1],
                    "target_length": batch["labels"].shape[1]}, "step_milliseconds": {}}
for _ in range(2):
    step()
for change in ("boolean_dropout_masks", "copied_loss_weight_gradient"):
    times: dict[str, list[float]] = {"shipped": [], "undone": []}
    for round_index in range(16):
        for arm in (("shipped", "undone") if round_index % 2 == 0 else ("undone", "shipped")):
            with undone(change if arm == "undone" else None):
                times[arm] += milliseconds(step, 1)
    result["step_milliseconds"][change] = {arm: {"median": round(statistics.median(values), 1),
                                                 "min": round(min(values), 1)} for arm, values in times.items()}
inputs, grad = torch.randn(1000, 256, requires_grad=True), torch.randn(1000, 256)
dropout_times: dict[str, list[float]] = {"shipped": [], "boolean_dropout_masks": []}
for _ in range(10):
    for arm in dropout_times:
        with undone(arm if arm != "shipped" else None):
            dropout_times[arm] += milliseconds(lambda: dropout.DropoutFunction.apply(inputs, 0.1).backward(grad), 50)
result["dropout_forward_backward_1000x256_milliseconds"] = {
    arm: {"median": round(statistics.median(values), 3), "min": round(min(values), 3)}
    for arm, values in dropout_times.items()}
print(json.dumps(result, indent=1))
