#!/usr/bin/python3
"""System test: scripts/sweep_plots.py on a real sweep's directory writes, for each default
metric, one plot per axis and (two axes) one heat map per workload, as valid PNG files; and one
self-contained HTML page holding them and the table. With --system-spec, the same for a system
sweep: its default metrics, its axis of slices drawn against the points' chips, a chips column.

Usage: sweep_plots_test.py --tpusim build/tpusim --plots scripts/sweep_plots.py --spec SPEC
       [--system-spec SPEC]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PNG = b"\x89PNG\r\n\x1a\n"


def check(a, spec, sweep_plots, errors):
    system = spec == a.system_spec
    with tempfile.TemporaryDirectory(prefix="tpusim-sweep-plots-") as t:
        out = os.path.join(t, "out")
        subprocess.run([a.tpusim, "sweep", spec, "-j", "2", "--out", out], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["/usr/bin/python3", a.plots, out], check=True)
        subprocess.run(["/usr/bin/python3", a.plots, out, "--html", os.path.join(t, "sweep.html")], check=True)
        with open(os.path.join(out, "results.json")) as f:
            doc = json.load(f)
        expected = []
        for m in sweep_plots.DEFAULT_FIT_METRICS if system else sweep_plots.DEFAULT_METRICS:
            expected += [f"{m}_vs_{ax['name']}.png" for ax in doc["axes"]]
            if len(doc["axes"]) == 2:
                expected += [f"{m}_heatmap_{w['name']}.png" for w in doc["workloads"]]
        if system:
            xs, _, xlabel, _, categorical = sweep_plots.axis_positions(doc, doc["axes"][0])
            if categorical or xs != [float(p["chips"]) for p in doc["points"]]:
                errors.append(f"the slices are drawn at {xs} ({xlabel}), not at their chips")
        got = sorted(os.listdir(os.path.join(out, "plots")))
        if got != sorted(expected):
            errors.append(f"plots {got}, expected {sorted(expected)}")
        for f in got:
            with open(os.path.join(out, "plots", f), "rb") as fh:
                if fh.read(8) != PNG:
                    errors.append(f"{f} is not a PNG file")
        with open(os.path.join(t, "sweep.html")) as fh:
            page = fh.read()
        if page.count("data:image/png;base64,") != len(expected):
            errors.append(f"the page embeds {page.count('data:image/png;base64,')} images, expected {len(expected)}")
        if page.count("<tr>") != 1 + len(doc["points"]):
            errors.append("the page's table does not have one row per point")
        if system and "<th>chips</th>" not in page:
            errors.append("the page's table has no chips column")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tpusim", required=True)
    p.add_argument("--plots", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--system-spec")
    a = p.parse_args()
    sys.path.insert(0, os.path.dirname(a.plots))
    import sweep_plots
    errors = []
    for spec in [a.spec] + ([a.system_spec] if a.system_spec else []):
        check(a, spec, sweep_plots, errors)
    for e in errors:
        print(f"sweep_plots_test: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
