#!/usr/bin/env bash
# A non-editable install, as `pip install .` or a wheel gives users: build the wheel, install it into a fresh venv
# (CPU torch first, as .ci/run does), and from a folder outside the checkout start every room: --help, a fit of a
# committed result, decode --analytic, profile --analytic, a small simulate and plan.  Exit 1 on the first failure.
#
#   scripts/wheel_check.sh [WORKDIR]      (default: a new temporary folder, removed at the end)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$(mktemp -d)}
[ -n "${1:-}" ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"
# Built from a copy of the tracked files: an in-tree build reuses a stale build/ folder.
git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 tar -cf -) | (mkdir -p "$WORK/tree" && tar -C "$WORK/tree" -xf -)
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q torch==2.13.0
"$WORK/venv/bin/pip" wheel -q --no-deps "$WORK/tree" -w "$WORK/dist"
"$WORK/venv/bin/pip" install -q "$WORK"/dist/gpubench_roofline-*.whl
RESULT=$(ls "$ROOT"/results/cpu-*.json | head -n 1)
cd "$WORK"  # outside the checkout: only the installed wheel can answer
export PATH="$WORK/venv/bin:$PATH" MPLBACKEND=Agg
run() { echo "+ $*"; "$@" >"$WORK/last.log" 2>&1 || { cat "$WORK/last.log"; echo "wheel check failed: $*" >&2; exit 1; }; }
run python -c "import microbench, roofline, sys; assert '$ROOT' not in (microbench.__file__ + roofline.__file__), 'imported from the checkout'"
run gpubench --help
run gpubench fit "$RESULT"
run gpubench decode --analytic --gpu h100-sxm --model llama-3-8b --batch 1,16
run gpubench profile --analytic --gpu h100-sxm --model llama-3-8b -o "$WORK/P.json"
run gpubench simulate "$WORK/P.json" --requests 50 -o "$WORK/sim"
run gpubench plan "$WORK/P.json" --rate 2 --slo ttft_p90=2,tpot_p99=0.1 --requests 100 -o "$WORK/plan"
echo "wheel check: every command started from the installed wheel"
