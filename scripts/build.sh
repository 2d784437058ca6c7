#!/usr/bin/env bash
# Configures and builds tpusim into build/ (Release-with-debug-info, Ninja). Extra arguments go
# to cmake's configure step, e.g. scripts/build.sh -DTPUSIM_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TPUSIM_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja "$@"
cmake --build "$build_dir" -j "$(nproc)"
