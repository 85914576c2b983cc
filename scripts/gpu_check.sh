#!/usr/bin/env bash
# One-call GPU validation: GPU tests, ceilings, a bf16 sweep of the default shapes and its report, the
# weight-only formats (w8a16, w4a16) against bf16 on one Llama shape and their report, decode, the timer
# benchmark, and the serving check (scripts/serving_check.sh: its profile and eager validate, and its graphs
# validate while the budget allows).  Writes results and one log into OUTDIR and prints a short table last.
# Budgeted to finish in under 8 minutes on an H200 (BUDGET_S): each step has its own timeout, which ends the
# step's whole process group (check_common.sh), and the serving check gets what is left.  By estimate from the
# first H200 run (steps before serving 143 s then) and the steps added since: ~200 s before the serving check,
# ~150 s for its profile and eager validate.
#
#   scripts/gpu_check.sh OUTDIR            (GPUBENCH_DEVICE=cpu to dry-run the script without a GPU)
#
# Never changes clocks, power limits or modes: it measures the card as found.
set -uo pipefail
# shellcheck source=scripts/check_common.sh
source "$(dirname "$0")/check_common.sh" "${1:?usage: scripts/gpu_check.sh OUTDIR}" gpu_check.log
# A CPU dry run checks the script, not the CPU: every measuring step samples briefly (DRY) on fewer batches, and
# each step gets three times the H200's timeout (a shared 2-core machine runs these minutes slower).
if [ "$DEVICE" = cpu ]; then
  DRY=(--budget 0.05); BATCHES=1:64:x4; SCALE=3
else
  DRY=(); BATCHES=1:512:x2; SCALE=1
fi
limit() { echo $(( $1 * SCALE )); }
step env 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv 2>&1; python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda)"'
step devices 60 python3 -m microbench.cli devices
BACKENDS=torch
python3 -c "import cupy" >/dev/null 2>&1 && [ "$DEVICE" != cpu ] && BACKENDS=torch,cupy
step tests "$(limit 180)" python3 -m pytest -m gpu -q -rs tests/test_gpu.py tests/test_cupy_backend.py
step ceilings "$(limit 150)" python3 -m microbench.cli ceilings --device "$DEVICE" --backend "$BACKENDS" \
  ${DRY[@]+"${DRY[@]}"} $([ "$DEVICE" = cpu ] && echo --quick) -o "$OUT/ceilings.json"
# The default shapes in bf16 on every back end (the weight-only formats have no CuPy kernel: next step).
step sweep "$(limit 240)" python3 -m microbench.cli sweep --device "$DEVICE" --backend "$BACKENDS" --dtype bf16 \
  --no-ceilings ${DRY[@]+"${DRY[@]}"} $([ "$DEVICE" = cpu ] && echo --batch "$BATCHES") -o "$OUT/sweep.json"
# bf16, w8a16 and w4a16 on Llama-3-8B's down_proj (the CPU's default shape on a dry run), in one result so its
# report has the format figure and each format's break-even batch; kept inside report.tar.gz with its report.
# Each report folder is written whole into a new path (the sweep's report first, then the formats' and decode's
# inside it), so the formats result is measured beside sweep.json and moved into its report folder at the end.
if [ "$DEVICE" = cpu ]; then FORMAT_SHAPE=2048x4096; else FORMAT_SHAPE=4096x14336; fi
# Ten batches, 1 to 512: where the formats' break-even batches lie on an H200, in a third of the default's points.
step formats "$(limit 120)" python3 -m microbench.cli sweep --device "$DEVICE" --dtype bf16,w8a16,w4a16 \
  --op gemv,gemm --shape "$FORMAT_SHAPE" --batch "$BATCHES" --no-ceilings ${DRY[@]+"${DRY[@]}"} \
  -o "$OUT/formats.json"
merge_ceilings() {  # the sweeps skipped their own ceilings to save time; give them the ones just measured
  [ -f "$OUT/ceilings.json" ] && [ -f "$1" ] || return 0
  python3 - "$OUT/ceilings.json" "$1" <<'PY' >>"$LOG" 2>&1
import sys
from roofline.result.io import load_result, save_result
ceilings, sweep = load_result(sys.argv[1]), load_result(sys.argv[2])
save_result(sweep.with_ceilings(ceilings.ceilings), sys.argv[2])
print(f"{sys.argv[2]}: ceilings merged from ceilings.json")
PY
}
merge_ceilings "$OUT/sweep.json"
merge_ceilings "$OUT/formats.json"
if [ -f "$OUT/sweep.json" ]; then
  step report "$(limit 60)" python3 -m microbench.cli report "$OUT/sweep.json" -o "$OUT/report"
fi
if [ -f "$OUT/formats.json" ]; then
  step fmt-report "$(limit 60)" python3 -m microbench.cli report "$OUT/formats.json" -o "$OUT/report/formats"
fi
if [ "$DEVICE" = cpu ]; then DECODE_MODEL=(--hf-config tests/data/tiny-llama-config.json --dtype fp32 --budget 0.02); \
else DECODE_MODEL=(--model llama-3-8b); fi
step decode "$(limit 90)" python3 -m microbench.cli decode "${DECODE_MODEL[@]}" --batch 1:256:x2 --device "$DEVICE" \
  -o "$OUT/report/decode"
[ -f "$OUT/report/decode/decode.json" ] && cp "$OUT/report/decode/decode.json" "$OUT/decode.json"
step bench "$(limit 90)" python3 scripts/bench_timer.py --device "$DEVICE" \
  $([ "$DEVICE" = cpu ] && echo --budget 0.5) -o "$OUT/bench.json"
# The serving check last, in what is left of the budget (8 minutes less 20 s of slack for the summary and the
# archives): its profile and eager validate need SERVING_MIN_S, its graphs validate runs only if time is left
# after them (GPUBENCH_SERVING_BUDGET_S).  A CPU dry run runs it whatever the clock says: it checks the script.
BUDGET_S=460
SERVING_MIN_S=150
LEFT=$(seconds_left "$BUDGET_S")
if [ "$DEVICE" = cpu ]; then
  export GPUBENCH_MODEL_CONFIG=${GPUBENCH_MODEL_CONFIG:-tests/data/tiny-llama-config.json}
  step serving 1200 scripts/serving_check.sh "$OUT/serving"
elif [ "$LEFT" -ge "$SERVING_MIN_S" ]; then
  GPUBENCH_SERVING_BUDGET_S=$LEFT step serving "$LEFT" scripts/serving_check.sh "$OUT/serving"
else
  printf '%-10s skipped: %ss left of the budget, %ss needed\n' serving "$LEFT" "$SERVING_MIN_S" >>"$STEPS"
fi

{
  echo "--- steps (rc, seconds) ---"
  cat "$STEPS"
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
} 2>&1 | tee "$OUT/summary.txt"
# The report and serving folders are archived as one file each, so OUTDIR stays a few files; the formats result
# goes into the archive beside its report.
if [ -f "$OUT/formats.json" ]; then mkdir -p "$OUT/report/formats" && mv "$OUT/formats.json" "$OUT/report/formats/"; fi
[ -d "$OUT/report" ] && tar -C "$OUT" -czf "$OUT/report.tar.gz" report && rm -rf "$OUT/report"
[ -d "$OUT/serving" ] && tar -C "$OUT" -czf "$OUT/serving.tar.gz" serving && rm -rf "$OUT/serving"
rm -f "$STEPS"
