#!/usr/bin/env bash
# Download the server's Python packages as CPython 3.12 manylinux wheels into .whl/ (git-ignored), for
# GPU machines whose image lacks them (scripts/gpu_serve_bench.sh installs them from there). Versions
# are the ones the server is tested with; pip on this machine must reach a package index.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PKGS=(fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0
      typing-inspection==0.4.5 annotated-doc==0.0.7 opentelemetry-api==1.45.2 uvicorn==0.54.0 h11==0.16.0
      click==8.5.1 anyio==4.16.0 sniffio==1.3.1 prometheus_client==0.26.0 httpx==0.28.1 httpcore==1.0.9
      idna==3.20 certifi==2026.10.18)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${PKGS[@]}"
ls .whl
