#!/usr/bin/env bash
# Compile every CUDA module under csrc (files marked `// compile-check: module NAME`) with nvcc for
# sm_90a, import each (catches unresolved symbols), and print registers/stack/spills per kernel from
# `-Xptxas -v`. Needs no GPU. Exit status is non-zero on any compile, link or import error.
# Usage: scripts/compile_check.sh [--force]     (PYTHON=... to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" -m engine.cuda_build "$@"
