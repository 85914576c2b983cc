#!/usr/bin/env bash
# Submit N sweeps as a Slurm array, then a comparison that runs after all of them (afterany).
#   scripts/slurm/submit-fleet.sh N [extra sbatch options...]
# Prints the two job ids. The comparison writes $GPUBENCH_RESULTS/compare/ (compare.md, compare.json,
# figures) and fails (exit 1) when a unit is an outlier of its SKU (--fail-on-outlier).
set -euo pipefail
n=${1:?number of array tasks (GPUs)}
shift
here=$(cd "$(dirname "$0")" && pwd)
results=${GPUBENCH_RESULTS:-results/fleet}
array=$(sbatch --parsable --array=0-$((n - 1)) "$@" "$here/gpubench-array.sbatch")
compare=$(sbatch --parsable --dependency=afterany:"$array" --job-name=gpubench-compare --gres=none "$@" \
  --output="gpubench-compare-%j.out" \
  --wrap="${GPUBENCH:-gpubench} compare '$results' --format md -o '$results/compare' --fail-on-outlier")
echo "$array $compare"
