#!/usr/bin/python3
"""System test: scripts/sweep_plots.py on a real sweep's directory writes, for each default
metric, one plot per axis and (two axes) one heat map per workload, as valid PNG files; and one
self-contained HTML page holding them and the table. With --system-spec, the same for a system
sweep: its default metrics, its axis of slices drawn against the points' chips, a chips column.
And, on a sweep shaped like configs/sweeps/unified_buffer.json with rates near 10 T ops/s, that
the plots speak human units (issue 17): bytes as KiB/MiB, one SI prefix in the axis label and no
offset or 1e13 above the axis, utilization in %, captions that say what is plotted.

Usage: sweep_plots_test.py --tpusim build/tpusim --plots scripts/sweep_plots.py --spec SPEC
       [--system-spec SPEC]"""
import argparse
import html
import json
import re
import os
import subprocess
import sys
import tempfile

PNG = b"\x89PNG\r\n\x1a\n"


def unit_sweep():
    """A results.json as `tpusim sweep` writes it: a Unified Buffer axis in bytes, two workloads,
    one failed point."""
    values = [2 ** k for k in range(18, 26)]
    points = []
    for i, v in enumerate(values):
        ok = {"status": "ok", "ops_per_s": 1.1e13 + 2.5e11 * i, "utilization": 0.05 + 0.1 * i,
              "ops_per_j": 3e11, "avg_power_w": 41.5}
        points.append({"id": i, "axes": {"ub_bytes": v},
                       "workloads": {"a": ok, "b": ok if i != 3 else {"status": "failed", "error": "x"}}})
    return {"schema": "tpusim.sweep/1", "name": "ub", "description": "", "combine": "product",
            "axes": [{"name": "ub_bytes", "pointers": ["/unified_buffer/bytes"], "values": values}],
            "workloads": [{"name": "a"}, {"name": "b"}],
            "metrics": ["ops_per_s", "utilization", "ops_per_j", "avg_power_w"],
            "points": points, "summary": {"points": 8, "runs": 16, "done": 15, "failed": 1, "pending": 0}}


def check_units(sweep_plots, errors):
    doc = unit_sweep()
    figs = {name: (fig, caption) for name, fig, caption in sweep_plots.figures(doc, ["ops_per_s", "utilization"])}
    fig, caption = figs["ops_per_s_vs_ub_bytes"]
    fig.canvas.draw()
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    if ticks[0] != "256 KiB" or ticks[-1] != "32 MiB":
        errors.append(f"the bytes axis's ticks are {ticks}, expected 256 KiB … 32 MiB")
    if ax.get_ylabel() != "achieved (T ops/s)":
        errors.append(f"ops/s axis labelled {ax.get_ylabel()!r}, expected 'achieved (T ops/s)'")
    if ax.yaxis.get_offset_text().get_text():
        errors.append(f"the ops/s axis has an offset {ax.yaxis.get_offset_text().get_text()!r}")
    top = max(float(t.get_text().replace("\u2212", "-")) for t in ax.get_yticklabels() if t.get_text())
    if not 10 <= top <= 14:
        errors.append(f"the ops/s axis's ticks reach {top}, expected T ops/s near 11–13")
    if "256 KiB … 32 MiB" not in caption or "achieved (T ops/s)".lower() not in caption.lower():
        errors.append(f"the caption does not say what is plotted: {caption!r}")
    fig, caption = figs["utilization_vs_ub_bytes"]
    fig.canvas.draw()
    ax = fig.axes[0]
    ys = [y for line in ax.get_lines() for y in line.get_ydata() if y == y]
    if ax.get_ylabel() != "MXU utilization (%)" or abs(max(ys) - 75) > 1e-9:
        errors.append(f"utilization shown as {ax.get_ylabel()!r} up to {max(ys)}, expected % up to 75")
    page = sweep_plots.page(doc, "results.json", ["ops_per_s", "utilization"],
                            [(n, b"", c) for n, (_, c) in figs.items()])
    for stem in figs:
        if f"<figcaption>{stem}</figcaption>" in page:
            errors.append(f"the caption of {stem} is its file stem")
    if "<td>256 KiB</td>" not in page or "<td>11 T ops/s</td>" not in page or "<td>5 %</td>" not in page:
        errors.append("the table does not show the axis in KiB, ops/s in T ops/s and utilization in %")


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
        stems = {os.path.splitext(f)[0] for f in expected}
        captions = [html.unescape(c) for c in re.findall(r"<figcaption>(.*?)</figcaption>", page)]
        if len(captions) != len(expected) or any(c in stems or " against " not in c and " of workload " not in c
                                                for c in captions):
            errors.append(f"the captions do not say what is plotted: {captions[:3]}")


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
    check_units(sweep_plots, errors)
    for spec in [a.spec] + ([a.system_spec] if a.system_spec else []):
        check(a, spec, sweep_plots, errors)
    for e in errors:
        print(f"sweep_plots_test: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
