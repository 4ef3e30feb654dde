#!/usr/bin/env bash
# One GPU run: build the CUDA modules, run the GPU tests, compute-sanitizer on a decode step, the
# decode benchmark and a profile; logs and JSON go to $OUT (default ./out). Parts are selectable:
#   scripts/gpu_check.sh [build] [tests] [sanitize] [sanitize-tiles] [bench] [bench-fast] [bench-batch] [bench-sweep] [bench-prefill] [bench-long] [bench-long32k] [profile]
#   (default: all but the bench-* parts other than bench; bench-batch runs `bench --batch N` for N
#   in $BATCHES, default 8 32; bench-sweep one `bench --batch 1,8,16,32,64` (JSON + PNG); bench-prefill `bench --prefill-len L` for L in $PREFILL_LENS, default 512 2048;
#   bench-long the 8k-context decode, default splits and `attn_splits_whole_wave=0`; bench-long32k: 32k-context batch-1 decode of the 1B and 8B shapes and one 32k sequence decoded
#   with fifteen of 1k (the long-context issue's targets))
# Runs on the GPU machine's system python (torch there); the repo root is put on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
PY=${PY:-python3}
parts=${*:-build tests sanitize bench profile}
LOG=$OUT/gpu_check.log
status=0
run() {  # run NAME CMD...: log it, remember failures, keep going
  local name=$1; shift
  echo "=== [$name] $* ($(date -u +%H:%M:%S))" | tee -a "$LOG"
  if ! "$@" 2>&1 | tee -a "$LOG"; then echo "=== [$name] FAILED" | tee -a "$LOG"; status=1; fi
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; $PY -c "import torch; print('torch', torch.__version__)"; } 2>&1 | tee -a "$LOG"
for part in $parts; do
  case $part in
    build) run build $PY -m engine.cuda_build ;;
    tests) run tests timeout ${TEST_TIMEOUT:-1200} $PY -m pytest -m gpu ${TEST_PATHS:-tests/gpu tests/tk tests/bench} -q -rA --durations=10 -p no:cacheprovider ${PYTEST_ARGS:-} ;;
    sanitize) run sanitize compute-sanitizer --tool memcheck --error-exitcode 9 $PY -m dev.sanitize_step
              # the fused path's decode steps too: ring attention + W_o panel pages (2-D TMA), one head each
              run sanitize-fused env MEGAKERNEL_FUSE_O_PROJ=1 MEGAKERNEL_FUSED_HEAD_CHUNKS=2 \
                compute-sanitizer --tool memcheck --error-exitcode 9 $PY -m dev.sanitize_step ;;
    sanitize-tiles) # steps of many tokens as TILE_MATMUL tiles: memcheck, then shared-memory races. racecheck reports
              # hazards on the interpreter's handoffs ordered by mbarriers and acquire/release flags, which it does not
              # model (the instruction slots, the issued-pages word, the low cap); dev/racecheck_triage.py sorts them
              # and fails on any other. Under racecheck a step runs far past the watchdog's default: a longer one here.
              run sanitize-tiles compute-sanitizer --tool memcheck --error-exitcode 9 $PY -m dev.sanitize_step --tiles
              run racecheck-tiles-step env MEGAKERNEL_TIMEOUT_NS=100000000000 compute-sanitizer --tool racecheck \
                --print-limit 1000 --log-file "$OUT/racecheck_tiles.txt" $PY -m dev.sanitize_step --tiles
              run racecheck-tiles $PY -m dev.racecheck_triage "$OUT/racecheck_tiles.txt" ;;
    bench) run bench $PY -m engine.cli bench --compile-mode default --json "$OUT/bench.json" ;;
    bench-fast) run bench-fast $PY -m engine.cli bench --skip eager,compile --json "$OUT/bench_fast.json" ;;
    bench-batch) for b in ${BATCHES:-8 32}; do  # the product path with N requests at once vs batched PyTorch
                   run bench-batch-$b $PY -m engine.cli bench --batch "$b" --skip eager,compile --json "$OUT/bench_batch$b.json"
                 done ;;
    bench-sweep) run bench-sweep $PY -m engine.cli bench --batch ${SWEEP:-1,8,16,32,64} --skip eager \
                   --json "$OUT/bench_sweep.json" --plot "$OUT/bench_sweep.png" ;;
    bench-prefill) for l in ${PREFILL_LENS:-512 2048}; do  # time to first token vs a compiled PyTorch prefill
                     run bench-prefill-$l $PY -m engine.cli bench --prefill-len "$l" --json "$OUT/bench_prefill$l.json"
                   done ;;
    bench-long) run bench-long $PY -m engine.cli bench --prompt-len 8000 --new-tokens 64 --skip eager,compile \
                  --json "$OUT/bench_long.json"
                run bench-long-roundup $PY -m engine.cli bench --prompt-len 8000 --new-tokens 64 --skip eager,compile \
                  --kernel-option attn_splits_whole_wave=0 --json "$OUT/bench_long_roundup.json" ;;
    bench-long32k) run bench-long32k $PY -m engine.cli bench --prompt-len 32000 --new-tokens 64 --skip eager,compile \
                     --json "$OUT/bench_long32k.json"
                   run bench-long32k-8b $PY -m engine.cli bench --preset llama-3.1-8b --prompt-len 32000 --new-tokens 64 \
                     --skip eager,compile --json "$OUT/bench_long32k_8b.json"
                   run bench-mixed $PY -m engine.cli bench --prompt-lens 32000,1000x15 --new-tokens 64 \
                     --json "$OUT/bench_mixed.json" ;;
    profile) run profile $PY -m engine.cli profile --backend cuda --preset llama-3.2-1b --prompt-len 32 --steps 1 --out "$OUT/profile"
             run profile-raw test -s "$OUT/profile/raw.npz"  # kept: re-render anywhere with `profile --from DIR`
             rm -f "$OUT/profile/trace.json" "$OUT/profile/summary.json" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
exit $status
