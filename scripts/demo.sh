#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, installs what is missing, builds tpusim, runs the
# Fashion-MNIST test set (10,000 images) on every shipped chip version with `tpusim compare`
# (each chip in its own process, checked bit for bit against the quantized reference), then the
# tutorial's training, `tpusim fit` on v3 (5 epochs x 60 steps x 1000 images, every step checked
# bit for bit against the training reference, Keras's log on the terminal), then the tutorial's
# own target, TPUStrategy on a v2-8 (`tpusim fit --system configs/systems/v2-8.json`: 4 chips, 8
# replicas of 125 images, the gradients all-reduced over the ICI, every replica checked every
# step, the tutorial's whole schedule: about 7 minutes on a 2-core machine), and writes the comparison, the training reports and the HTML report into
# results/demo/:
#   comparison.json (tpusim.compare/1, every chip's full run report), comparison.md, comparison.csv,
#   fit.json and fit_v2-8.json (tpusim.fit/1),
#   report.html (self-contained: rooflines, cycle buckets, energy, chip comparison, training).
# TPUSIM_DEMO_IMAGES shortens the inference run; TPUSIM_DEMO_FIT_ARGS adds flags to the v3 fit
# (e.g. "--epochs 1 --steps-per-epoch 5 --batch 1000" for a quick look; without --batch, a step
# takes the epoch's 60,000 images over 5); TPUSIM_DEMO_SYSTEM_FIT_ARGS adds flags to the v2-8 fit
# (the same quick look, a quarter of a minute; add "--trace results/demo/fit_v2-8.trace.json" to
# a short schedule for its Perfetto trace with a track per ICI link).
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
echo
echo "=== The tutorial's TPUStrategy on a v2-8: 4 chips, 8 replicas, gradients all-reduced over the ICI"
# shellcheck disable=SC2086  # the schedule's flags are words
"$build_dir/tpusim" fit --system configs/systems/v2-8.json --json "$out/fit_v2-8.json" \
  ${TPUSIM_DEMO_SYSTEM_FIT_ARGS:-}
scripts/report.py "$out/comparison.json" "$out/fit.json" "$out/fit_v2-8.json" --html "$out/report.html"
echo
echo "Wrote $out/comparison.{json,md,csv}, $out/fit.json, $out/fit_v2-8.json and $out/report.html"
