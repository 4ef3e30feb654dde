#!/usr/bin/env bash
# Nsight Compute source counters on one megakernel decode launch (after warm-up): warp-state samples per
# SASS instruction, exported as CSV and summarised by dev/ncu_source.py (stall reasons, the hottest
# instructions; add --region LO:HI offsets to cost a stretch of code per execution). Clocks are left alone.
# Usage: OUT=dir [NCU_STEP_ARGS="10 64"] dev/ncu_source.sh [launch-skip]   (writes $OUT/ncu_source.csv.gz, $OUT/ncu_source.txt,
#        $OUT/ncu_code_map.txt: the executed code by region, dev/code_map.py)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
rep="$OUT/ncu_source"
ncu --clock-control none -k regex:megakernel --launch-skip "${1:-6}" --launch-count 1 \
  --section WarpStateStats --section SourceCounters --import-source no -f -o "$rep" \
  python3 -m dev.ncu_step ${NCU_STEP_ARGS:-10} > "$OUT/ncu_source.log" 2>&1 || { tail -20 "$OUT/ncu_source.log"; exit 1; }
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass | gzip > "$OUT/ncu_source.csv.gz"
rm -f "$rep.ncu-rep"  # ≈ 100 MB; the CSV keeps what the analysis needs
python3 -m dev.ncu_source "$OUT/ncu_source.csv.gz" | tee "$OUT/ncu_source.txt"
{ python3 -m dev.code_map "$OUT/ncu_source.csv.gz"; python3 -m dev.code_map "$OUT/ncu_source.csv.gz" --by-fetch --top 30; } | tee "$OUT/ncu_code_map.txt"  # executed code, by region
