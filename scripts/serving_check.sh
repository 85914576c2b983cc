#!/usr/bin/env bash
# The serving check on one GPU (an H200): measure Llama-3-8B's step profile in
# bf16, then run transformers (random weights built from the config: nothing is downloaded) on 64 requests,
# prompts of 512 tokens, outputs exponential with mean 128 capped at 512, seed 0, burst arrivals, under
# static:batch=16 and continuous batching, and compare with the simulation on that profile.  The engine
# overhead is calibrated on a separate 32-request workload first.  Budgeted to about 3 minutes on an H200.
#
#   scripts/serving_check.sh OUTDIR      (writes profile-llama-3-8b.json, validate/validate.json, serving_check.log)
#   GPUBENCH_DEVICE=cpu GPUBENCH_MODEL_CONFIG=tests/data/tiny-llama-config.json scripts/serving_check.sh /tmp/x
#                                        (a dry run of the script without a GPU, on the tiny model)
#
# scripts/gpu_check.sh runs it as its last step when time is left.
set -uo pipefail
# shellcheck source=scripts/check_common.sh
source "$(dirname "$0")/check_common.sh" "${1:?usage: scripts/serving_check.sh OUTDIR}" serving_check.log
if [ -n "${GPUBENCH_MODEL_CONFIG:-}" ]; then
  MODEL=(--hf-config "$GPUBENCH_MODEL_CONFIG"); PROMPT=fixed:16; OUTPUT=exp:16:40; TOKENS=256; CONTEXT=64
else
  MODEL=(--model llama-3-8b); PROMPT=fixed:512; OUTPUT=exp:128:512; TOKENS=8192; CONTEXT=1024
fi
PROFILE="$OUT/profile-llama-3-8b.json"
rm -f "$PROFILE.partial"
# 16 prompts of 512 tokens are one 8192-token prefill step: the token grid must reach it.
step profile 120 python3 -m microbench.cli profile "${MODEL[@]}" --dtype bf16 --device "$DEVICE" \
  --max-tokens "$TOKENS" --max-context "$CONTEXT" --max-batch 64 --budget 0.1 -o "$PROFILE"
# The engine as transformers runs it by default (eager) first; then, on a GPU, with its CUDA graphs and a
# compiled static decode (--engine-mode graphs), into its own folder: what the graphs run adds comes after the
# eager evidence, so a caller's time limit that cuts it short keeps the eager run.
VALIDATE=(python3 -m microbench.cli validate --engine transformers --profile "$PROFILE" --device "$DEVICE"
  --requests 64 --prompt "$PROMPT" --output "$OUTPUT" --seed 0 --arrivals burst --calibration-requests 32
  --static-batch 16 --max-batch 64 --budget-tokens "$TOKENS" --repeats 1 --clock wall --fail-above 0.10)
step validate 150 "${VALIDATE[@]}" --engine-mode eager -o "$OUT/validate"
rc=$?
if [ "$DEVICE" != cpu ]; then
  step graphs 180 "${VALIDATE[@]}" --engine-mode graphs -o "$OUT/validate-graphs"
fi
cat "$STEPS" >>"$LOG"
rm -f "$STEPS"
echo "validate rc=$rc (1: a prediction is off by more than 10%)" | tee -a "$LOG"
grep -E "^(engine|static|continuous|total_s|tokens_per_s|ttft_p90|tpot_p90|e2e_p90|itl_p99)|ratio|total time|=== (validate|graphs)" "$LOG" | tail -32
exit "$rc"
