#!/usr/bin/env bash
# The serving check on one GPU (an H200): measure Llama-3-8B's step profile in bf16, then run transformers
# (random weights built from the config: nothing is downloaded) on 32 requests, prompts of 512 tokens, outputs
# exponential with mean 64 capped at 256, seed 0, burst arrivals, under static:batch=16 and continuous batching,
# and compare with the simulation on that profile.  The engine overhead is calibrated on a separate 16-request
# workload first.  Then, when time is left (GPUBENCH_SERVING_BUDGET_S, the seconds a caller allows; unset: no
# limit), the same with the engine's CUDA graphs (--engine-mode graphs), which compiles first.
# Estimated on an H200 from eager transformers' ~30 ms per Llama-3-8B step (Python-bound): the profile ~1 minute,
# the eager validate ~1.5 minutes (about 2,000 engine steps), the graphs validate 2-4 minutes more (compiling).
#
#   scripts/serving_check.sh OUTDIR      (writes profile-llama-3-8b.json, validate/validate.json, serving_check.log)
#   GPUBENCH_DEVICE=cpu GPUBENCH_MODEL_CONFIG=tests/data/tiny-llama-config.json scripts/serving_check.sh /tmp/x
#                                        (a dry run of the script without a GPU, on the tiny model)
#
# scripts/gpu_check.sh runs it as its last step, with what is left of its budget, and sets its timeouts from its
# time plan (scripts/gpu_check_plan.py): GPUBENCH_SERVING_PROFILE_S and GPUBENCH_SERVING_VALIDATE_S (default 120 and
# 150 s on a GPU, four times that on a CPU), GPUBENCH_SERVING_GRAPHS (1, the default on a GPU: the graphs validate
# is planned and, without GRAPHS_MIN_S left of GPUBENCH_SERVING_BUDGET_S, skipped as a failure; 0: not planned).
# Exit status: 1 when any step failed, was cut or was skipped for want of time (the step table, printed last,
# says which); 0 when every planned step passed.
set -uo pipefail
# shellcheck source=scripts/check_common.sh
source "$(dirname "$0")/check_common.sh" "${1:?usage: scripts/serving_check.sh OUTDIR}" serving_check.log
if [ -n "${GPUBENCH_MODEL_CONFIG:-}" ]; then
  MODEL=(--hf-config "$GPUBENCH_MODEL_CONFIG"); PROMPT=fixed:16; OUTPUT=exp:16:40; TOKENS=256; CONTEXT=64
else
  MODEL=(--model llama-3-8b); PROMPT=fixed:512; OUTPUT=exp:64:256; TOKENS=8192; CONTEXT=768
fi
# A CPU times the profile's kernels and the engine's steps alike on one torch thread's CPU clock (validate's CPU
# default): on the wall clock with torch's threads, a busy machine's other processes and each kernel's wait for
# its second thread made the profile's kernels longer than the engine steps that ran them.  A GPU: the wall clock.
# A CPU dry run also gates as the CPU's own end-to-end test does (tests/test_validate_engine.py: 5 repeats, 15%):
# one repeat of a tiny model on a shared 2-core machine is noise against a 10% gate.
if [ "$DEVICE" = cpu ]; then
  TIMING=(--clock thread-cpu --threads 1); CLOCK=thread-cpu; GATE=(--repeats 5 --fail-above 0.15); SCALE=4
else
  TIMING=(); CLOCK=wall; GATE=(--repeats 1 --fail-above 0.10); SCALE=1
fi
PROFILE="$OUT/profile-llama-3-8b.json"
rm -f "$PROFILE.partial"
# 16 prompts of 512 tokens are one 8192-token prefill step: the token grid must reach it.
step profile "${GPUBENCH_SERVING_PROFILE_S:-$(( 120 * SCALE ))}" python3 -m microbench.cli profile "${MODEL[@]}" \
  --dtype bf16 --device "$DEVICE" --max-tokens "$TOKENS" --max-context "$CONTEXT" --max-batch 64 --budget 0.1 \
  "${TIMING[@]}" -o "$PROFILE"
# The engine as transformers runs it by default (eager) first; then, on a GPU, with its CUDA graphs and a
# compiled static decode (--engine-mode graphs), into its own folder: what the graphs run adds comes after the
# eager evidence, so a caller's time limit that cuts it short keeps the eager run.
VALIDATE=(python3 -m microbench.cli validate --engine transformers --profile "$PROFILE" --device "$DEVICE"
  --requests 32 --prompt "$PROMPT" --output "$OUTPUT" --seed 0 --arrivals burst --calibration-requests 16
  --static-batch 16 --max-batch 64 --budget-tokens "$TOKENS" --clock "$CLOCK" "${GATE[@]}")
step validate "${GPUBENCH_SERVING_VALIDATE_S:-$(( 150 * SCALE ))}" "${VALIDATE[@]}" --engine-mode eager \
  -o "$OUT/validate"
rc=$?
graphs_rc=-
# The graphs run compiles the static decode for every batch and cache length it meets and captures the manager's
# graphs before its timed rounds: it needs this much time, or it is skipped, saying so (a failure when planned).
GRAPHS_MIN_S=150
if [ "$DEVICE" = cpu ]; then
  note_step graphs "a CPU has no CUDA graphs (the eager run is the dry run)"
elif [ "${GPUBENCH_SERVING_GRAPHS:-1}" = 0 ]; then
  note_step graphs "not planned (GPUBENCH_SERVING_GRAPHS=0: the caller's time plan has no room for it)"
else
  left=$(( ${GPUBENCH_SERVING_BUDGET_S:-100000} - ($(date +%s) - CHECK_START) ))
  if [ "$left" -ge "$GRAPHS_MIN_S" ]; then
    step graphs $(( left < 300 ? left : 300 )) "${VALIDATE[@]}" --engine-mode graphs -o "$OUT/validate-graphs"
    graphs_rc=$?
  else
    skip_step graphs "${left}s left of the budget, ${GRAPHS_MIN_S}s needed"
  fi
fi
echo "validate rc=$rc, graphs rc=$graphs_rc (1: a prediction is off by more than the gate; 2: refused; 124: cut)" \
  | tee -a "$LOG"
grep -E "^(engine|static|continuous|total_s|tokens_per_s|ttft_p90|tpot_p90|e2e_p90|itl_p99)|ratio|total time|=== (validate|graphs)|gpubench: error" "$LOG" | tail -36
# The table last, into the log too; every step counts (profile, validate, graphs when planned).
finish_steps | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
