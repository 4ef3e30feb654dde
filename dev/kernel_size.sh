#!/usr/bin/env bash
# Code size of ONE instantiation of the interpreter kernel, in seconds and without a GPU: compiles only
# megakernel<TIMING, VARIANT> (interpreter.cu up to its host part) to a cubin with the module's nvcc flags and
# prints its .text bytes, the not-inlined functions inside it, and ptxas' registers / stack / spills.
# Code that never runs, left between the instructions a layer executes, costs time (instruction-cache misses),
# so a change's bytes are worth a look before its A/B.
# Usage: dev/kernel_size.sh [TREE=.] [VARIANT=2 (0 general, 1 batch-1 split, 2 batch-1 fused)] [TIMING=false]
set -euo pipefail
tree=$(cd "${1:-.}" && pwd); variant=${2:-2}; timing=${3:-false}
nvcc_bin=${MEGAKERNEL_NVCC:-nvcc}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The kernel part of interpreter.cu ends where its host bindings begin (the anonymous namespace).
awk '/^namespace \{/ {exit} {print}' "$tree/csrc/interpreter/interpreter.cu" | grep -v pybind11 > "$tmp/one.cu"
echo "template __global__ void mk::vm::megakernel<$timing, $variant>(const __grid_constant__ mk::vm::Globals);" >> "$tmp/one.cu"
"$nvcc_bin" -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -Xptxas -v -cubin \
  -I"$tree/csrc/interpreter" -I"$tree/csrc" -o "$tmp/one.cubin" "$tmp/one.cu" 2> "$tmp/ptxas.txt"
python3 - "$tmp/one.cubin" "$tmp/ptxas.txt" <<'EOF'
import re, subprocess, sys
cubin, ptxas = sys.argv[1], sys.argv[2]
sections = subprocess.run(["readelf", "-S", "-W", cubin], capture_output=True, text=True).stdout
for m in re.finditer(r"\] (\.text\._ZN2mk2vm10megakernel\S*)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)", sections):
    print(f"{int(m.group(2), 16):8d} B  kernel {m.group(1)[len('.text.'):]}")
symbols = subprocess.run(["readelf", "-s", "-W", cubin], capture_output=True, text=True).stdout
funcs = sorted((int(p[2]), p[7]) for p in (l.split() for l in symbols.splitlines())
               if len(p) >= 8 and p[3] == "FUNC" and p[2].isdigit() and int(p[2]) > 0 and "$" in p[7])
for size, name in funcs:
    inner = name.rsplit("$", 1)[-1]
    demangled = subprocess.run(["c++filt", inner], capture_output=True, text=True).stdout.strip()
    print(f"{size:8d} B    {demangled[:110]}")
text = open(ptxas).read()
m = re.search(r"Function properties for _ZN2mk2vm10megakernel\S*\n\s*(.*)\n.*Used (\d+) registers", text)
if m:
    print(f"ptxas: kernel {m.group(2)} registers, {m.group(1).strip()}")
EOF
