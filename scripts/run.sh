#!/usr/bin/env bash
# The default job: installs what it needs into ./.venv, then chats with a real model (fetched once) and, on an
# sm_90 GPU, times the Llama-3.2-1B shape on random weights (the CUDA megakernel on an sm_90 GPU; the CPU
# reference backend otherwise). Extra arguments go to `megakernel demo` (e.g. --preset llama-3.2-1b).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
exec .venv/bin/megakernel demo "$@"
