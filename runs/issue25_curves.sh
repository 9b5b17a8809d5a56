#!/bin/bash
# Issue 25.3: train the benchmark systems whose run folders are gone (from a worktree at a fixed commit, so edits
# in the main checkout do not reach a running job), then measure their parse-robustness curves.
# usage: issue25_curves.sh SYSTEM:SEED:RESULTS_DIR [...]   (one lane; run two lanes side by side on 2 cores)
cd /work/wt_bench
export PYTHONPATH=/work/wt_bench OMP_NUM_THREADS=1 HF_SRCFEAT_MULTI30K_DIR=/work/shared/data/multi30k \
  HF_SRCFEAT_STANZA_DIR=/work/shared/stanza_resources HF_SRCFEAT_MULTI30K_BLIND_DIR=/work/shared/data/multi30k_blind
PY=/work/main/.venv/bin/python
COMMON="--runs_dir /work/main/runs/benchmark --tokenizer /work/main/runs/benchmark/tokenizer"
for job in "$@"; do
  IFS=: read -r system seed results <<< "$job"
  [ -e /work/main/runs/benchmark/STOP_CURVES ] && exit 0
  echo "$(date -u +%FT%TZ) start $system seed $seed -> $results"
  $PY training/benchmark.py run --systems "$system" --seeds "$seed" $COMMON --results_dir "/work/main/$results" \
    $( [ "$results" != training/results/benchmark ] && echo --defer_significance ) || continue
  # the robustness script of the newest worktree (its results file is merged on write, so lanes may share it)
  robust=/work/wt_bench; [ -d /work/wt_robust ] && robust=/work/wt_robust
  (cd $robust && PYTHONPATH=$robust $PY training/parse_robustness.py --runs "$system/seed$seed" \
     --runs_dir /work/main/runs/benchmark --output /work/main/training/results/parse_robustness.json)
  echo "$(date -u +%FT%TZ) done $system seed $seed"
done
