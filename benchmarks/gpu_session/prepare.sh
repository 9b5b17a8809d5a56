#!/usr/bin/env bash
# Prepares, on the CPU machine, what a lent GPU machine (which starts bare and reaches no network) needs to measure
# training throughput: .gpurun/ (Multi30k training pairs, their Stanza parses, the benchmark's tokenizer) and .whl/
# (the Python packages the device's own torch lacks). Both folders are ignored by git: the device tool carries them
# (`carry: [".whl", ".gpurun"]`), and `benchmarks/gpu_session/throughput.sh` runs there.
#
#   bash benchmarks/gpu_session/prepare.sh   # about 5 minutes on 2 cores beside a test run: mostly the parse of the
#                                            # 28,991 sources (about 100 sentences/s with --num_proc 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${HF_SRCFEAT_MULTI30K_DIR:-../shared/data/multi30k}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p .gpurun/multi30k .gpurun/parses .whl
cp "$DATA"/train.en.gz "$DATA"/train.de.gz .gpurun/multi30k/
if [ ! -s .gpurun/parses/train.en.conllu.gz ]; then
  .venv/bin/hf-srcfeat-annotate --input .gpurun/multi30k/train.en.gz --output .gpurun/parses/train.en.conllu.gz \
    --num_proc 2
fi
if [ ! -s .gpurun/tokenizer/tokenizer.json ]; then
  .venv/bin/python - <<'PY'
import gzip
from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

def lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return [line.rstrip("\n") for line in stream]

sources, targets = lines(".gpurun/multi30k/train.en.gz"), lines(".gpurun/multi30k/train.de.gz")
parses = list(read_conllu(".gpurun/parses/train.en.conllu.gz"))
tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=8000, source_annotations=parses)
tokenizer.save_pretrained(".gpurun/tokenizer")
PY
fi
# The versions this checkout is tested with; the device brings torch (with CUDA) and its dependencies.
versions=$(.venv/bin/pip freeze | grep -i -E '^(transformers|datasets|evaluate|dill|tokenizers|safetensors|huggingface.hub|accelerate)==')
.venv/bin/pip download --quiet --no-deps --dest .whl $versions
# Built per Python version (the device's is not known here): regex (the newest built for each) and multiprocess.
for python in 3.10 3.11 3.12 3.13; do
  .venv/bin/pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version "$python" --dest .whl regex "$(.venv/bin/pip freeze | grep -i '^multiprocess==')"
done
echo "prepared: $(du -sh .gpurun | cut -f1) in .gpurun, $(ls .whl | wc -l) wheels in .whl"
