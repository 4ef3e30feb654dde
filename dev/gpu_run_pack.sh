# Sourced by the one-GPU-run scripts (gpu_option_ab.sh, gpu_serve_probe.sh): their outputs go to $OUT/w, packed into
# $OUT/all.tgz every 15 s and at exit, so a run cut by its time limit still returns what it had. Sets OUT_ROOT, OUT
# (exported), PACKER (the packing loop's pid: kill it at the end, and never `wait` without a pid) and START.
export OUT_ROOT=${OUT:-$PWD/out}
export OUT=$OUT_ROOT/w; mkdir -p "$OUT"
pack() { tar czf "$OUT_ROOT/all.tgz" -C "$OUT" . 2>/dev/null; }
trap pack EXIT
( while sleep 15; do pack; done ) &
PACKER=$!
START=$(date +%s)
