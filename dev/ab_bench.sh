#!/usr/bin/env bash
# A/B the megakernel's batch-1 decode bench inside ONE GPU machine's run (numbers differ by a few % between
# machines; within a run they repeat to about ±1 %). Each variant is a source tree (a copy of another commit,
# made on the dev machine, e.g. `mkdir alt && git archive HEAD~1 | tar -x -C alt`, then carried with the run)
# and/or backend options (`megakernel bench --kernel-option NAME=VALUE`). Trees build in parallel, then the
# variants run interleaved ROUNDS times; one line per measurement, and a summary, into $OUT/ab.log.
#   dev/ab_bench.sh "main=." "old=alt" "cap2=.:max_inflight_pages=2"      (ROUNDS=2 default)
# BENCH_ARGS adds bench options to every run (e.g. BENCH_ARGS="--preset llama-3.1-8b"). ROWS: the bench rows
# measured per run (default "megakernel"; e.g. ROWS="megakernel megakernel-sampled": sampling's cost over greedy
# per variant, the summary one line per variant and row).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}
ROWS=${ROWS:-megakernel}
root=$PWD
: > "$OUT/ab.log"  # this invocation only
declare -A built=()
for spec in "$@"; do  # name=dir[:NAME=VALUE[:NAME=VALUE...]]
  dir=${spec#*=}; dir=${dir%%:*}
  [[ -n ${built[$dir]:-} ]] && continue
  built[$dir]=1
  (cd "$root/$dir" && PYTHONPATH=$PWD python3 -m engine.cuda_build > "$OUT/build_${dir//\//_}.log" 2>&1) &
done
wait
for ((r = 1; r <= ROUNDS; r++)); do
  for spec in "$@"; do
    name=${spec%%=*}; rest=${spec#*=}; dir=${rest%%:*}
    opts=(); items=(); [[ $rest == *:* ]] && IFS=: read -r -a items <<< "${rest#*:}"
    for item in "${items[@]}"; do opts+=(--kernel-option "$item"); done
    table=$(cd "$root/$dir" && PYTHONPATH="$root/$dir" python3 -m engine.cli bench --skip eager,graph,compile "${opts[@]}" ${BENCH_ARGS:-} 2>&1)
    for row in $ROWS; do
      ms=$(awk -v row="$row" '$1 == row && $2 ~ /^[0-9.]+$/ {print $2}' <<< "$table")
      label=$name; [[ $row != megakernel ]] && label="$name/${row#megakernel-}"
      echo "round $r  $label  ${ms:-FAILED} ms/token" | tee -a "$OUT/ab.log"
    done
  done
done
echo "--- mean ms/token per variant" | tee -a "$OUT/ab.log"
awk '/^round/ && $4 != "FAILED" {s[$3] += $4; n[$3]++} END {for (k in s) printf "%-16s %.3f (%d runs)\n", k, s[k] / n[k], n[k]}' \
  "$OUT/ab.log" | sort -k2 -n | tee "$OUT/ab_summary.log"
