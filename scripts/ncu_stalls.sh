#!/usr/bin/env bash
# Nsight Compute on one megakernel decode launch (after warm-up): warp stall reasons, issue slots and
# instruction-cache behaviour of the interpreter. Clocks are left alone (--clock-control none).
# Usage: OUT=dir scripts/ncu_stalls.sh [launch-skip]     (writes $OUT/ncu_stalls.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
ncu --clock-control none -k regex:megakernel --launch-skip "${1:-6}" --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section LaunchStats \
  python3 scripts/ncu_step.py 10 > "$OUT/ncu_stalls.txt" 2>&1
grep -E "Stall|stall|Warp Cycles|Issued|No Eligible|Active Warps|Duration|==PROF==|Error|error" "$OUT/ncu_stalls.txt" | head -60
