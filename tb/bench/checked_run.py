#!/usr/bin/env python3
"""Benchmark (issue 16): a checked `tpusim run` against the host's own int8 inference.

Runs, REPEAT times each and interleaved (so a change in the machine's load touches all three):
  native     build/tb/bench/fashion_mnist_native: the same CNN, the same int8 scales, through
             oneDNN, on one thread and on all cores (its inference seconds; the process's wall
             and peak RSS too); the faster median is the anchor
  checked    tpusim run --chip CHIP --images N: the simulation and, on another thread, the
             quantized and float references, compared bit for bit (the default)
  unchecked  the same with --no-check
and prints medians side by side: wall seconds, the report's simulation and reference seconds,
peak resident memory of each process (getrusage of the child, via os.wait4), and the ratios
checked / native (issue 16's target: at most 2) and checked / unchecked. A benchmark, not a
test: it prints figures and fails only when a run fails or a checked run is not bit-exact. The
machines are shared: quote medians, and the load average printed with them.

Then issue 16's other two figures, each run REPEAT times (or --fit-repeat for the fit), with
their peak memory, and all four against their targets in one table:
  resnet50   tpusim run --chip configs/chips/v4.json --model configs/models/resnet50.json
             --random-weights --images 32 --batch 32 --timing-only (target: 3 s)
  fit        tpusim fit --chip configs/chips/v3.json: the tutorial's 5 x 60 steps of 1,000
             images, checked (target: 120 s; about 2 to 3 minutes a run, so only with --fit)

Usage: tb/bench/checked_run.py [--build build] [--chip v1] [--images 10000] [--repeat 5]
                               [--fit] [--fit-repeat 1]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    """Runs cmd from the source tree; returns (wall seconds, peak RSS MiB, stdout)."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"checked_run.py: {' '.join(cmd)} failed ({p.returncode}):\n{err}")
    return wall, usage.ru_maxrss / 1024.0, out  # ru_maxrss is in KiB on Linux


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--chip", default="v1")
    p.add_argument("--images", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--fit", action="store_true", help="also time the tutorial's full fit on v3")
    p.add_argument("--fit-repeat", type=int, default=1)
    a = p.parse_args()
    tpusim = os.path.join(a.build, "tpusim")
    native = os.path.join(a.build, "tb", "bench", "fashion_mnist_native")
    for exe in (tpusim, native):
        if not os.access(exe, os.X_OK):
            sys.exit(f"checked_run.py: {exe} not built (cmake --build {a.build}; the native "
                     "anchor needs libdnnl-dev)")
    chip = os.path.join("configs", "chips", a.chip + ".json")
    threads = {"native-1": 1, "native-all": os.cpu_count()}
    rows = {k: {"wall": [], "rss": [], "sim": [], "ref": [], "inf": []}
            for k in list(threads) + ["checked", "unchecked"]}
    for _ in range(a.repeat):
        for kind, t in threads.items():
            wall, rss, out = run([native, "--images", str(a.images), "--threads", str(t)])
            fields = dict(kv.split("=") for kv in out.split())
            rows[kind]["wall"].append(wall)
            rows[kind]["rss"].append(rss)
            rows[kind]["inf"].append(float(fields["native_seconds"]))
        for kind, extra in (("checked", []), ("unchecked", ["--no-check"])):
            with tempfile.NamedTemporaryFile(suffix=".json") as report:
                wall, rss, _ = run([tpusim, "run", "--chip", chip, "--images", str(a.images),
                                    "--json", report.name] + extra)
                r = json.load(open(report.name))
            if kind == "checked" and not r["accuracy"]["bit_exact"]:
                sys.exit("checked_run.py: the checked run is not bit-exact")
            rows[kind]["wall"].append(wall)
            rows[kind]["rss"].append(rss)
            rows[kind]["sim"].append(r["host"]["simulation_wall_seconds"])
            rows[kind]["ref"].append(r["host"]["reference_wall_seconds"])
    med = {k: {f: statistics.median(v) if v else None for f, v in row.items()} for k, row in rows.items()}
    load = os.getloadavg()
    print(f"Fashion-MNIST CNN, {a.images} images, {a.chip}; median of {a.repeat} runs; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'':26} {'wall s':>8} {'infer s':>8} {'sim s':>8} {'ref s':>8} {'peak RSS MB':>12}")
    for kind in threads:
        n = med[kind]
        label = f"native oneDNN int8, {threads[kind]} thr"
        print(f"{label:26} {n['wall']:8.3f} {n['inf']:8.3f} {'':>8} {'':>8} {n['rss']:12.1f}")
    n = min((med[k] for k in threads), key=lambda m: m["inf"])
    for kind, label in (("checked", "tpusim run (checked)"), ("unchecked", "tpusim run --no-check")):
        m = med[kind]
        print(f"{label:26} {m['wall']:8.3f} {'':>8} {m['sim']:8.3f} {m['ref']:8.3f} {m['rss']:12.1f}")
    c = med["checked"]["wall"]
    print(f"ratio checked wall / native inference (faster): {c / n['inf']:.2f} (issue 16's target: <= 2)")
    print(f"ratio checked wall / native process wall:       {c / n['wall']:.2f}")
    print(f"ratio checked wall / unchecked wall:            {c / med['unchecked']['wall']:.2f}")

    # Issue 16's other figures, then all four against their targets.
    rn50 = [run([tpusim, "run", "--chip", "configs/chips/v4.json", "--model", "configs/models/resnet50.json",
                 "--random-weights", "--images", "32", "--batch", "32", "--timing-only", "--json", os.devnull])
            for _ in range(a.repeat)]
    targets = [
        ("checked / native inference, Fashion-MNIST on " + a.chip, f"{c / n['inf']:.2f}x", "<= 2x",
         c / n["inf"] <= 2, f"{med['checked']['rss']:.0f} MB"),
        ("ResNet-50 inference, 32 images, v4, timing-only", f"{statistics.median(w for w, _, _ in rn50):.2f} s",
         "<= 3 s", statistics.median(w for w, _, _ in rn50) <= 3,
         f"{statistics.median(r for _, r, _ in rn50):.0f} MB"),
    ]
    if a.fit:
        fits = [run([tpusim, "fit", "--chip", "configs/chips/v3.json", "--json", os.devnull])
                for _ in range(a.fit_repeat)]
        wall = statistics.median(w for w, _, _ in fits)
        targets.append(("the tutorial's fit on v3, 300 steps x 1000 images, checked", f"{wall:.1f} s",
                        "<= 120 s", wall <= 120, f"{statistics.median(r for _, r, _ in fits):.0f} MB"))
    else:
        targets.append(("the tutorial's fit on v3 (--fit to run it)", "-", "<= 120 s", None, "-"))
    load = os.getloadavg()
    print(f"\nissue 16's figures (load average now {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}):")
    print(f"{'figure':62} {'measured':>9} {'target':>9} {'met':>4} {'peak RSS':>9}")
    for name, value, target, met, rss in targets:
        print(f"{name:62} {value:>9} {target:>9} {'-' if met is None else 'yes' if met else 'NO':>4} {rss:>9}")


if __name__ == "__main__":
    main()
