#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, installs what is missing, builds tpusim, runs the
# Fashion-MNIST test set (10,000 images) on every shipped chip version and writes a comparison
# report: results/demo/<chip>.json per chip and results/demo/comparison.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${TPUSIM_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja
cmake --build "$build_dir" -j "$(nproc)" --target tpusim

out=results/demo
mkdir -p "$out"
images=${TPUSIM_DEMO_IMAGES:-10000}
chips=(v1 v2 v3 v4 edge)
for c in "${chips[@]}"; do
  echo "=== $c: Fashion-MNIST, $images test images"
  "$build_dir/tpusim" run --chip "configs/chips/$c.json" --images "$images" --json "$out/$c.json"
  echo
done
python3 scripts/compare.py "${chips[@]/#/$out/}" --suffix .json --markdown "$out/comparison.md"
cat "$out/comparison.md"
