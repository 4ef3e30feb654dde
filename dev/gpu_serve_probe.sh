#!/usr/bin/env bash
# One GPU machine's run (the `run` tool): build the extension, optionally the GPU tests in $TESTS, then dev/serve_ab.sh
# over $VARIANTS (default: the defaults against --no-engine-process) at LEVELS "32 128", one round, each level with
# dev/serve_probe.py's line (CPU per token, the GPU's idle share in runs, the engine's seconds per kind of step).
# Everything lands in $OUT/w and is packed into $OUT/all.tgz every 15 s, so a run cut by its time limit still returns
# what it had. Carry .whl/ (scripts/fetch_server_wheels.sh). TESTS_TIMEOUT_S bounds the tests (150 s).
#   VARIANTS="base= nohead=--kernel-option=pad_headroom=0" TESTS="tests/gpu/test_megakernel_engine.py" \
#     bash dev/gpu_serve_probe.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. dev/gpu_run_pack.sh
. scripts/server_wheels_env.sh || exit 1
( python3 -m engine.cli init-random --preset llama-3.2-1b --out /tmp/mk-llama-1b > "$OUT/init.log" 2>&1 ) &
INIT=$!  # waited for by pid: a bare `wait` would also wait for the packer loop, forever
python3 -m engine.cuda_build > "$OUT/build.log" 2>&1; echo "build rc=$? t=$(( $(date +%s) - START ))" | tee -a "$OUT/steps.log"
if [ -n "${TESTS:-}" ]; then
  # shellcheck disable=SC2086  # a list of test paths
  timeout "${TESTS_TIMEOUT_S:-150}" python3 -m pytest -q -x $TESTS > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? t=$(( $(date +%s) - START )) $(tail -1 "$OUT/gpu_tests.log")" | tee -a "$OUT/steps.log"
fi
wait $INIT
export ROUNDS=${ROUNDS:-1} BUDGET_S=${BUDGET_S:-330} LEVELS=${LEVELS:-"32 128"}
# shellcheck disable=SC2086  # the variants split into words on purpose
timeout "${SERVE_AB_TIMEOUT_S:-380}" bash dev/serve_ab.sh ${VARIANTS:-base= thread=--no-engine-process}
echo "serve_ab rc=$? t=$(( $(date +%s) - START ))" | tee -a "$OUT/steps.log"
pkill -9 -f "engine.cli serve"; kill $PACKER
cat "$OUT/steps.log" "$OUT/serve_ab.log"
