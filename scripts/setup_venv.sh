#!/usr/bin/env bash
# Creates ./.venv with the package and its dev extras. Idempotent: a second run only re-checks.
# Why torch first: a plain `torch` requirement would pull a multi-GB CUDA build; the CPU wheel that
# ships on these machines (or any torch already importable) satisfies the `torch>=2.6` bound.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating ./.venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch (CPU build) into ./.venv"
  cpu_wheel=$(ls /opt/wheels/torch-*+cpu-*.whl 2>/dev/null | head -n 1 || true)
  if [ -n "$cpu_wheel" ]; then
    "$VPY" -m pip install -q "$cpu_wheel"
  else
    "$VPY" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu \
      || "$VPY" -m pip install -q torch
  fi
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  echo "setup: installing the megakernel package and its dependencies into ./.venv (a minute or two, once)"
  # One line per package as it comes; a failed install still fails the script (pipefail).
  "$VPY" -m pip install --progress-bar off -e ".[dev]" | { grep -E "^(Collecting|Successfully)" || true; }
  touch .venv/.installed
fi
