#!/usr/bin/python3
"""Benchmark: design points per minute of `tpusim sweep`.

A 64-point sweep (TPU v1 base; square array 32/64/128/256 x clock 350/700/1050/1400 MHz x off-chip
bandwidth 17/34/68/136 GB/s) of the Fashion-MNIST CNN on 1,000 test images per point, run with
-j JOBS into a fresh directory REPEAT times. Prints the median points per minute, and where a
point's time goes (medians over all points of all repeats, per point):

  start-up    `tpusim info` on the base chip: exec, dynamic linking, SystemC's static set-up,
              config parsing, exit: what every point pays before it does any work
  run wall    the run's own `host.wall_seconds`: model, weights and data loading, quantization,
              compilation, elaboration and simulation
  simulating  `host.simulation_wall_seconds`, part of the run wall
  other       per-point wall time at -j JOBS (sweep wall x JOBS / points) minus run wall: process
              start-up and exit, writing the report, the sweep's bookkeeping, waiting for a core
  CPU         user + system seconds of the sweep and all its runs, per point: what the rate
              would be if the JOBS cores were this benchmark's alone

The machines are shared: quote medians, on a quiet machine.

Usage: tb/bench/sweep_bench.py [--build build] [--jobs 2] [--repeat 3] [--images 1000]"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spec(images):
    return {
        "name": "bench64",
        "description": "tb/bench/sweep_bench.py: 64 points of the Fashion-MNIST CNN",
        "base": os.path.join(ROOT, "configs/chips/v1.json"),
        "axes": [
            {"name": "array", "pointer": "/mxu/rows", "tied": ["/mxu/cols"], "values": [32, 64, 128, 256]},
            {"name": "clock_mhz", "pointer": "/clock_mhz", "values": [350, 700, 1050, 1400]},
            {"name": "bandwidth_gbps", "pointer": "/off_chip_memory/bandwidth_gbps", "values": [17, 34, 68, 136]},
        ],
        "workloads": [{"name": "fmnist", "model": os.path.join(ROOT, "configs/models/fashion_mnist_cnn.json"),
                       "images": images, "batch": 256}],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--images", type=int, default=1000)
    a = p.parse_args()
    tpusim = os.path.join(a.build, "tpusim")
    with tempfile.TemporaryDirectory(prefix="tpusim-sweep-bench-") as tmp:
        spec_file = os.path.join(tmp, "bench64.json")
        with open(spec_file, "w") as f:
            json.dump(spec(a.images), f)
        starts = []
        for _ in range(20):
            t = time.monotonic()
            subprocess.run([tpusim, "info", "--chip", os.path.join(ROOT, "configs/chips/v1.json")],
                           check=True, stdout=subprocess.DEVNULL)
            starts.append(time.monotonic() - t)
        rates, per_point, walls, sims, cpus = [], [], [], [], []
        for i in range(a.repeat):
            out = os.path.join(tmp, f"run{i}")
            t = time.monotonic()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run([tpusim, "sweep", spec_file, "-j", str(a.jobs), "--out", out],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.monotonic() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if r.returncode != 0:
                sys.exit(f"sweep_bench: the sweep failed (status {r.returncode}): {r.stderr[-2000:]}")
            with open(os.path.join(out, "results.json")) as f:
                n = json.load(f)["summary"]["done"]
            rates.append(n / wall * 60)
            per_point.append(wall * a.jobs / n)
            cpus.append(cpu / n)
            for h in glob.glob(os.path.join(out, "points/*/*.host.json")):
                with open(h) as f:
                    host = json.load(f)
                walls.append(host["wall_seconds"])
                sims.append(host["simulation_wall_seconds"])
            print(f"repeat {i + 1}: {n} points in {wall:.1f} s = {rates[-1]:.0f} points/min", flush=True)
        run_wall = statistics.median(walls)
        print(f"\ntpusim sweep, 64 points x Fashion-MNIST CNN ({a.images} images), -j {a.jobs}, "
              f"median of {a.repeat}")
        print(f"points per minute   {statistics.median(rates):8.0f}")
        print(f"per point, 1 core   {statistics.median(per_point):8.3f} s")
        print(f"  start-up          {statistics.median(starts):8.3f} s   (tpusim info, median of 20)")
        print(f"  run wall          {run_wall:8.3f} s")
        print(f"    simulating      {statistics.median(sims):8.3f} s")
        print(f"  other             {statistics.median(per_point) - run_wall:8.3f} s")
        cpu = statistics.median(cpus)
        print(f"CPU per point       {cpu:8.3f} s   (user + sys of the sweep and its runs)")
        print(f"points per minute if the {a.jobs} cores were idle: {60 * a.jobs / cpu:.0f} "
              f"(on a shared machine, compare with the measured rate above)")


if __name__ == "__main__":
    main()
