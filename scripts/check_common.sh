# shellcheck shell=bash
# Sourced by gpu_check.sh and serving_check.sh: the output folder, the environment, `step` and the step table.
#   source scripts/check_common.sh OUTDIR LOGNAME
# Sets OUT (absolute), DEVICE (GPUBENCH_DEVICE, default cuda), ROOT, LOG, STEPS; cd's to ROOT.
#
# Test hook: GPUBENCH_CHECK_FAIL=NAME[,NAME...] replaces each named step's command with one that says so and
# exits 1, so a test sees a failed step go through the table and the exit status without a real failure.  It
# reaches a nested check's steps too (GPUBENCH_CHECK_FAIL=validate fails serving_check.sh's validate inside
# gpu_check.sh, and with it gpu_check.sh's serving step).
OUT=${1:?usage: $0 OUTDIR}
# shellcheck disable=SC2034  # read by the scripts that source this one
DEVICE=${GPUBENCH_DEVICE:-cuda}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
LOG="$OUT/$2"
STEPS="$(mktemp)"  # the step table, a line per step as it ends; printed last, so OUTDIR stays a few files
: >"$LOG"
: >"$STEPS"
CHECK_START=$(date +%s)
# Steps that failed (rc != 0), were cut by their timeout (124, or 137 when the kill after it was needed) or were
# skipped for want of time or input: any of them makes the check's exit status 1.
FAILED=()
STEP_COUNT=0
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

forced_failure() {  # forced_failure NAME: is NAME among GPUBENCH_CHECK_FAIL's steps (the test hook above)?
  [[ ",${GPUBENCH_CHECK_FAIL:-}," == *",$1,"* ]]
}

step() {  # step NAME TIMEOUT_S COMMAND...: run, log, record status and seconds (rc 124/137: cut at TIMEOUT_S)
  local name=$1 limit=$2 start rc first
  shift 2
  start=$(date +%s)
  echo "=== $name (timeout ${limit}s): $*" >>"$LOG"  # the limit it was given: a plan's, or what was left of it
  first=$(wc -l <"$LOG")
  if forced_failure "$name"; then
    set -- bash -c 'echo "forced failure: GPUBENCH_CHECK_FAIL names this step (a test hook)"; exit 1'
  fi
  "${STEP_TIMEOUT[@]}" "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  record_step "$name" "$rc" "$(( $(date +%s) - start ))" "$limit" "$first"
  return $rc
}

record_step() {  # record_step NAME RC SECONDS LIMIT FIRST_LOG_LINE: its line in the table; a failure points at its log
  local name=$1 rc=$2 seconds=$3 limit=$4 first=$5 last why
  STEP_COUNT=$(( STEP_COUNT + 1 ))
  if [ "$rc" -eq 0 ]; then
    printf '%-10s rc=%-3s %4ss\n' "$name" "$rc" "$seconds" >>"$STEPS"
    return
  fi
  FAILED+=("$name")
  last=$(wc -l <"$LOG")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="cut at its ${limit} s timeout"; else why=failed; fi
  # Where to read why: the step's lines in the log, and its last two lines here.
  printf '%-10s rc=%-3s %4ss  %s: %s lines %s-%s\n' "$name" "$rc" "$seconds" "$why" "$(basename "$LOG")" \
    "$first" "$last" >>"$STEPS"
  sed -n "$((first + 1)),${last}p" "$LOG" | tr '\r' '\n' | grep -v '^[[:space:]]*$' | tail -n 2 | cut -c1-150 \
    | sed 's/^/           | /' >>"$STEPS"
}

skip_step() {  # skip_step NAME WHY: not run for want of time or input, which fails the check
  STEP_COUNT=$(( STEP_COUNT + 1 ))
  FAILED+=("$1")
  printf '%-10s skipped     %s\n' "$1" "$2" >>"$STEPS"
}

note_step() {  # note_step NAME WHY: not run by design (the plan trimmed it, a CPU has no kernel for it)
  printf '%-10s not run     %s\n' "$1" "$2" >>"$STEPS"
}

finish_steps() {  # the step table, then one line that names every failed step; returns 1 if there is one
  echo "--- steps (rc, seconds) ---"
  cat "$STEPS"
  rm -f "$STEPS"
  if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "--- FAILED: ${#FAILED[@]} of $STEP_COUNT steps failed, were cut or were skipped: ${FAILED[*]} ---"
    return 1
  fi
  echo "--- all $STEP_COUNT steps passed ---"
}

seconds_left() {  # seconds_left BUDGET_S: what remains of BUDGET_S since this script started
  echo $(( $1 - ($(date +%s) - CHECK_START) ))
}
