#!/usr/bin/env bash
# The one test command: installs what is missing, then runs its stages and stops at the first
# failure (docs/robustness.md):
#   build     configure and build build/, run every ctest test but the goldens
#   golden    the golden regressions (ctest label golden): every shipped chip x workload report
#             against tb/golden/reports/; a moved number prints the fields that moved
#   asan      the whole project built with ASan + UBSan in build-asan/, its unit, system and rtl tests
#   fuzz      tb/fuzz's libFuzzer targets built with clang in build-fuzz/, each run for
#             TPUSIM_FUZZ_SECONDS (default 60) on corpora seeded from the shipped files
# Extra arguments go to the build stage's ctest, e.g. scripts/test.sh -L unit.
# TPUSIM_TEST_STAGES picks stages (default "build golden asan fuzz"), e.g.
# TPUSIM_TEST_STAGES=build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

stages=${TPUSIM_TEST_STAGES:-build golden asan fuzz}
jobs=$(nproc)
declare -a timings=()

run_stage() {
  local name=$1
  shift
  echo "=== test.sh: stage ${name} ==="
  local start=$SECONDS
  "$@"
  local took=$((SECONDS - start))
  timings+=("${name} ${took} s")
  echo "=== test.sh: stage ${name} passed in ${took} s ==="
}

stage_build() {
  scripts/build.sh
  ctest --test-dir "${TPUSIM_BUILD_DIR:-build}" --output-on-failure -j "$jobs" -LE golden "$@"
}

stage_golden() {
  ctest --test-dir "${TPUSIM_BUILD_DIR:-build}" --output-on-failure -j "$jobs" -L golden
}

stage_asan() {
  local dir=${TPUSIM_ASAN_BUILD_DIR:-build-asan}
  # RelWithDebInfo: optimised enough that the system tests run in minutes, with line numbers in
  # every report (-g1: line tables and function names, all a sanitizer's stack trace prints; full
  # -g took a third longer to compile). The test sources build at -O0 (tb/CMakeLists.txt).
  # The Verilated RTL stays in and its tests run too: it adds about a fifth to the build (the
  # models compile as in build/, uninstrumented) and seconds to the tests.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DTPUSIM_SANITIZE=address,undefined
  cmake --build "$dir" -j "$jobs"
  # abort_on_error for all three sanitizers: any report ends its process on SIGABRT, which every
  # harness counts as a crash, also in the processes tests start (tpusim, a sweep's runs); UBSan
  # would otherwise exit with status 1, which tpusim sweep and compare use themselves. Leaks are
  # findings and nothing is suppressed (docs/robustness.md).
  # The fault suite's random tests run 4 trials each here (TPUSIM_FAULT_TRIALS): the signal paths
  # under the sanitizers, at a fraction of their time in stage build.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0 \
    UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
    TPUSIM_FAULT_TRIALS=${TPUSIM_FAULT_TRIALS:-4} \
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L "unit|system|rtl"
}

stage_fuzz() {
  local dir=${TPUSIM_FUZZ_BUILD_DIR:-build-fuzz}
  cmake -S tb/fuzz -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DTPUSIM_FUZZ_SECONDS="${TPUSIM_FUZZ_SECONDS:-60}"
  cmake --build "$dir" -j "$jobs"
  # One target per core; each prints its executions in its closing stats (docs/robustness.md).
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L fuzz
  awk '/^[0-9]+\/[0-9]+ Test: /{t=$3} /stat::number_of_executed_units/{print "test.sh: " t ": " $2 " executions"}' \
    "$dir"/Testing/Temporary/LastTest.log
}

for s in $stages; do
  case $s in
    build) run_stage build stage_build "$@" ;;
    golden) run_stage golden stage_golden ;;
    asan) run_stage asan stage_asan ;;
    fuzz) run_stage fuzz stage_fuzz ;;
    *)
      echo "test.sh: unknown stage '$s' (stages: build golden asan fuzz)" >&2
      exit 2
      ;;
  esac
done
echo "=== test.sh: all stages passed: ${timings[*]} ==="
