#!/usr/bin/env bash
# The default job: installs what it needs into ./.venv, then writes a random checkpoint of a preset and
# generates with it (the CUDA megakernel on an sm_90 GPU; the CPU reference backend otherwise).
# Extra arguments go to `megakernel demo` (e.g. --preset llama-3.2-1b --max-tokens 64).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
exec .venv/bin/megakernel demo "$@"
