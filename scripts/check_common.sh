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
# GNU timeout puts its command in a process group of its own and, when time runs out, signals that whole group
# (then SIGKILL after KILL_AFTER_S).  A check run as a step of another (serving_check.sh inside gpu_check.sh) keeps
# its steps in its caller's group (--foreground): a caller's timeout then reaches their python too, where it
# used to kill the inner bash alone and leave the inner timeout's python holding the GPU for minutes.
KILL_AFTER_S=15
if [ -n "${GPUBENCH_CHECK_NESTED:-}" ]; then
  STEP_TIMEOUT=(timeout --foreground -k "$KILL_AFTER_S")
else
  STEP_TIMEOUT=(timeout -k "$KILL_AFTER_S")
fi
export GPUBENCH_CHECK_NESTED=1

step() {  # step NAME TIMEOUT_S COMMAND...: run, log, record status and seconds (rc 124: cut at TIMEOUT_S)
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "=== $name: $*" >>"$LOG"
  "${STEP_TIMEOUT[@]}" "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  printf '%-10s rc=%-3s %4ss\n' "$name" "$rc" "$(( $(date +%s) - start ))" >>"$STEPS"
  return $rc
}

seconds_left() {  # seconds_left BUDGET_S: what remains of BUDGET_S since this script started
  echo $(( $1 - ($(date +%s) - CHECK_START) ))
}
