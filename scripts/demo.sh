#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, installs what is missing, builds tpusim, runs the
# Fashion-MNIST test set (10,000 images) on every shipped chip version with `tpusim compare`
# (each chip in its own process, checked bit for bit against the quantized reference), then the
# tutorial's training, `tpusim fit` on v3 (5 epochs x 60 steps x 1000 images, every step checked
# bit for bit against the training reference, Keras's log on the terminal), and writes the
# comparison, the training report and the HTML report into results/demo/:
#   comparison.json (tpusim.compare/1, every chip's full run report), comparison.md, comparison.csv,
#   fit.json (tpusim.fit/1),
#   report.html (self-contained: rooflines, cycle buckets, energy, chip comparison, training).
# TPUSIM_DEMO_IMAGES shortens the inference run; TPUSIM_DEMO_FIT_ARGS adds flags to the fit (e.g.
# "--epochs 1 --steps-per-epoch 5" for a quick look).
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
echo
echo "=== The tutorial's model.fit on v3: both TensorCores as replicas, checked every step"
# shellcheck disable=SC2086  # the extra flags are words
"$build_dir/tpusim" fit --chip configs/chips/v3.json --json "$out/fit.json" ${TPUSIM_DEMO_FIT_ARGS:-}
scripts/report.py "$out/comparison.json" "$out/fit.json" --html "$out/report.html"
echo
echo "Wrote $out/comparison.{json,md,csv}, $out/fit.json and $out/report.html"
