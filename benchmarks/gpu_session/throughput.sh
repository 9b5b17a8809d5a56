#!/usr/bin/env bash
# Runs on a lent GPU machine (the device tool, `carry: [".whl", ".gpurun"]`, prepared by prepare.sh): bf16 training
# throughput of the baseline and each method at Transformer-base size, token batches of 32,768, layers compiled
# (FlexAttention for the score modifications), interleaved rounds; the result JSON and the log go to $OUT.
#
#   HF_SRCFEAT_CODE_VERSION=<commit> bash benchmarks/gpu_session/throughput.sh [more gpu_throughput options]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/site
# The wheels that fit this machine's Python (.whl holds regex and multiprocess for several).
python3 -m pip install --quiet --no-index --find-links .whl --no-deps --target /tmp/site transformers datasets \
  evaluate dill multiprocess regex tokenizers safetensors huggingface_hub accelerate 2>&1 | tail -3
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export HF_SRCFEAT_CODE_VERSION=${HF_SRCFEAT_CODE_VERSION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -X faulthandler -m benchmarks.gpu_throughput --output "$OUT/gpu_throughput.json" \
  --tokenizer .gpurun/tokenizer --source_conllu .gpurun/parses/train.en.conllu.gz --data_dir .gpurun/multi30k \
  --sizes base --pairs 29000 --compile --max_tokens 32768 --warmup 16 --steps 48 --rounds 8 --pin_memory \
  --pad_to_multiple_of 8 "$@" 2>&1 | tee "$OUT/gpu_throughput.log"
