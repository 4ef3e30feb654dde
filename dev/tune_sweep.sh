#!/usr/bin/env bash
# Sweep the megakernel's schedule options on the GPU (megakernel only, no baselines); one line per
# configuration into $OUT/sweep.log. Usage: OUT=dir dev/tune_sweep.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# SWEEP: space-separated policy:waves:splits triples ("-" = the builder's default split count)
for cfg in ${SWEEP:-dynamic:1:- dynamic:1:1 dynamic:2:1 dynamic:3:1 dynamic:4:1}; do
  IFS=: read -r p w sp <<<"$cfg"
  opts=(--kernel-option "policy=$p" --kernel-option "waves=$w")
  [ "$sp" != - ] && opts+=(--kernel-option "max_attn_splits=$sp")
  python3 -m engine.cli bench --skip eager,graph,compile "${opts[@]}" 2>&1 | grep -E "^megakernel |  megakernel: " \
    | sed "s/^/policy=$p waves=$w splits=$sp: /" | tee -a "$OUT/sweep.log"
done
