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
# Each metric: what it is, its unit, and how its values are shown. "si": scaled by one SI prefix
# chosen from the largest value (axis ticks 1.5, 3, 4.5 under "T ops/s", never a 1e13 offset);
# "percent": a fraction shown × 100 as %; "plain": as it is.
METRICS = {
    "cycles": ("run time", "cycles", "si"),
    "seconds": ("simulated time", "s", "si"),
    "ops_per_s": ("achieved", "ops/s", "si"),
    "images_per_s": ("throughput", "images/s", "si"),
    "utilization": ("MXU utilization", "%", "percent"),
    "energy_j": ("energy", "J", "si"),
    "avg_power_w": ("average power", "W", "si"),
    "ops_per_j": ("efficiency", "ops/J", "si"),
    "bytes_off_chip": ("off-chip traffic", "B", "si"),
    "replicas": ("replicas", "", "plain"),
    "global_batch": ("global batch", "images", "plain"),
    "step_cycles": ("step", "cycles", "si"),
    "step_seconds": ("step time (simulated)", "s", "si"),
    "all_reduce_share": ("all-reduce share of the step", "%", "percent"),
    "scaling_efficiency": ("scaling efficiency (vs one chip)", "%", "percent"),
}
LABELS = {m: name for m, (name, _, _) in METRICS.items()}
SI_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"),
               (1e-6, "µ"), (1e-9, "n")]
IEC_PREFIXES = [(2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")]
# An axis's unit from the last element of its JSON pointer (configs name the unit: docs/config.md).
AXIS_UNITS = {"_gbps": "GB/s", "_mhz": "MHz", "_hz": "Hz", "_ns": "ns", "_w": "W", "_bits": "bits"}


def metric_scale(metric, values):
    """(factor to divide the values by, axis label with its unit) for a metric's values."""
    name, unit, kind = METRICS.get(metric, (metric, "", "plain"))
    if kind == "percent":
        return 0.01, f"{name} (%)"
    if kind == "plain":
        return 1, f"{name} ({unit})" if unit else name
    top = max((abs(v) for v in values if math.isfinite(v)), default=0)
    factor, prefix = next(((f, p) for f, p in SI_PREFIXES if top >= f), (1, ""))
    sep = "" if unit in ("s", "J", "W", "B", "Hz") else " "
    return factor, f"{name} ({prefix}{sep if prefix else ''}{unit})"


def metric_text(metric, v):
    """One value with its unit, for the table: 12.34 T ops/s, 47.5 %, 3.2 W."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return shown(v)
    factor, label = metric_scale(metric, [v])
    unit = label[label.rfind("(") + 1:-1] if label.endswith(")") else ""
    return f"{v / factor:.4g} {unit}".strip()


def bytes_text(v):
    """262144 -> 256 KiB; 1.5 MiB; a byte count below 1 KiB as it is."""
    for f, unit in IEC_PREFIXES:
        if abs(v) >= f:
            return f"{v / f:.4g} {unit}"
    return f"{v:g} B"


def number_text(v):
    """Thousands separators for integers (2,048), four significant digits otherwise."""
    return f"{int(v):,}" if float(v).is_integer() else f"{v:.4g}"


def axis_unit(axis):
    """"bytes", a unit such as "GB/s" from the pointer's name, or "" (a count, an array size)."""
    leaf = (axis.get("pointers") or [axis["name"]])[0].rsplit("/", 1)[-1]
    if leaf == "bytes" or leaf.endswith("_bytes"):
        return "bytes"
    return next((u for suffix, u in AXIS_UNITS.items() if leaf.endswith(suffix)), "")


def axis_value_text(axis, v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return bytes_text(v) if axis_unit(axis) == "bytes" else number_text(v)
    return shown(v)


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
    """x positions of an axis's values, their tick labels (in human units: 256 KiB), the x label
    (with its unit), and whether a log scale suits them."""
    vals = axis["values"]
    chips = None if numeric(vals) else chips_of(doc, axis)
    if chips is not None:
        vals = chips
    unit = axis_unit(axis)
    if numeric(vals):
        xs = [float(v) for v in vals]
        log = min(xs) > 0 and max(xs) / min(xs) >= 16
        if chips is not None:
            return xs, [number_text(v) for v in vals], axis["name"] + " (chips)", log, False
        name = axis["name"] + (f" ({unit})" if unit and unit != "bytes" else "")
        return xs, [axis_value_text(axis, v) for v in vals], name, log, False
    return list(range(len(vals))), [shown(v) for v in vals], axis["name"], False, True


def axis_caption(doc, axis):
    """"ub_bytes (/unified_buffer/bytes): 256 KiB … 32 MiB, 8 values"."""
    vals = axis["values"]
    where = ", ".join(axis.get("pointers") or [])
    span = (f"{axis_value_text(axis, vals[0])} … {axis_value_text(axis, vals[-1])}, {len(vals)} values"
            if len(vals) > 1 else axis_value_text(axis, vals[0]))
    return f"{axis['name']}{f' ({where})' if where else ''}: {span}"


def line_plots(doc, metric):
    """One figure per axis: metric against that axis; one line per workload and per combination
    of the other axes' values. Each is (file stem, figure, caption)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = [value_of(p, w["name"], metric) for p in doc["points"] for w in doc["workloads"]]
    factor, ylabel = metric_scale(metric, every)
    figs = []
    axes = doc["axes"]
    for ai, axis in enumerate(axes):
        xs, ticks, xlabel, log, categorical = axis_positions(doc, axis)
        index = {json.dumps(v): i for i, v in enumerate(axis["values"])}
        groups = {}
        for p in doc["points"]:
            others = tuple((a["name"], axis_value_text(a, p["axes"][a["name"]]))
                           for j, a in enumerate(axes) if j != ai)
            groups.setdefault(others, []).append(p)
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = 0
        for w in doc["workloads"]:
            for others, pts in groups.items():
                if drawn >= MAX_LINES:
                    break
                ys = [math.nan] * len(xs)
                for p in pts:
                    ys[index[json.dumps(p["axes"][axis["name"]])]] = value_of(p, w["name"], metric) / factor
                label = w["name"] + ("".join(f", {k} = {v}" for k, v in others) if others else "")
                ax.plot(xs, ys, marker="o", label=label)
                drawn += 1
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        # Values are already scaled to their prefix: never an offset or a ×1e13 above the axis.
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        if log:
            ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels(ticks, rotation=0 if categorical or len(xs) <= 6 else 45,
                           ha="center" if categorical or len(xs) <= 6 else "right")
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        ax.set_title(f"{doc['name']}: {LABELS.get(metric, metric)} against {axis['name']}")
        fig.tight_layout()
        lines = "one line per workload" + (" and per value of " + ", ".join(
            a["name"] for j, a in enumerate(axes) if j != ai) if len(axes) > 1 else "")
        caption = (f"{ylabel[0].upper() + ylabel[1:]} against {axis_caption(doc, axis)}"
                   f"{' (log scale)' if log else ''}; {lines}"
                   f"{f' (the first {MAX_LINES})' if drawn >= MAX_LINES else ''}. Gaps are failed points.")
        figs.append((f"{metric}_vs_{axis['name']}", fig, caption))
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
        factor, label = metric_scale(metric, grid.flatten().tolist())
        grid = grid / factor
        fig, ax = plt.subplots(figsize=(1.2 * len(i1) + 3, 0.6 * len(i0) + 2))
        cmap = plt.get_cmap("viridis").copy()
        cmap.set_bad("lightgrey")
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto")
        ax.set_xticks(range(len(i1)))
        ax.set_xticklabels([axis_value_text(a1, v) for v in a1["values"]])
        ax.set_yticks(range(len(i0)))
        ax.set_yticklabels([axis_value_text(a0, v) for v in a0["values"]])
        ax.set_xlabel(axis_positions(doc, a1)[2])
        ax.set_ylabel(axis_positions(doc, a0)[2])
        finite = grid[np.isfinite(grid)]
        for (r, c), v in np.ndenumerate(grid):
            if math.isfinite(v):
                light = finite.size and v < (finite.min() + finite.max()) / 2
                ax.text(c, r, f"{v:.3g}", ha="center", va="center", fontsize="small",
                        color="white" if light else "black")
        bar = fig.colorbar(im, ax=ax, label=label)
        bar.formatter.set_useOffset(False)
        ax.set_title(f"{doc['name']} / {w['name']}: {LABELS.get(metric, metric)}")
        fig.tight_layout()
        caption = (f"{label[0].upper() + label[1:]} of workload {w['name']} at each design point: "
                   f"{axis_caption(doc, a0)} down, {axis_caption(doc, a1)} across. Grey cells are "
                   "failed points.")
        figs.append((f"{metric}_heatmap_{w['name']}", fig, caption))
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
        cells = [p["id"]] + [axis_value_text(a, p["axes"][a["name"]]) for a in doc["axes"]]
        if system:
            cells.append(p["chips"])
        for w in doc["workloads"]:
            c = p["workloads"][w["name"]]
            cells += [metric_text(m, c[m]) if c.get("status") == "ok" and m in c else "" for m in metrics]
            cells.append(c["status"] + (f": {c['error']}" if c.get("error") else ""))
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) +
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def page(doc, source, metrics, figs):
    s = doc["summary"]
    imgs = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}"><figcaption>{html.escape(caption)}</figcaption></figure>'
        for name, png, caption in figs)
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
        figs = [(name, png_bytes(fig), caption) for name, fig, caption in figures(doc, metrics)]
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
            for name, png, _ in figs:
                tpusim_io.write_output(os.path.join(png_dir, name + ".png"), png)
        if a.html:
            tpusim_io.write_output(a.html, page(doc, source, metrics, figs))
    except OSError as e:
        sys.stderr.write(f"{PROG}: {e.filename}: cannot write ({e.strerror})\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
