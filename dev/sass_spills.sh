#!/usr/bin/env bash
# Where the megakernel spills: disassemble the built interpreter (nvdisasm -g, needs the CUDA toolkit's
# cuobjdump/nvdisasm, present on the GPU machines; on a CPU-only machine the PyPI wheels nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm carry them: `pip download --no-deps -d D nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`, unzip,
# put their nvidia/cu13/bin on PATH; no GPU is needed) and list every local-memory load/store (LDL/STL) with
# the source line it belongs to (parsed by dev/sass_spills.py). Some are not spills: sincosf's slow path keeps its
# range reduction in a local array.
# Usage: OUT=out dev/sass_spills.sh   (writes $OUT/sass_spills.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
so=$(python3 -c "from engine.cuda_build import load_extension; print(load_extension('mk_interpreter').__file__)")
tmp=$(mktemp -d)
(cd "$tmp" && cuobjdump -xelf all "$so" > /dev/null)
for c in "$tmp"/*.cubin; do nvdisasm -g -c "$c"; done > "$tmp/sass.txt"
python3 -m dev.sass_spills "$tmp/sass.txt" > "$OUT/sass_spills.txt"
rm -rf "$tmp"
cat "$OUT/sass_spills.txt"
