# Sourced (not run) by the GPU serving scripts, from the repository root: installs the server's packages from .whl/
# (scripts/fetch_server_wheels.sh, for images that lack them) into /tmp/site and puts them and the repository on
# PYTHONPATH. Returns non-zero when the install fails.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
