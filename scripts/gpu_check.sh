#!/usr/bin/env bash
# One-call GPU validation: GPU tests, ceilings, a default sweep, a report, the timer benchmark.
# Writes results and one log into OUTDIR (pass $OUT on the device machine) and prints a short table
# last.  Budgeted to finish in under 8 minutes on an H200; each step has its own timeout.
#
#   scripts/gpu_check.sh OUTDIR            (GPUBENCH_DEVICE=cpu to dry-run the script without a GPU)
#
# Never changes clocks, power limits or modes: it measures the card as found.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
DEVICE=${GPUBENCH_DEVICE:-cuda}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
LOG="$OUT/gpu_check.log"
STEPS="$(mktemp)"  # folded into summary.txt: the device tool brings back at most 8 files
: >"$LOG"
: >"$STEPS"
gpubench() { python3 -m microbench.cli "$@"; }

step() {  # step NAME TIMEOUT_S COMMAND...: run, log, record status and seconds
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "=== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  printf '%-10s rc=%-3s %4ss\n' "$name" "$rc" "$(( $(date +%s) - start ))" >>"$STEPS"
  return 0
}

step env 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv 2>&1; python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda)"'
step devices 60 python3 -m microbench.cli devices
BACKENDS=torch
python3 -c "import cupy" >/dev/null 2>&1 && [ "$DEVICE" != cpu ] && BACKENDS=torch,cupy
step tests 180 python3 -m pytest -m gpu -q -rs tests/test_gpu.py tests/test_cupy_backend.py
step ceilings 150 python3 -m microbench.cli ceilings --device "$DEVICE" --backend "$BACKENDS" -o "$OUT/ceilings.json"
step sweep 240 python3 -m microbench.cli sweep --device "$DEVICE" --backend "$BACKENDS" --no-ceilings \
  -o "$OUT/sweep.json"
if [ -f "$OUT/ceilings.json" ] && [ -f "$OUT/sweep.json" ]; then
  # The sweep skipped its own ceilings to save time; give it the ones just measured.
  python3 - "$OUT/ceilings.json" "$OUT/sweep.json" <<'PY' >>"$LOG" 2>&1
import sys
from roofline.results import load_result, save_result
ceilings, sweep = load_result(sys.argv[1]), load_result(sys.argv[2])
save_result(sweep.with_ceilings(ceilings.ceilings), sys.argv[2])
print("sweep.json: ceilings merged from ceilings.json")
PY
fi
if [ -f "$OUT/sweep.json" ]; then
  step report 60 python3 -m microbench.cli report "$OUT/sweep.json" -o "$OUT/report"
fi
if [ "$DEVICE" = cpu ]; then DECODE_MODEL=(--hf-config tests/data/tiny-llama-config.json --dtype fp32); \
else DECODE_MODEL=(--model llama-3-8b); fi
step decode 90 python3 -m microbench.cli decode "${DECODE_MODEL[@]}" --batch 1:256:x2 --device "$DEVICE" \
  -o "$OUT/report/decode"
[ -f "$OUT/report/decode/decode.json" ] && cp "$OUT/report/decode/decode.json" "$OUT/decode.json"
[ -d "$OUT/report" ] && tar -C "$OUT" -czf "$OUT/report.tar.gz" report && rm -rf "$OUT/report"
step bench 90 python3 scripts/bench_timer.py --device "$DEVICE" -o "$OUT/bench.json"

{
  echo "--- steps (rc, seconds) ---"
  cat "$STEPS"
  echo "--- summary ---"
  python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
from roofline.results import load_result
from roofline.summary import summarize_series
from roofline.units import si, percent
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
if (out / "bench.json").exists():
    sys.path.insert(0, "scripts")
    from bench_timer import formatted  # units and significant digits, never round(v, 4)
    bench = json.loads((out / "bench.json").read_text())
    print("bench: " + "; ".join(f"{k} {formatted(k, v)}" for k, v in bench.items()))
PY
} 2>&1 | tee "$OUT/summary.txt"
