#!/usr/bin/env bash
# A/B `megakernel serve` settings inside ONE GPU machine's run: each variant is a fresh server (cuda backend, a random
# Llama-3.2-1B-shape checkpoint) driven by `megakernel bench-serve` at each concurrency in $LEVELS (default "32 128";
# 4x that many requests, 128 in / 128 out, greedy, after a warm-up pass), the variants interleaved $ROUNDS times.
#   dev/serve_ab.sh "process=" "thread=--no-engine-process" "async=--async-scheduling"
# One line per measurement into $OUT/serve_ab.log, and one of what it cost the host (dev/serve_probe.py: the server's
# CPU per output token, the share of the device's decode-run time spent waiting for the host); each server's log and
# bench JSON under $OUT/serve_ab/. Stops starting servers after $BUDGET_S seconds (default 420) so a run's time limit
# does not cut a pass in half.
# Needs the server's packages where the image lacks them: scripts/fetch_server_wheels.sh here, then carry .whl/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/serve_ab"
. scripts/server_wheels_env.sh || exit 1
START=$(date +%s)
LOG=$OUT/serve_ab.log
MODEL=${MODEL:-/tmp/mk-llama-1b}
BACKEND=${BACKEND:-cuda}  # BACKEND=torch PRESET=tiny: the script itself tried on a CPU
[ -f "$MODEL/config.json" ] || python3 -m engine.cli init-random --preset "${PRESET:-llama-3.2-1b}" --out "$MODEL" \
  >/dev/null || exit 1
if [ "$BACKEND" = cuda ]; then
  python3 -m engine.cuda_build >"$OUT/serve_ab/build.log" 2>&1 || { echo "build failed" | tee -a "$LOG"; exit 1; }
  echo "built in $(( $(date +%s) - START )) s" | tee -a "$LOG"
fi
one() {  # one() NAME ROUND SERVE_ARGS...
  local name=$1 round=$2; shift 2
  local tag=${name}_r$round
  local launcher=(-m engine.cli)  # STACKS_FOR=NAME: that variant's server runs under dev/stack_sampler.py
  [ "$name" = "${STACKS_FOR:-}" ] && launcher=(-m dev.stack_sampler "$OUT/serve_ab/stacks_$tag.txt" engine.cli)
  python3 "${launcher[@]}" serve --model "$MODEL" --backend "$BACKEND" --port 8011 --max-model-len 2048 --served-model-name m \
    "$@" >"$OUT/serve_ab/server_$tag.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    curl -sf http://127.0.0.1:8011/health >/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "$tag: server died" | tee -a "$LOG"; return; }
    sleep 1
  done
  timeout 120 python3 -m engine.cli bench-serve --base-url http://127.0.0.1:8011 --num-prompts 64 --input-len 128 --output-len 128 \
    --max-concurrency 32 --seed 1 >/dev/null 2>&1  # warm-up
  for c in ${LEVELS:-32 128}; do
    python3 -m dev.serve_probe snapshot $pid http://127.0.0.1:8011 >"$OUT/serve_ab/${tag}_c${c}_before.json" 2>/dev/null
    timeout 120 python3 -m engine.cli bench-serve --base-url http://127.0.0.1:8011 --num-prompts $((4 * c)) \
      --input-len 128 --output-len 128 --max-concurrency "$c" --seed 0 --output "$OUT/serve_ab/${tag}_c$c.json" \
      >/dev/null 2>&1
    python3 - "$OUT/serve_ab/${tag}_c$c.json" "$tag" "$c" <<'PY' | tee -a "$LOG"
import json, sys
try:
    s = json.load(open(sys.argv[1]))
    print(f"{sys.argv[2]} c={sys.argv[3]}: {s['output_throughput']:.0f} tok/s, TTFT p50 {s['median_ttft_ms']:.0f} ms, "
          f"TPOT p50 {s['median_tpot_ms']:.2f} ms, {s['completed']} done, {s['failed']} failed, "
          f"{s['total_output_tokens']} tokens {s['errors'][:1]}")
except Exception as exc:  # noqa: BLE001
    print(f"{sys.argv[2]} c={sys.argv[3]}: no result ({exc})")
PY
    python3 -m dev.serve_probe snapshot $pid http://127.0.0.1:8011 >"$OUT/serve_ab/${tag}_c${c}_after.json" 2>/dev/null &&
      echo "$tag c=$c: $(python3 -m dev.serve_probe diff "$OUT/serve_ab/${tag}_c${c}_before.json" \
        "$OUT/serve_ab/${tag}_c${c}_after.json" $((4 * c * 128)))" | tee -a "$LOG"
  done
  kill -INT $pid
  for _ in $(seq 20); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -0 $pid 2>/dev/null && { echo "$tag: server still up 20 s after SIGINT: killed" | tee -a "$LOG"; pkill -9 -P $pid; kill -9 $pid; }
  wait $pid 2>/dev/null
}
for round in $(seq "${ROUNDS:-2}"); do
  for spec in "$@"; do
    [ $(( $(date +%s) - START )) -gt "${BUDGET_S:-420}" ] && { echo "time budget spent: stopping" | tee -a "$LOG"; exit 0; }
    name=${spec%%=*}; args=${spec#*=}
    # shellcheck disable=SC2086  # the variant's flags split into words on purpose
    one "$name" "$round" $args
  done
done
