#!/usr/bin/env bash
# Another commit's engine and kernel as a tree of its own, its CUDA modules prebuilt, for a same-run A/B of two
# builds on one GPU machine (a kernel change that no --kernel-option switches off):
#   bash dev/prebuild_tree.sh COMMIT NAME     -> build/ab/NAME (its sources, its build/prebuilt; about 10 MB)
#   VARIANTS="new= old@NAME=" CONFIGS="--batch 16,32" bash dev/gpu_option_ab.sh   (carry "build": it holds both)
# The tree takes the packages a bench imports (no docs, no tests); it uses this checkout's .venv to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: bash dev/prebuild_tree.sh COMMIT NAME" >&2; exit 2; }
commit=$1 name=$2 dst=build/ab/$2
[ -x .venv/bin/python ] || { echo "prebuild_tree: no .venv here (bash scripts/setup_venv.sh first)" >&2; exit 1; }
echo "prebuild_tree: $commit ($(git log -1 --format=%s "$commit" | cut -c1-60)) into $dst"
rm -rf "$dst"
mkdir -p "$dst"
git archive "$commit" csrc engine models profiler server dev scripts pyproject.toml | tar -x -C "$dst"
ln -s "$PWD/.venv" "$dst/.venv"
(cd "$dst" && bash dev/prebuild_modules.sh)
rm "$dst/.venv"  # a link out of the tree would not travel
du -sh "$dst"
