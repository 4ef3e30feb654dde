#!/usr/bin/env bash
# Sweep the megakernel's schedule knobs on the GPU (megakernel only, no baselines); one line per
# configuration into $OUT/sweep.log. Usage: OUT=dir scripts/tune_sweep.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# SWEEP: space-separated policy:waves:splits triples ("-" = the builder's default split count)
for cfg in ${SWEEP:-dynamic:1:- dynamic:1:1 dynamic:2:1 dynamic:3:1 dynamic:4:1}; do
  IFS=: read -r p w sp <<<"$cfg"
  set -- "$p" "$w" "$sp"
  env MEGAKERNEL_POLICY=$1 MEGAKERNEL_WAVES=$2 $( [ "$3" != - ] && echo MEGAKERNEL_ATTN_SPLITS=$3 ) \
    python3 -m engine.cli bench --skip eager,graph,compile 2>&1 | grep -E "^megakernel |  megakernel: " | sed "s/^/policy=$1 waves=$2 splits=$3: /" | tee -a "$OUT/sweep.log"
done
