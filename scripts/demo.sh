#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, installs what is missing, builds tpusim and shows
# every shipped chip version: its resolved configuration and derived peaks, then a comparison
# table written to results/demo/chips.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${TPUSIM_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja
cmake --build "$build_dir" -j "$(nproc)" --target tpusim

out=results/demo
mkdir -p "$out"
chips=(v1 v2 v3 v4 edge)
for c in "${chips[@]}"; do
  echo "=== configs/chips/$c.json"
  "$build_dir/tpusim" info --chip "configs/chips/$c.json"
  echo
done

# A comparison table from the JSON each chip prints (written to a temp file, then renamed, so
# an interrupted run never leaves half a report).
tmp=$(mktemp "$out/chips.md.XXXXXX")
{
  echo "| chip | clock (MHz) | cores x MXUs | array | peak (T ops/s) | on-chip (MiB) | off-chip (GB/s) | ridge (MAC/B) | idle (W) |"
  echo "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"
  for c in "${chips[@]}"; do
    "$build_dir/tpusim" info --chip "configs/chips/$c.json" --json | python3 -c '
import json, sys
j = json.load(sys.stdin); c = j["chip"]; m = j["mxu"]
print(f"| {c[\"name\"]} | {j[\"clock_mhz\"]:g} | {j[\"tensor_cores\"]} x {m[\"count\"]} | "
      f"{m[\"rows\"]}x{m[\"cols\"]} {m[\"input_type\"]} | {c[\"peak_ops_per_s\"]/1e12:.2f} | "
      f"{c[\"on_chip_bytes\"]/2**20:.1f} | {c[\"off_chip_bytes_per_s\"]/1e9:g} | "
      f"{c[\"ridge_macs_per_byte\"]:.0f} | {c[\"idle_w\"]:g} |")'
  done
} > "$tmp"
mv "$tmp" "$out/chips.md"
echo "=== comparison ($out/chips.md)"
cat "$out/chips.md"
