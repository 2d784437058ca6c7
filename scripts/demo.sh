#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, installs what is missing, builds tpusim, runs the
# Fashion-MNIST test set (10,000 images) on every shipped chip version with `tpusim compare`
# (each chip in its own process, checked bit for bit against the quantized reference) and writes
# the comparison and the HTML report into results/demo/:
#   comparison.json (tpusim.compare/1, every chip's full run report), comparison.md, comparison.csv,
#   report.html (self-contained: rooflines, cycle buckets, energy, chip comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${TPUSIM_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja
cmake --build "$build_dir" -j "$(nproc)" --target tpusim

out=results/demo
mkdir -p "$out"
images=${TPUSIM_DEMO_IMAGES:-10000}
chips=()
for c in v1 v2 v3 v4 edge; do chips+=(--chip "configs/chips/$c.json"); done
echo "=== Fashion-MNIST, $images test images, on v1 v2 v3 v4 edge"
"$build_dir/tpusim" compare "${chips[@]}" --images "$images" \
  --json "$out/comparison.json" --markdown "$out/comparison.md" --csv "$out/comparison.csv"
scripts/report.py "$out/comparison.json" --html "$out/report.html"
echo
echo "Wrote $out/comparison.{json,md,csv} and $out/report.html"
