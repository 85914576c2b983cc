#!/usr/bin/env bash
# One-call GPU validation, planned before it starts to finish in under 8 minutes on an H200 (--quick: 5).
#
#   scripts/gpu_check.sh [--quick] OUTDIR     (GPUBENCH_DEVICE=cpu to dry-run the script without a GPU)
#
# First the time plan (scripts/gpu_check_plan.py, printed): each step's points, its expected seconds on an H200
# from the first H200 run's committed measurements (tests/data/h200/) and its timeout, with steps trimmed (fewer
# batches, shapes, back ends or tests, each trim named) until the whole fits with the serving check in it.  The
# default runs: env, devices, the CuPy and the other GPU tests, ceilings, a bf16 sweep and its report, grouped GEMMs
# of Mixtral's and Qwen3-30B-A3B's experts (moe), w8a16 and w4a16 against bf16 on Llama-3-8B's down_proj and their
# report, one fp8-block point, decode, the timer benchmark, and last the serving check (scripts/serving_check.sh: its
# profile and eager validate always, its graphs validate when planned); --quick runs the five that matter most: the
# formats at M = 1, 16, 128, 512, the grouped points at 1 and 256 tokens, the CuPy tests, the fp8-block point and
# the serving check.  Each step before the serving check gets its planned timeout, cut to what is left before the
# serving check's own timeouts (a step with less than its expected time left is skipped); a step past its timeout is
# ended with every process it started (check_common.sh).
#
# Writes results, the log and summary.txt into OUTDIR; prints the summary, then the step table as its last output.
# Exit status: 0 when every planned step passed; 1 when any failed, was cut or was skipped for want of time or
# input (the table's last line names them); 2 when no plan fits.  A CPU dry run (GPUBENCH_DEVICE=cpu) prints the
# H200's plan and runs the same steps on the CPU with small arguments and scaled timeouts: it checks the script,
# not the CPU.  Test hook: GPUBENCH_CHECK_FAIL=STEP makes that step fail (check_common.sh).
#
# Never changes clocks, power limits or modes: it measures the card as found.
set -uo pipefail
MODE=default
if [ "${1:-}" = --quick ]; then MODE=quick; shift; fi
# shellcheck source=scripts/check_common.sh
source "$(dirname "$0")/check_common.sh" "${1:?usage: scripts/gpu_check.sh [--quick] OUTDIR}" gpu_check.log
if [ "$DEVICE" = cpu ]; then PLAN_DEVICE=cpu; else PLAN_DEVICE=cuda; fi
PLAN_SH=$(mktemp)
PLAN_ARGS=(--device "$PLAN_DEVICE" --shell "$PLAN_SH")
[ "$MODE" = quick ] && PLAN_ARGS+=(--quick)
python3 scripts/gpu_check_plan.py "${PLAN_ARGS[@]}" 2>&1 | tee -a "$LOG" "$OUT/summary.txt"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  rm -f "$PLAN_SH" "$STEPS"
  echo "gpu_check: no plan, nothing run (see above)"
  exit 2
fi
# shellcheck source=/dev/null
source "$PLAN_SH"
rm -f "$PLAN_SH"

merge_ceilings() {  # merge_ceilings RESULT: the ceilings step's measurements into a sweep run with --no-ceilings
  [ -f "$OUT/ceilings.json" ] && [ -f "$1" ] || return 0
  python3 - "$OUT/ceilings.json" "$1" <<'PY' >>"$LOG" 2>&1
import sys
from roofline.result.io import load_result, save_result
ceilings, sweep = load_result(sys.argv[1]), load_result(sys.argv[2])
save_result(sweep.with_ceilings(ceilings.ceilings), sys.argv[2])
print(f"{sys.argv[2]}: ceilings merged from ceilings.json")
PY
}

needs() {  # needs NAME FILE: a step that reads FILE is skipped (a failure) when the step that writes it did not
  [ -f "$2" ] && return 0
  skip_step "$1" "no $(basename "$2"): the step that writes it failed"
  return 1
}

# Each report folder is written whole into a new path (the sweep's report first, then the formats' and decode's
# inside it), so the formats result is measured beside sweep.json and moved into its report folder at the end.
for i in "${!PLAN_NAMES[@]}"; do
  name=${PLAN_NAMES[$i]}
  declare -n cmd="PLAN_CMD_$i"
  if [ "${#cmd[@]}" -eq 0 ]; then
    note_step "$name" "${PLAN_NOTES[$i]}"
    continue
  fi
  # The sweeps skipped their own ceilings: each report reads its result with the ones the ceilings step measured.
  case $name in
    report) needs report "$OUT/sweep.json" || continue; merge_ceilings "$OUT/sweep.json" ;;
    fmt-report) needs fmt-report "$OUT/formats.json" || continue; merge_ceilings "$OUT/formats.json" ;;
  esac
  limit=${PLAN_TIMEOUTS[$i]}
  if [ "$name" = serving ]; then
    if [ "$DEVICE" = cpu ]; then
      # The dry run of the serving check: the tiny model, its own CPU limits, whatever the clock says.
      GPUBENCH_MODEL_CONFIG=${GPUBENCH_MODEL_CONFIG:-tests/data/tiny-llama-config.json} step serving "$limit" "${cmd[@]}"
    else
      # What is left of the budget: never less than the plan's serving timeouts, which every earlier step left whole.
      limit=$(seconds_left $(( PLAN_BUDGET_S - PLAN_SLACK_S )))
      GPUBENCH_SERVING_BUDGET_S=$limit GPUBENCH_SERVING_PROFILE_S=$PLAN_PROFILE_TIMEOUT_S \
        GPUBENCH_SERVING_VALIDATE_S=$PLAN_VALIDATE_TIMEOUT_S GPUBENCH_SERVING_GRAPHS=$PLAN_GRAPHS \
        step serving "$limit" "${cmd[@]}"
    fi
    continue
  fi
  if [ "$DEVICE" != cpu ]; then
    # Cut to what is left before the serving check's reservation; skipped when that is under half its expected
    # time (it could only be cut), run in what is left otherwise.  A cut step's kill (KILL_AFTER_S) comes out of the
    # serving check's headroom, not its timeouts' sum: a python ended by SIGTERM exits within a second.
    left=$(seconds_left "$PLAN_SERVING_DEADLINE_S")
    if [ $(( 2 * left )) -lt "${PLAN_ESTIMATES[$i]}" ] || [ "$left" -lt 5 ]; then
      skip_step "$name" "${left}s left before the serving check's reservation, ${PLAN_ESTIMATES[$i]}s expected"
      continue
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  step "$name" "$limit" "${cmd[@]}"
  if [ "$name" = decode ] && [ -f "$OUT/report/decode/decode.json" ]; then
    cp "$OUT/report/decode/decode.json" "$OUT/decode.json"
  fi
done
unset -n cmd

{
  echo "--- summary ---"
  python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
from roofline.result.io import load_result
from roofline.analysis.summary import summarize_series
from roofline.core.units import si, percent
out = Path(sys.argv[1])
if (out / "sweep.json").exists():
    result = load_result(out / "sweep.json")
    print(result.device.get("name"), result.device.get("sku"))
    measured = result.ceilings.get("measured") or {}
    for kind in ("copy", "read"):
        if kind in measured:
            print(f"{kind:5s} {si(measured[kind]['bytes_per_s'], 'B/s')} ({measured[kind].get('timer')})")
    reference = measured.get("reference_bandwidth")
    if reference:
        print(f"reference bandwidth {si(reference['bytes_per_s'], 'B/s')} ({reference['name']}, {reference['timer']})")
    burst = measured.get("peak_flop_per_s_burst") or {}
    for dtype, peak in (measured.get("peak_flop_per_s") or {}).items():
        print(f"peak {dtype:5s} sustained {si(peak, 'FLOP/s')}, burst {si(burst.get(dtype), 'FLOP/s')}")
    for row in summarize_series(result):
        print(f"{row.op:4s} {row.dtype:4s} {row.n}x{row.k}: ok {row.points_ok}/{row.points_total} "
              f"B={row.low_batch} {si(row.low_batch_bytes_per_s, 'B/s')} ({percent(row.pct_of_measured_bandwidth)} meas, "
              f"{percent(row.pct_of_spec_bandwidth)} spec); best {si(row.peak_flop_per_s, 'FLOP/s')} @B={row.peak_batch}")
formats = out / "formats.json"
if formats.exists():
    from roofline.analysis.series import analyse
    for line in analyse(load_result(formats))["verdict"]:
        if any(name in line for name in ("w8a16", "w4a16")):
            print(line)
# The grouped points and the fp8-block point, one line each: what ran, how long, and whether it was right.
for name in ("moe.json", "fp8-block.json"):
    if not (out / name).exists():
        continue
    for p in load_result(out / name).points:
        what = f"{p.op} {p.dtype} {p.n}x{p.k}"
        if p.op == "grouped":
            what += f" {p.experts}e top-{p.topk} {p.routing} ({p.touched} touched)"
        if p.ok and p.stats:
            right = {True: "correct", False: "WRONG", None: "unchecked"}[p.correct]
            print(f"{what} B={p.batch}: {si(p.stats.median_s, 's')}, {si(p.bytes / p.stats.median_s, 'B/s')} "
                  f"({p.kernel}, {p.timer}, {right})")
        else:
            print(f"{what} B={p.batch}: {p.status}: {p.reason}")
if (out / "bench.json").exists():
    sys.path.insert(0, "scripts")
    from bench_timer import formatted  # units and significant digits, never round(v, 4)
    bench = json.loads((out / "bench.json").read_text())
    print("bench: " + "; ".join(f"{k} {formatted(k, v)}" for k, v in bench.items()))
PY
if [ -f "$OUT/serving/serving_check.log" ]; then
  echo "--- serving (predicted against measured) ---"
  grep -E "^(engine|static|continuous|total_s|tokens_per_s|ttft_p90|tpot_p90|e2e_p90|itl_p99)|ratio|total time|rc=|skipped|gpubench: error|=== (validate|graphs)" \
    "$OUT/serving/serving_check.log" | tail -36
fi
} 2>&1 | tee -a "$OUT/summary.txt"
# The report and serving folders are archived as one file each, so OUTDIR stays a few files; the formats result
# goes into the archive beside its report.
if [ -f "$OUT/formats.json" ] && [ -d "$OUT/report/formats" ]; then mv "$OUT/formats.json" "$OUT/report/formats/"; fi
if [ -d "$OUT/report" ]; then tar -C "$OUT" -czf "$OUT/report.tar.gz" report && rm -rf "$OUT/report"; fi
if [ -d "$OUT/serving" ]; then tar -C "$OUT" -czf "$OUT/serving.tar.gz" serving && rm -rf "$OUT/serving"; fi
# Last: every step's status, the failed ones with where their log says why, and the exit status.
finish_steps | tee -a "$OUT/summary.txt"
exit "${PIPESTATUS[0]}"
