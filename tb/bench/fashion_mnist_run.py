#!/usr/bin/env python3
"""Benchmark: `tpusim run` on the Fashion-MNIST test set, per chip config.

Runs each chip REPEAT times and prints medians of: wall seconds of the whole command, seconds
spent simulating, seconds the quantized and float references in sw/nn took on the same inputs
(they run in the same process, on another thread), simulated MACs per host second, and the ratio of
simulation to reference time. The machines are shared: quote medians, not single runs.

Usage: tb/bench/fashion_mnist_run.py [--build build] [--images 10000] [--repeat 3] [CHIP ...]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("chips", nargs="*", default=["v1", "v2", "v3", "v4", "edge"])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--images", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    tpusim = os.path.join(a.build, "tpusim")
    print(f"tpusim run, Fashion-MNIST CNN, {a.images} images, median of {a.repeat} runs")
    print(f"{'chip':6} {'wall s':>8} {'sim s':>8} {'ref s':>8} {'sim MAC/s':>11} {'sim/ref':>8} {'bit-exact':>9}")
    for chip in a.chips:
        walls, sims, refs, rates, exact = [], [], [], [], True
        for _ in range(a.repeat):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                t = time.monotonic()
                subprocess.run([tpusim, "run", "--chip", os.path.join(ROOT, "configs/chips", chip + ".json"),
                                "--images", str(a.images), "--json", out.name],
                               check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
                walls.append(time.monotonic() - t)
                r = json.load(open(out.name))
            h = r["host"]
            sims.append(h["simulation_wall_seconds"])
            refs.append(h["reference_wall_seconds"])
            rates.append(h["simulated_macs_per_s"])
            exact = exact and r["accuracy"]["bit_exact"]
        sim, ref = statistics.median(sims), statistics.median(refs)
        print(f"{chip:6} {statistics.median(walls):8.2f} {sim:8.2f} {ref:8.2f} "
              f"{statistics.median(rates):11.3g} {sim / ref:8.2f} {'yes' if exact else 'NO':>9}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
