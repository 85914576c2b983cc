#!/usr/bin/env bash
# The setup of the "23x over naive static batching" claim (Anyscale 2023: OPT-13B on an A100 40GB), simulated
# on the SKU's achievable ceilings: 1,000 prompts of 512 tokens, outputs exponential with mean 128 capped at
# 32/128/512/1536, all arriving at once.  Per cap: static batching at the largest batch whose full-length KV cache fits
# (15,837 tokens of KV fit beside the 25.7 GB of fp16 weights in 90% of the board's 40,960 MiB: batch =
# 15837 // (512 + cap)),
# paged continuous batching (vLLM-like: admission by KV blocks), and continuous batching with no memory limit
# (what the kernels alone would give if the KV cache were free).  Kernels only (--engine none): the claim's gap is
# what an engine's own time adds, which the doc works out from these.  Writes OUTDIR/cap-N/ (the committed run is
# results/opt13b-a100-40gb/: pass that folder to redraw it).
#   bash scripts/opt13b_23x.sh OUTDIR        (PYTHON=... picks the interpreter; python3 by default)
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: scripts/opt13b_23x.sh OUTDIR" >&2
  exit 2
fi
python=${PYTHON:-python3}
case $1 in /*) out=$1 ;; *) out=$PWD/$1 ;; esac
cd "$(dirname "$0")/.."
for cap in 32 128 512 1536; do
  batch=$((15837 / (512 + cap)))
  report=--no-report
  [ "$cap" = 1536 ] && report=
  echo "== cap $cap: static batch $batch"
  $python -m microbench.cli simulate --analytic --gpu a100-sxm-40gb --model opt-13b --dtype fp16 \
    --requests 1000 --prompt fixed:512 --output "exp:128:$cap" --arrivals burst --seed 0 \
    --policy "static:batch=$batch" --policy paged --policy continuous --engine none $report -o "$out/cap-$cap"
done
