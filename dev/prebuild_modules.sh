#!/usr/bin/env bash
# Compile the CUDA modules on this CPU machine for the GPU machines (Python 3.12, nvcc 13.0: ../shared/GPU.md) into
# build/prebuilt/, so a `run` that carries it skips nvcc's two to three minutes of device time:
#   bash dev/prebuild_modules.sh
#   run(command="export MEGAKERNEL_PREBUILT_DIR=build/prebuilt; ...", carry=["build/prebuilt", ...])
# A module that does not import there is compiled there as before (engine/cuda_build.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PREBUILD_PYTHON:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
[ -n "$PY" ] || { echo "prebuild: no Python 3.12 here (set PREBUILD_PYTHON)" >&2; exit 1; }
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
# pybind11 is headers and a locator: the venv's copy serves the other Python too
ln -s "$(.venv/bin/python -c 'import os, pybind11; print(os.path.dirname(pybind11.__file__))')" "$shim/pybind11"
echo "prebuild: compiling the CUDA modules for $("$PY" --version) into build/prebuilt (a few minutes)"
env -u MEGAKERNEL_PREBUILT_DIR PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$shim:$PWD" "$PY" -m dev.prebuild_modules build/prebuilt
du -sh build/prebuilt
