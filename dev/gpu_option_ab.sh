#!/usr/bin/env bash
# One GPU machine's run (the `run` tool) for a kernel-option A/B: build the extension, optionally the GPU tests in
# $TESTS, then `megakernel bench` for every config in $CONFIGS (";"-separated bench argument lists) and every variant
# in $VARIANTS (space-separated NAME=OPTION[,OPTION...], OPTION as --kernel-option takes it; NAME= alone: the
# defaults), the variants alternating inside each config, ROUNDS times. Each bench's table and JSON land in $OUT/w,
# packed into $OUT/all.tgz every 15 s, so a run cut by its time limit still returns what it had; the summary lines
# (config, variant, round, the megakernel rows) go to $OUT/w/ab.log. MICROBENCH: dev/microbench/*.cu files to build and
# run first (each one's output in $OUT/w/<name>.txt). AFTER: a shell command run last, with OUT=$OUT/w (e.g. profiles
# into $OUT/<name>: packed like the rest). A variant named NAME@TREE benches the tree dev/prebuild_tree.sh made in
# build/ab/TREE (another commit's engine and kernel, its own prebuilt modules) instead of this one: two builds, one run.
#   VARIANTS="pairs= single=tile_page_pairs=0" CONFIGS="--batch 32,64;--prefill-len 2048" bash dev/gpu_option_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. dev/gpu_run_pack.sh
step() { echo "$1 t=$(( $(date +%s) - START ))" | tee -a "$OUT/steps.log"; }
for mb in ${MICROBENCH:-}; do
  name=$(basename "$mb" .cu)
  nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -I csrc -o "/tmp/$name" "$mb" \
    > "$OUT/$name.txt" 2>&1 && timeout 120 "/tmp/$name" >> "$OUT/$name.txt" 2>&1
  step "microbench $name rc=$?"
done
python3 -m engine.cuda_build > "$OUT/build.log" 2>&1; step "build rc=$?"
if [ -n "${TESTS:-}" ]; then
  # shellcheck disable=SC2086  # a list of test paths
  timeout "${TESTS_TIMEOUT_S:-200}" python3 -m pytest -q -x $TESTS > "$OUT/gpu_tests.log" 2>&1
  step "gpu tests rc=$? $(tail -1 "$OUT/gpu_tests.log")"
fi
IFS=';' read -r -a configs <<< "${CONFIGS:---batch 32,64}"
for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
  for c in "${!configs[@]}"; do
    for spec in ${VARIANTS:-"base="}; do
      name=${spec%%=*}; opts=(); items=(); tree=$PWD; prebuilt=${MEGAKERNEL_PREBUILT_DIR:-}
      if [[ $name == *@* ]]; then
        tree=$PWD/build/ab/${name#*@}; prebuilt=$tree/build/prebuilt; name=${name%%@*}
        [[ -d $tree ]] || { step "bench variant $spec: no $tree (dev/prebuild_tree.sh)"; continue; }
      fi
      [[ -n ${spec#*=} ]] && IFS=, read -r -a items <<< "${spec#*=}"
      for item in "${items[@]}"; do opts+=(--kernel-option "$item"); done
      tag="c${c}_${name}_r${r}"
      # shellcheck disable=SC2086  # the config splits into bench arguments on purpose
      (cd "$tree" && MEGAKERNEL_PREBUILT_DIR=$prebuilt timeout "${BENCH_TIMEOUT_S:-200}" python3 -m engine.cli bench \
        ${configs[$c]} "${opts[@]}" --json "$OUT/$tag.json" > "$OUT/$tag.txt" 2>&1)
      step "bench $tag rc=$? [${configs[$c]}] ${opts[*]}${tree#"$PWD"}"
      { echo "== $tag [${configs[$c]}] ${opts[*]}"; grep -E "^(megakernel|batch|  *[0-9]+ )|ms" "$OUT/$tag.txt" | head -20; } \
        >> "$OUT/ab.log"
    done
  done
done
if [ -n "${AFTER:-}" ]; then
  eval "$AFTER" > "$OUT/after.log" 2>&1
  step "after rc=$?"
fi
kill $PACKER
cat "$OUT/steps.log" "$OUT/ab.log"
