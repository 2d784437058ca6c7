#!/usr/bin/env python3
"""Benchmark: the TLM MXU against the Verilated RTL array on the same run.

Runs `tpusim run` on configs/chips/tiny-rtl.json (mxu.impl "rtl": the RTL array in the loop) and on
the same chip with mxu.impl "tlm", on the Fashion-MNIST test set, and prints for each the seconds
spent simulating (host.simulation_wall_seconds, median of REPEAT runs) and how many times faster
the TLM MXU is. It also checks that the two reports are identical apart from host timings and the
config file's name (outputs, cycles, buckets, energy), and exits 1 if they are not.
The machines are shared: quote medians, not single runs.

Usage: tb/bench/rtl_speed.py [--build build] [--images 10000] [--repeat 1]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTL_CHIP = os.path.join(ROOT, "configs/chips/tiny-rtl.json")


def first_difference(a, b, at=""):
    if type(a) is not type(b):
        return f"{at} (types differ)"
    if isinstance(a, dict):
        for k in a:
            if k not in b:
                return f"{at}/{k} (only in the RTL run)"
            d = first_difference(a[k], b[k], f"{at}/{k}")
            if d:
                return d
        return "" if len(a) == len(b) else f"{at} (keys only in the TLM run)"
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{at} (lengths differ)"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{at}/{i}")
            if d:
                return d
        return ""
    return "" if a == b else f"{at}: {a} in the RTL run, {b} in the TLM run"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--images", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=1)
    a = p.parse_args()
    tpusim = os.path.join(a.build, "tpusim")
    with tempfile.TemporaryDirectory() as tmp:
        twin = os.path.join(tmp, "tiny-tlm.json")
        mxu = json.load(open(RTL_CHIP))["mxu"]
        mxu["impl"] = "tlm"
        json.dump({"include": RTL_CHIP, "mxu": mxu}, open(twin, "w"))
        sims, reports = {}, {}
        for name, chip in (("tlm", twin), ("rtl", RTL_CHIP)):
            sims[name] = []
            for _ in range(a.repeat):
                out = os.path.join(tmp, name + ".json")
                subprocess.run([tpusim, "run", "--chip", chip, "--images", str(a.images), "--json", out],
                               check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
                r = json.load(open(out))
                sims[name].append(r["host"]["simulation_wall_seconds"])
                del r["host"]
                del r["chip"]["file"]
                reports[name] = r
    tlm, rtl = statistics.median(sims["tlm"]), statistics.median(sims["rtl"])
    cycles = reports["rtl"]["totals"]["cycles"]
    print(f"tiny-rtl ({mxu['rows']}x{mxu['cols']} array), Fashion-MNIST CNN, {a.images} images, "
          f"median of {a.repeat} run(s), {cycles} cycles")
    print(f"{'MXU':4} {'sim s':>8} {'cycles/s':>10}")
    for name, s in (("tlm", tlm), ("rtl", rtl)):
        print(f"{name:4} {s:8.2f} {cycles / s:10.3g}")
    print(f"the TLM MXU simulates {rtl / tlm:.1f}x faster than the RTL array in the loop")
    diff = first_difference(reports["rtl"], reports["tlm"])
    print("reports identical (outputs, cycles, buckets, energy)" if not diff else f"REPORTS DIFFER: {diff}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
