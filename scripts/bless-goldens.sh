#!/usr/bin/env bash
# Rewrites the golden reports (tb/golden/reports/) on purpose, after a change that moves numbers:
# builds tpusim, runs every shipped chip config x workload of tb/golden/workloads.json and prints
# what changed, case by case, for the commit message. Arguments go to golden.py bless: case names
# to bless only those (tb/golden/golden.py list), --diff for every moved field, -j N.
# docs/robustness.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TPUSIM_BUILD_DIR:-build}
if [[ ! -f $build_dir/build.ninja ]]; then
  cmake -S . -B "$build_dir" -G Ninja
fi
cmake --build "$build_dir" -j "$(nproc)" --target tpusim
exec /usr/bin/python3 tb/golden/golden.py bless --tpusim "$build_dir/tpusim" "$@"
