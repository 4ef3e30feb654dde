#!/usr/bin/env bash
# Nsight Compute on one megakernel decode launch (after warm-up): warp stall reasons and issue activity
# ("no_instruction" = instruction-cache misses). Clocks are left alone (--clock-control none).
# Usage: OUT=dir dev/ncu_stalls.sh [launch-skip]     (writes $OUT/ncu_stalls.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
# Stall reasons as warps-per-issue ratios (their sum is "Warp Cycles Per Issued Instruction"); the
# controller's and loader's spins count too, so read them as shares, next to the issue activity.
reasons="no_instruction long_scoreboard short_scoreboard barrier membar sleeping wait mio_throttle lg_throttle
  branch_resolving math_pipe_throttle imc_miss drain dispatch_stall misc selected not_selected"
metrics=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in $reasons; do metrics+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
ncu --clock-control none -k regex:megakernel --launch-skip "${1:-6}" --launch-count 1 --metrics "$metrics" \
  python3 -m dev.ncu_step ${NCU_STEP_ARGS:-10} > "$OUT/ncu_stalls.txt" 2>&1
grep -E "smsp__|gpu__|==PROF==|rror" "$OUT/ncu_stalls.txt" | sed 's/smsp__average_warps_issue_stalled_//' | head -40
