#!/usr/bin/env python3
"""Benchmark: host time of a full `tpusim run` and `tpusim fit` against the same with --timing-only.

Each case runs as the user types it, in a process of its own, REPEAT times: checked (the default),
--no-check, and --timing-only, taking turns (run 1 of each mode, then run 2 of each, ...) so that
the load of a shared machine falls on all of them alike. Prints, side by side, the median wall
time of the whole process of each mode, the ratio of each to timing-only, and the median peak
resident memory of the full run (checked; --no-check for fit-r50) and of timing-only; then
checks that every mode reported the same simulated cycles and energy (the timing-only promise,
docs/timing-model.md, "Timing-only mode"). Exits 1 if they differ.

Cases (--case, repeatable; all but fit-r50 by default):
  run-v1    `tpusim run` of the Fashion-MNIST CNN on v1, the 10,000 test images
  run-r50   `tpusim run` of ResNet-50 on v4, 32 images at batch 32, seeded random weights
  fit-v3    `tpusim fit` of the tutorial on v3, 1 epoch of 3 steps of 1,000 images and the
            validation on the 10,000 test images
  fit-r50   `tpusim fit` of ResNet-50 on v3, one step of 64 images (momentum), tensors off chip;
            only --no-check and --timing-only (the reference of a checked step at 64 images does
            not fit this machine's memory). Not by default: a --no-check step takes minutes and
            7.6 GB (docs/training.md, "ResNet-50's training step")

Usage: tb/bench/timing_only_bench.py [--build build] [--repeat 3] [--case NAME ...]

The machines are shared: quote medians, on a quiet machine."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ("checked", "no-check", "timing-only")


def src(rel):
    return os.path.join(ROOT, rel)


CASES = {
    "run-v1": (["run", "--chip", src("configs/chips/v1.json")], MODES),
    "run-r50": (["run", "--chip", src("configs/chips/v4.json"), "--model",
                 src("configs/models/resnet50.json"), "--random-weights", "--images", "32",
                 "--batch", "32"], MODES),
    "fit-v3": (["fit", "--chip", src("configs/chips/v3.json"), "--epochs", "1",
                "--steps-per-epoch", "3", "--batch", "1000"], MODES),
    "fit-r50": (["fit", "--chip", src("configs/chips/v3.json"), "--model",
                 src("configs/models/resnet50.json"), "--random-weights", "--batch", "64",
                 "--steps", "1", "--optimizer", "momentum"], MODES[1:]),
}


def mode_args(mode):
    return {"checked": [], "no-check": ["--no-check"], "timing-only": ["--timing-only"]}[mode]


def timing_of(report):
    """The simulated figures every mode must agree on: total cycles and energy."""
    if report["schema"] == "tpusim.fit/1":
        steps = report["per_step"]
        return ([s["cycles"] for s in steps], [s["energy_j"] for s in steps])
    return (report["totals"]["cycles"], report["totals"]["energy_j"])


def run_once(tpusim, args):
    """Wall seconds of the process, its peak RSS in MB (wait4's rusage of the child), and its
    report."""
    with tempfile.TemporaryDirectory(prefix="tpusim-timing-bench-") as tmp:
        out = os.path.join(tmp, "report.json")
        with open(os.path.join(tmp, "stderr"), "w+") as err:
            t = time.monotonic()
            child = subprocess.Popen([tpusim] + args + ["--json", out], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.monotonic() - t
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode != 0:
                err.seek(0)
                sys.exit(f"timing_only_bench: `{' '.join([tpusim] + args)}` failed:\n{err.read()}")
        with open(out) as f:
            return wall, usage.ru_maxrss / 1024, json.load(f)  # Linux: kilobytes


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--case", action="append", choices=list(CASES))
    a = p.parse_args()
    tpusim = os.path.join(a.build, "tpusim")
    cases = a.case or [c for c in CASES if c != "fit-r50"]
    print(f"median wall seconds of {a.repeat} runs per mode (process wall), ratio to timing-only")
    print(f"{'case':8} {'checked s':>10} {'no-check s':>11} {'timing-only s':>14} "
          f"{'checked/t-o':>12} {'no-check/t-o':>13} {'full MB':>7} {'t-o MB':>7}  "
          "same cycles+energy")
    failed = False
    for name in cases:
        args, modes = CASES[name]
        walls = {m: [] for m in modes}
        rss = {m: [] for m in modes}
        timings = {m: None for m in modes}
        for _ in range(a.repeat):
            for m in modes:
                wall, peak, report = run_once(tpusim, args + mode_args(m))
                walls[m].append(wall)
                rss[m].append(peak)
                timings[m] = timing_of(report)
                if m == "timing-only" and report.get("outputs_computed") is not False:
                    sys.exit(f"timing_only_bench: {name}: the timing-only report does not say "
                             '"outputs_computed": false')
        med = {m: statistics.median(walls[m]) for m in modes}
        same = len({json.dumps(t) for t in timings.values()}) == 1
        failed |= not same
        cell = lambda m, w: f"{med[m]:>{w}.2f}" if m in med else f"{'-':>{w}}"
        ratio = lambda m, w: (f"{med[m] / med['timing-only']:>{w}.1f}x" if m in med
                              else f"{'-':>{w + 1}}")
        print(f"{name:8} {cell('checked', 10)} {cell('no-check', 11)} {cell('timing-only', 14)} "
              f"{ratio('checked', 11)} {ratio('no-check', 12)} "
              f"{statistics.median(rss[modes[0]]):>7.0f} "
              f"{statistics.median(rss['timing-only']):>7.0f}  "
              f"{'yes' if same else 'NO'}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
