# Sourced by gpu_check.sh and serving_check.sh: the output folder, the environment, and `step`.
#   source scripts/check_common.sh OUTDIR LOGNAME
# Sets OUT (absolute), DEVICE (GPUBENCH_DEVICE, default cuda), ROOT, LOG, STEPS; cd's to ROOT.
OUT=${1:?usage: $0 OUTDIR}
DEVICE=${GPUBENCH_DEVICE:-cuda}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
LOG="$OUT/$2"
STEPS="$(mktemp)"  # folded into the summary, so the output folder stays a few files
: >"$LOG"
: >"$STEPS"
CHECK_START=$(date +%s)

step() {  # step NAME TIMEOUT_S COMMAND...: run, log, record status and seconds
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "=== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  printf '%-10s rc=%-3s %4ss\n' "$name" "$rc" "$(( $(date +%s) - start ))" >>"$STEPS"
  return $rc
}

seconds_left() {  # seconds_left BUDGET_S: what remains of BUDGET_S since this script started
  echo $(( $1 - ($(date +%s) - CHECK_START) ))
}
