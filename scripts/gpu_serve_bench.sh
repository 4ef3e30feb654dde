#!/usr/bin/env bash
# On the GPU machine: `megakernel serve` (cuda backend, random Llama-3.2-1B-shape checkpoint) driven
# by `megakernel bench-serve` at concurrency 1, 8 and 32 (greedy), 1 and 32 (temperature 1); JSON + server log under $OUT/serve.
# The image there lacks the server's packages: `scripts/fetch_server_wheels.sh` here, then carry .whl/.
# GREEDY / SAMPLED: comma-separated "concurrency prompts" pairs (default "1 16,8 64,32 128" and "1 16,32 128"; e.g.
# GREEDY="1 16" SAMPLED="" for one streaming client only, beside a same-run `megakernel bench`); SERVE_ARGS: more flags
# for `serve` (e.g. "--kernel-option host_steps=0" for an A/B).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/serve"
. scripts/server_wheels_env.sh || exit 1
MODEL=${MODEL:-/tmp/mk-llama-1b}
BACKEND=${BACKEND:-cuda}
[ -f "$MODEL/config.json" ] || python3 -m engine.cli init-random --preset llama-3.2-1b --out "$MODEL" || exit 1
python3 -m ${SERVE_WRAP:+$SERVE_WRAP }engine.cli serve --model "$MODEL" --backend "$BACKEND" --port 8011 --max-model-len 2048 \
  --served-model-name llama-1b-random ${SERVE_ARGS:-} >"$OUT/serve/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 300); do
  curl -sf http://127.0.0.1:8011/health >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "server died:"; tail -30 "$OUT/serve/server.log"; exit 1; }
  sleep 1
done
status=0
IFS=, read -r -a greedy_cfgs <<< "${GREEDY-1 16,8 64,32 128}"
IFS=, read -r -a sampled_cfgs <<< "${SAMPLED-1 16,32 128}"
for cfg in "${greedy_cfgs[@]}"; do
  set -- $cfg
  echo "=== bench-serve concurrency $1, $2 prompts, 128 in / 128 out"
  python3 -m engine.cli bench-serve --base-url http://127.0.0.1:8011 --num-prompts "$2" --input-len 128 \
    --output-len 128 --max-concurrency "$1" --seed 0 --output "$OUT/serve/bench_c$1.json" || status=1
done
for cfg in "${sampled_cfgs[@]}"; do  # every request sampled at temperature 1 (on the GPU)
  set -- $cfg
  echo "=== bench-serve concurrency $1, $2 prompts, 128 in / 128 out, temperature 1"
  python3 -m engine.cli bench-serve --base-url http://127.0.0.1:8011 --num-prompts "$2" --input-len 128 \
    --output-len 128 --max-concurrency "$1" --seed 0 --temperature 1.0 --output "$OUT/serve/bench_c$1_t1.json" || status=1
done
curl -s http://127.0.0.1:8011/metrics | grep -E "^megakernel:(prompt_tokens|generation_tokens|kv_cache|step_stream|num_preemptions)" | grep -v _created | head -10
tail -5 "$OUT/serve/server.log"
exit $status
