#!/usr/bin/python3
"""Plots of a `tpusim sweep` (docs/sweeps.md): each metric against each axis, and a heat map when
the sweep has two axes. Reads the sweep's results.json (schema tpusim.sweep/1). In a system
sweep an axis of slices (values that are not numbers) is drawn against the points' chips.

Usage: scripts/sweep_plots.py RESULTS_DIR [--html OUT.html] [--png-dir DIR] [--metric M ...]

Without --html it writes PNGs (into RESULTS_DIR/plots unless --png-dir says otherwise); with
--html one self-contained page: the table and the plots. scripts/report.py calls main() when it
is given a sweep's directory. Failed and pending points are gaps in the lines and grey cells in
the heat maps; the table lists their errors."""
import argparse
import base64
import html
import io
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpusim_io  # noqa: E402  (the one writer: tpusim's promises for outputs)

PROG = "sweep_plots.py"
DEFAULT_METRICS = ["ops_per_s", "utilization", "ops_per_j", "avg_power_w"]
# A system sweep's (fit workloads): those of them its table has.
DEFAULT_FIT_METRICS = ["step_seconds", "images_per_s", "all_reduce_share", "scaling_efficiency"]
LABELS = {
    "cycles": "cycles",
    "seconds": "simulated seconds",
    "ops_per_s": "ops/s",
    "images_per_s": "images/s",
    "utilization": "MXU utilization",
    "energy_j": "energy (J)",
    "avg_power_w": "average power (W)",
    "ops_per_j": "ops/J",
    "bytes_off_chip": "bytes off-chip",
    "replicas": "replicas",
    "global_batch": "global batch",
    "step_cycles": "step cycles",
    "step_seconds": "step time (simulated s)",
    "all_reduce_share": "all-reduce share of the step",
    "scaling_efficiency": "scaling efficiency (vs one chip)",
}
# Lines drawn per plot at most: more (a third axis) would be unreadable.
MAX_LINES = 8


class BadInput(Exception):
    pass


def load(path):
    f = os.path.join(path, "results.json") if os.path.isdir(path) else path
    try:
        with open(f, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise BadInput(f"{f}: cannot read ({e.strerror})")
    except ValueError as e:
        raise BadInput(f"{f}: not JSON ({e})")
    if not isinstance(doc, dict) or doc.get("schema") != "tpusim.sweep/1":
        raise BadInput(f"{f}: /schema is not \"tpusim.sweep/1\" (expected a tpusim sweep's results.json)")
    return f, doc


def shown(v):
    if isinstance(v, list):
        return "/".join(shown(e) for e in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def numeric(values):
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def value_of(point, workload, metric):
    cell = point["workloads"].get(workload, {})
    v = cell.get(metric) if cell.get("status") == "ok" else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def chips_of(doc, axis):
    """In a system sweep, each value of the axis's chips, when every point of a value has the
    same chips and no two values share a count (an axis of slices); else None."""
    if not all("chips" in p for p in doc["points"]):
        return None
    seen = {}
    for p in doc["points"]:
        key = json.dumps(p["axes"][axis["name"]])
        if seen.setdefault(key, p["chips"]) != p["chips"]:
            return None
    chips = [seen.get(json.dumps(v)) for v in axis["values"]]
    if None in chips or len(set(chips)) != len(chips):
        return None
    return chips


def axis_positions(doc, axis):
    """x positions of an axis's values, their tick labels, the x label, and whether a log scale
    suits them."""
    vals = axis["values"]
    chips = None if numeric(vals) else chips_of(doc, axis)
    if chips is not None:
        vals = chips
    if numeric(vals):
        xs = [float(v) for v in vals]
        log = min(xs) > 0 and max(xs) / min(xs) >= 16
        name = axis["name"] + (" (chips)" if chips is not None else "")
        return xs, [shown(v) for v in vals], name, log, False
    return list(range(len(vals))), [shown(v) for v in vals], axis["name"], False, True


def line_plots(doc, metric):
    """One figure per axis: metric against that axis; one line per workload and per combination
    of the other axes' values."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    axes = doc["axes"]
    for ai, axis in enumerate(axes):
        xs, ticks, xlabel, log, categorical = axis_positions(doc, axis)
        index = {json.dumps(v): i for i, v in enumerate(axis["values"])}
        groups = {}
        for p in doc["points"]:
            others = tuple((a["name"], shown(p["axes"][a["name"]])) for j, a in enumerate(axes) if j != ai)
            groups.setdefault(others, []).append(p)
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = 0
        for w in doc["workloads"]:
            for others, pts in groups.items():
                if drawn >= MAX_LINES:
                    break
                ys = [math.nan] * len(xs)
                for p in pts:
                    ys[index[json.dumps(p["axes"][axis["name"]])]] = value_of(p, w["name"], metric)
                label = w["name"] + ("".join(f", {k}={v}" for k, v in others) if others else "")
                ax.plot(xs, ys, marker="o", label=label)
                drawn += 1
        ax.set_xlabel(xlabel)
        ax.set_ylabel(LABELS.get(metric, metric))
        if log:
            ax.set_xscale("log")
        if categorical:
            ax.set_xticks(xs)
            ax.set_xticklabels(ticks)
        else:
            ax.set_xticks(xs)
            ax.set_xticklabels(ticks, rotation=45 if len(xs) > 6 else 0)
            ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        ax.set_title(f"{doc['name']}: {LABELS.get(metric, metric)} against {axis['name']}")
        fig.tight_layout()
        figs.append((f"{metric}_vs_{axis['name']}", fig))
    return figs


def heat_maps(doc, metric):
    """With two axes: one heat map per workload, the first axis down, the second across."""
    if len(doc["axes"]) != 2 or doc.get("combine") == "zip":
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    a0, a1 = doc["axes"]
    i0 = {json.dumps(v): i for i, v in enumerate(a0["values"])}
    i1 = {json.dumps(v): i for i, v in enumerate(a1["values"])}
    figs = []
    for w in doc["workloads"]:
        grid = np.full((len(i0), len(i1)), np.nan)
        for p in doc["points"]:
            grid[i0[json.dumps(p["axes"][a0["name"]])], i1[json.dumps(p["axes"][a1["name"]])]] = \
                value_of(p, w["name"], metric)
        fig, ax = plt.subplots(figsize=(1.2 * len(i1) + 3, 0.6 * len(i0) + 2))
        cmap = plt.get_cmap("viridis").copy()
        cmap.set_bad("lightgrey")
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto")
        ax.set_xticks(range(len(i1)))
        ax.set_xticklabels([shown(v) for v in a1["values"]])
        ax.set_yticks(range(len(i0)))
        ax.set_yticklabels([shown(v) for v in a0["values"]])
        ax.set_xlabel(a1["name"])
        ax.set_ylabel(a0["name"])
        finite = grid[np.isfinite(grid)]
        for (r, c), v in np.ndenumerate(grid):
            if math.isfinite(v):
                light = finite.size and v < (finite.min() + finite.max()) / 2
                ax.text(c, r, f"{v:.3g}", ha="center", va="center", fontsize="small",
                        color="white" if light else "black")
        fig.colorbar(im, ax=ax, label=LABELS.get(metric, metric))
        ax.set_title(f"{doc['name']} / {w['name']}: {LABELS.get(metric, metric)}")
        fig.tight_layout()
        figs.append((f"{metric}_heatmap_{w['name']}", fig))
    return figs


def figures(doc, metrics):
    out = []
    for m in metrics:
        out += line_plots(doc, m)
        out += heat_maps(doc, m)
    return out


def png_bytes(fig):
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def table_html(doc, metrics):
    system = all("chips" in p for p in doc["points"])
    head = ["point"] + [a["name"] for a in doc["axes"]] + (["chips"] if system else [])
    for w in doc["workloads"]:
        head += [f"{w['name']} {LABELS.get(m, m)}" for m in metrics] + [f"{w['name']} status"]
    rows = []
    for p in doc["points"]:
        cells = [p["id"]] + [shown(p["axes"][a["name"]]) for a in doc["axes"]]
        if system:
            cells.append(p["chips"])
        for w in doc["workloads"]:
            c = p["workloads"][w["name"]]
            cells += [f"{c[m]:.4g}" if c.get("status") == "ok" and m in c else "" for m in metrics]
            cells.append(c["status"] + (f": {c['error']}" if c.get("error") else ""))
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) +
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def page(doc, source, metrics, figs):
    s = doc["summary"]
    imgs = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}"><figcaption>{html.escape(name)}</figcaption></figure>'
        for name, png in figs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tpusim sweep {html.escape(doc['name'])}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:small}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}figure{{display:inline-block;margin:1em}}</style>
</head><body>
<h1>Sweep {html.escape(doc['name'])}</h1>
<p>{html.escape(doc.get('description', ''))}</p>
<p>{s['points']} design points, {s['runs']} runs: {s['done']} done, {s['failed']} failed, {s['pending']} pending.
Source: {html.escape(source)}.</p>
{imgs}
<h2>Table</h2>
{table_html(doc, metrics)}
</body></html>
"""


def default_metrics(doc):
    have = doc.get("metrics", [])
    if "step_seconds" in have:
        return [m for m in DEFAULT_FIT_METRICS if m in have]
    return DEFAULT_METRICS


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="a sweep's directory (or its results.json)")
    p.add_argument("--html", metavar="OUT", help="write one self-contained page here")
    p.add_argument("--png-dir", metavar="DIR", help="write the plots as PNG files here")
    p.add_argument("--metric", action="append", choices=sorted(LABELS),
                   help=f"metric to plot (repeatable; default: {' '.join(DEFAULT_METRICS)}; for a "
                   f"system sweep those of {' '.join(DEFAULT_FIT_METRICS)} its table has)")
    a = p.parse_args(argv)
    tpusim_io.install_signal_exit()
    try:
        source, doc = load(a.results)
        metrics = a.metric or default_metrics(doc)
        if a.html:
            tpusim_io.check_not_input(a.html, [source])
        missing = [m for m in metrics if m not in doc.get("metrics", [])]
        if missing:
            raise BadInput(f"{source}: no metric {', '.join(missing)} in /metrics")
        figs = [(name, png_bytes(fig)) for name, fig in figures(doc, metrics)]
    except ImportError as e:
        sys.stderr.write(f"{PROG}: {e.name} is missing (Debian: apt install python3-matplotlib)\n")
        return 2
    except (BadInput, ValueError) as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return 2
    png_dir = a.png_dir or (None if a.html else os.path.join(os.path.dirname(source), "plots"))
    try:
        if png_dir:
            os.makedirs(png_dir, exist_ok=True)
            for name, png in figs:
                tpusim_io.write_output(os.path.join(png_dir, name + ".png"), png)
        if a.html:
            tpusim_io.write_output(a.html, page(doc, source, metrics, figs))
    except OSError as e:
        sys.stderr.write(f"{PROG}: {e.filename}: cannot write ({e.strerror})\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
