#!/usr/bin/env bash
# Runs the test suite: installs what it needs into ./.venv, then pytest. GPU tests (-m gpu) skip
# cleanly without an sm_90 GPU. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
exec .venv/bin/python -m pytest -q "$@"
