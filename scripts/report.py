#!/usr/bin/python3
"""Renders tpusim reports as one self-contained HTML page: a comparison table, a roofline and the
per-layer MXU cycle buckets per chip, the energy breakdown, memory traffic and a chip comparison.

Usage: scripts/report.py INPUT [INPUT ...] --html OUT.html

An INPUT is a run report (schema tpusim.run/1, `tpusim run --json`), a comparison (schema
tpusim.compare/1, `tpusim compare`) or a training run (schema tpusim.fit/1, `tpusim fit --json`);
several inputs are put side by side, a training run in its own section. What the page shows and
where each number comes from: docs/html-report.md.

Bad input (a missing file, not JSON, an unknown schema, a missing or mistyped key) prints one line
naming the file and the key on stderr and exits with status 2, writing nothing. The page is written
through scripts/tpusim_io.py (tpusim's promises for outputs: devices and `-` written directly,
symlinks followed, permissions kept, temporary file beside the target, then rename).

Input kinds: `read_input` turns one command-line input into a list of validated documents, picking
the reader from the JSON's "schema" (READERS); `build_page` picks the page the documents ask for
(their `page`, PAGES). A new kind (e.g. a sweep directory) adds a reader and a page there.

Runs with Debian's python3 (the shebang): python3-matplotlib is installed there, by
scripts/setup.sh."""
import argparse
import base64
import html
import io
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_plots  # noqa: E402  (the sweep page)
import tpusim_io  # noqa: E402  (the one writer: tpusim's promises for outputs)

PROG = "report.py"

# The MXU cycle buckets of docs/report.md, in the order a cycle is classified.
BUCKETS = ["active", "weight_stall", "weight_shift", "data_hazard", "input_stall", "idle"]
BUCKET_LABELS = {
    "active": "active",
    "weight_stall": "waiting for weights",
    "weight_shift": "shifting weights",
    "data_hazard": "data hazard",
    "input_stall": "waiting for input",
    "idle": "idle (no matrix work)",
}
BUCKET_COLOURS = {
    "active": "#2ca02c",
    "weight_stall": "#ff7f0e",
    "weight_shift": "#ffd92f",
    "data_hazard": "#d62728",
    "input_stall": "#9467bd",
    "idle": "#b0b0b0",
}
# Memory levels of totals.bytes (docs/report.md), outermost first.
MEMORY_LEVELS = [
    ("host_link", "host link"),
    ("off_chip", "off-chip memory"),
    ("unified_buffer_read", "unified buffer read"),
    ("unified_buffer_write", "unified buffer write"),
    ("accumulators_read", "accumulators read"),
    ("accumulators_write", "accumulators write"),
]
CHIP_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"]
ENERGY_COLOURS = {"static": "#c7c7c7"}
ENERGY_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                  "#bcbd22", "#17becf", "#aec7e8", "#ffbb78"]


class Fatal(Exception):
    """Stops report.py with one line on stderr and exit status 2, before anything is written."""


class BadInput(Fatal):
    """One input is unusable: `where` names the file, `key` the JSON path (may be empty)."""

    def __init__(self, where, key, what):
        super().__init__(f"{where}: {key}: {what}" if key else f"{where}: {what}")


# ---------------------------------------------------------------------------------------------
# Reading and validating inputs

NUMBER = "a number"
POSITIVE = "a number > 0"
STRING = "a string"
BOOL = "true or false"
OBJECT = "an object"
LIST = "a list"


def _has_type(value, kind):
    if kind in (NUMBER, POSITIVE):
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return number and (kind == NUMBER or value > 0)
    if kind == STRING:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == OBJECT:
        return isinstance(value, dict)
    return isinstance(value, list)


def _lookup(obj, dotted):
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None, False
        obj = obj[part]
    return obj, True


class Checked:
    """Reads keys of one JSON object, raising BadInput that names the file and the full key path."""

    def __init__(self, obj, where, prefix=""):
        self.obj, self.where, self.prefix = obj, where, prefix

    def _key(self, dotted):
        return self.prefix + dotted

    def need(self, dotted, kind, why="a tpusim.run/1 report has it"):
        value, found = _lookup(self.obj, dotted)
        if not found:
            raise BadInput(self.where, self._key(dotted), f"missing ({why})")
        if not _has_type(value, kind):
            raise BadInput(self.where, self._key(dotted), f"is {json.dumps(value)[:40]}, expected {kind}")
        return value

    def want(self, dotted, kind):
        """An optional key: None when absent; present with the wrong type is still an error."""
        value, found = _lookup(self.obj, dotted)
        if not found or value is None:
            return None
        if not _has_type(value, kind):
            raise BadInput(self.where, self._key(dotted), f"is {json.dumps(value)[:40]}, expected {kind}")
        return value

    def sub(self, dotted):
        return Checked(self.need(dotted, OBJECT), self.where, self._key(dotted) + ".")


def _buckets(c):
    return {b: c.need(f"mxu_cycles.{b}", NUMBER) for b in BUCKETS}


def _bytes(c):
    """Bytes per memory level, or None when the report predates totals.bytes."""
    if c.want("bytes", OBJECT) is None:
        return None
    return {level: c.need(f"bytes.{level}", NUMBER, "bytes per memory level") for level, _ in MEMORY_LEVELS}


def _energy_parts(c):
    parts = {}
    for key, value in c.need("energy", OBJECT).items():
        if key.endswith("_j"):
            if not _has_type(value, NUMBER):
                raise BadInput(c.where, c._key(f"energy.{key}"),
                               f"is {json.dumps(value)[:40]}, expected a number")
            parts[key[:-2]] = value
    if not parts:
        raise BadInput(c.where, c._key("energy"), "has no <part>_j entries")
    return parts


def _layer_rows(c, key, prefix):
    """The rows of `key` (a run's `layers`, a fit step's `step.last.layers`), validated."""
    rows = []
    for i, layer in enumerate(c.need(key, LIST)):
        where = f"{prefix}{key}[{i}]"
        if not isinstance(layer, dict):
            raise BadInput(c.where, where, "expected an object")
        lc = Checked(layer, c.where, where + ".")
        rows.append({
            "name": lc.need("name", STRING),
            "type": lc.want("type", STRING) or "",
            "cycles": lc.need("cycles", NUMBER),
            # The cycles the layer's rates are taken over (docs/report.md, "Per-layer cycles");
            # absent from reports written before it existed.
            "span_cycles": lc.want("span_cycles", NUMBER),
            "ops": lc.need("ops", NUMBER),
            "ops_per_s": lc.need("ops_per_s", NUMBER),
            "utilization": lc.want("utilization", NUMBER),
            "energy_j": lc.want("energy_j", NUMBER),
            "bytes_off_chip": lc.need("bytes_off_chip", NUMBER),
            "buckets": _buckets(lc),
            # A fit step's row: its part of the step split and, forward and backward rows, the
            # Keras layer it belongs to.
            "phase": lc.want("phase", STRING),
            "layer": lc.want("layer", STRING),
        })
    return rows


class Run:
    """One chip's run (tpusim.run/1), reduced to what the page shows."""

    page = "comparison"

    def __init__(self, report, where, prefix=""):
        c = Checked(report, where, prefix)
        self.where = where
        chip = c.sub("chip")
        self.chip = chip.need("name", STRING)
        self.peak_ops_per_s = chip.need("peak_ops_per_s", POSITIVE)
        self.off_chip_bytes_per_s = chip.need("off_chip_bytes_per_s", POSITIVE)
        self.input_type = chip.want("input_type", STRING)
        self.clock_hz = chip.want("clock_hz", NUMBER)
        self.cores = chip.want("tensor_cores", NUMBER)
        self.mxus_per_core = chip.want("mxus_per_core", NUMBER)
        self.array = (chip.want("mxu_rows", NUMBER), chip.want("mxu_cols", NUMBER))
        self.chip_file = chip.want("file", STRING)
        # A run on a system (run --system): every chip's peaks, named by the system.
        if c.want("system", OBJECT) is not None:
            system = c.sub("system")
            chips = system.need("chips", POSITIVE)
            self.chip = system.need("name", STRING)
            self.peak_ops_per_s = system.need("peak_ops_per_s", POSITIVE)
            self.off_chip_bytes_per_s *= chips
            if self.cores is not None:
                self.cores *= chips
            self.chip_file = system.want("file", STRING)

        w = c.sub("workload")
        self.workload = {
            "model": w.need("model", STRING),
            "images": w.need("images", POSITIVE),
            "batch": w.need("batch", POSITIVE),
            "inputs": w.want("inputs", STRING),
            "weights": w.want("weights", STRING),
        }

        acc = Checked(c.want("accuracy", OBJECT) or {}, where, prefix + "accuracy.")
        self.top1 = acc.want("top1", NUMBER)
        self.bit_exact = acc.want("bit_exact", BOOL)
        self.mismatches = acc.want("mismatches", NUMBER)

        t = c.sub("totals")
        self.totals = {k: t.need(k, NUMBER) for k in (
            "cycles", "seconds", "ops", "ops_per_s", "images_per_s", "utilization", "energy_j",
            "energy_per_image_j", "avg_power_w", "ops_per_j", "bytes_off_chip")}
        # After the one-time model load (docs/report.md, "Load and steady state"); absent from
        # reports written before it existed.
        st = c.want("steady_state", OBJECT)
        self.steady = None
        if st is not None:
            sc = Checked(st, where, prefix + "steady_state.")
            self.steady = {k: sc.need(k, NUMBER, "a steady_state block has it") for k in (
                "cycles_per_batch", "images_per_s", "ops_per_s", "utilization", "energy_per_image_j")}
        self.buckets = _buckets(t)
        self.bytes = _bytes(t)
        self.energy = _energy_parts(c)

        self.layers = _layer_rows(c, "layers", prefix)
        self.label = self.chip

    @property
    def mxus(self):
        if self.cores is None or self.mxus_per_core is None:
            return None
        return int(self.cores * self.mxus_per_core)

    @property
    def ops_unit(self):
        """TOPS for integer MXUs, TFLOPS for floating-point ones (the papers' convention)."""
        if self.input_type is None:
            return "T ops/s"
        return "TOPS" if self.input_type.startswith(("int", "uint")) else "TFLOPS"


class FailedRun:
    """A chip whose run failed inside a comparison (tpusim.compare/1 `failed[]`)."""

    page = "comparison"

    def __init__(self, entry, where, prefix):
        c = Checked(entry, where, prefix)
        self.chip_file = c.want("chip_file", STRING) or c.need(
            "system_file", STRING, "a failed run names its chip or system file")
        self.error = c.want("error", STRING) or "no message"


def _read_run(data, where):
    return [Run(data, where)]


def _read_compare(data, where):
    c = Checked(data, where)
    runs = c.need("runs", LIST, "a tpusim.compare/1 comparison has it")
    if not runs:
        raise BadInput(where, "runs", "is empty (a comparison holds at least one run report)")
    out = []
    for i, r in enumerate(runs):
        if not isinstance(r, dict):
            raise BadInput(where, f"runs[{i}]", "expected a tpusim.run/1 report object")
        schema = r.get("schema")
        if schema != "tpusim.run/1":
            raise BadInput(where, f"runs[{i}].schema", f"is {json.dumps(schema)}, expected \"tpusim.run/1\"")
        out.append(Run(r, where, f"runs[{i}]."))
    for i, f in enumerate(c.want("failed", LIST) or []):
        if not isinstance(f, dict):
            raise BadInput(where, f"failed[{i}]", "expected an object")
        out.append(FailedRun(f, where, f"failed[{i}]."))
    return out


# A training step's parts, in the order a step runs them (tpusim.fit/1 split_cycles).
FIT_PARTS = ["infeed", "forward", "loss", "backward", "communication", "update"]
FIT_PART_COLOURS = {"infeed": "#9467bd", "forward": "#1f77b4", "loss": "#bcbd22",
                    "backward": "#ff7f0e", "communication": "#d62728", "update": "#2ca02c"}


class Fit:
    """One training run (tpusim.fit/1), reduced to what the page shows: it joins the comparison
    page as a "Training" section."""

    page = "comparison"

    def __init__(self, report, where):
        c = Checked(report, where)
        why = "a tpusim.fit/1 report has it"
        self.where = where
        self.chip = c.need("chip", STRING, why)
        # fit --system: the system trained on, named with its chips (docs/systems.md).
        system = c.want("system.name", STRING)
        if system:
            chips = c.need("system.chips", POSITIVE, "a tpusim.fit/1 report with system.name has it")
            self.on = f"{system} ({chips} × {self.chip})"
        else:
            self.on = self.chip
        self.model = c.need("model", STRING, why)
        self.replicas = c.need("replicas", POSITIVE, why)
        self.global_batch = c.need("global_batch", POSITIVE, why)
        self.micro_batch = c.want("micro_batch", NUMBER)
        self.optimizer = c.want("optimizer", STRING)
        self.learning_rate = c.want("learning_rate", NUMBER)
        self.steps = c.need("steps", NUMBER, why)
        self.checked = c.want("checked", BOOL)
        # fit --timing-only computes no loss (docs/report.md, "Training"): its epochs have none.
        timing_only = c.want("outputs_computed", BOOL) is False
        need_or_want = (lambda ec, k: ec.want(k, NUMBER)) if timing_only else (lambda ec, k: ec.need(k, NUMBER, why))
        self.epochs = []
        for i, e in enumerate(c.need("epochs", LIST, why)):
            if not isinstance(e, dict):
                raise BadInput(where, f"epochs[{i}]", "expected an object")
            ec = Checked(e, where, f"epochs[{i}].")
            self.epochs.append({
                "epoch": ec.need("epoch", NUMBER, why), "loss": need_or_want(ec, "loss"),
                "accuracy": need_or_want(ec, "accuracy"), "val_loss": ec.want("val_loss", NUMBER),
                "val_accuracy": ec.want("val_accuracy", NUMBER),
                "simulated_seconds": ec.need("simulated_seconds", NUMBER, why),
            })
        if not self.epochs:
            raise BadInput(where, "epochs", "is empty (a fit report holds at least one epoch)")
        step = Checked(c.want("step", OBJECT) or {}, where, "step.")
        self.step_cycles = step.want("cycles_median", NUMBER)
        self.step_seconds = step.want("seconds_median", NUMBER)
        # The last step's cycles by part (docs/training.md, "The report's step split").
        self.split = {}
        split = step.want("last.split_cycles", OBJECT)
        for part in FIT_PARTS:
            if split is not None:
                self.split[part] = step.need(f"last.split_cycles.{part}", NUMBER, why)
        self.last_tflops = step.want("last.tflops", NUMBER)
        self.last_energy_j = step.want("last.energy_j", NUMBER)
        # The last step per tag (forward and backward of each layer), as a run's layers.
        self.step_layers = None
        if step.want("last.layers", LIST) is not None:
            last = step.sub("last")
            self.step_layers = StepLayers(self, _layer_rows(last, "layers", "step.last."), last.need(
                "cycles", POSITIVE, why), last.need("seconds", POSITIVE, why), last.need("peak_ops_per_s", POSITIVE, why))
        self.wall_seconds = c.want("host.wall_seconds", NUMBER)
        # The steps after the first (docs/report.md, the fit report's steady_state); absent after one step.
        st = c.want("steady_state", OBJECT)
        self.steady = None
        if st is not None:
            sc = Checked(st, where, "steady_state.")
            self.steady = {k: sc.need(k, NUMBER, "a fit report's steady_state has it") for k in (
                "steps", "seconds_per_step", "images_per_s", "tflops", "energy_per_image_j")}


class StepLayers:
    """A fit's last step per tag, shaped as a Run for the layer table: its clock follows from the
    step's cycles and seconds (a fit report names no clock), its images are the global batch."""

    def __init__(self, fit, layers, cycles, seconds, peak_ops_per_s):
        self.layers, self.peak_ops_per_s = layers, peak_ops_per_s
        self.clock_hz = cycles / seconds
        self.totals = {"cycles": cycles}
        self.workload = {"images": fit.global_batch}
        self.ops_unit = "TFLOPS"


def _read_fit(data, where):
    return [Fit(data, where)]


# schema -> reader(parsed JSON, file name) -> list of documents of one kind.
READERS = {
    "tpusim.run/1": _read_run,
    "tpusim.compare/1": _read_compare,
    "tpusim.fit/1": _read_fit,
}


def read_input(path):
    if os.path.isdir(path):
        raise BadInput(path, "", "is a directory (report.py reads tpusim.run/1, tpusim.compare/1 and tpusim.fit/1 "
                       "JSON files)")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(path, "", f"cannot read ({e.strerror if isinstance(e, OSError) else e})")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadInput(path, "", f"not JSON ({e})")
    if not isinstance(data, dict):
        raise BadInput(path, "", "not a JSON object (expected a tpusim report)")
    known = ", ".join(READERS)
    if "schema" not in data:
        raise BadInput(path, "schema", f"missing (expected one of {known})")
    reader = READERS.get(data["schema"])
    if reader is None:
        raise BadInput(path, "schema",
                       f"{json.dumps(data['schema'])[:60]} is not one report.py reads ({known})")
    return reader(data, path)


# ---------------------------------------------------------------------------------------------
# Formatting numbers for reading


def sig(x, digits=3):
    """`x` with `digits` significant digits and thousands separators: 912,440 · 91.8 · 0.00123."""
    if x is None:
        return "—"
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    mag = math.floor(math.log10(abs(x)))
    if mag < -4:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - mag)
    return f"{x:,.{decimals}f}"


def count(x):
    return "—" if x is None else f"{round(x):,}"


def esc(s):
    return html.escape(str(s), quote=True)


# ---------------------------------------------------------------------------------------------
# Plots: matplotlib figures without pyplot (no global state), embedded as SVG data URIs so that
# each figure's element ids stay private to it and the page needs nothing from outside.


def _mpl():
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams.update({
            "svg.fonttype": "path",        # glyphs as paths: no font needed where the page is read
            "svg.hashsalt": "tpusim",      # deterministic ids: same input, same page
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        })
        from matplotlib.figure import Figure
        from matplotlib import ticker
    except ImportError:
        raise Fatal(f"matplotlib cannot be imported by {sys.executable}: install Debian's "
                    "python3-matplotlib (scripts/setup.sh) and run report.py with /usr/bin/python3")
    return Figure, ticker


class Plot:
    def __init__(self, kind, chip, svg, alt, caption):
        self.kind, self.chip, self.alt, self.caption = kind, chip, alt, caption
        self.svg, self.labels = svg

    def html(self):
        uri = "data:image/svg+xml;base64," + base64.b64encode(self.svg).decode("ascii")
        chip = f' data-chip="{esc(self.chip)}"' if self.chip else ""
        # Every text the figure drew, as [left, top, right, bottom] fractions of the image and the
        # text: the Chromium test checks on the rendered page that no two overlap.
        labels = esc(json.dumps(self.labels, separators=(",", ":"), ensure_ascii=False))
        return (f'<figure class="plot" data-plot="{esc(self.kind)}"{chip} data-labels="{labels}">'
                f'<img src="{uri}" alt="{esc(self.alt)}">'
                f"<figcaption>{self.caption}</figcaption></figure>")


def drawn_texts(fig):
    """The texts a draw of `fig` puts on the canvas (tick labels outside the view, empty and
    hidden texts are not drawn, so not listed), with the renderer that drew them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()
    texts = []
    draw_text = renderer.draw_text

    def spy(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if mtext is not None and s.strip() and mtext not in texts:
            texts.append(mtext)
        return draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = spy
    try:
        fig.draw(renderer)
    finally:
        del renderer.draw_text
    return texts, renderer


def overlapping(a, b, slack=0.5):
    """Two display boxes overlap by more than `slack` pixels both ways."""
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > slack) and (min(a.y1, b.y1) - max(a.y0, b.y0) > slack)


def _svg(fig):
    """(the SVG, every drawn text's box in fractions of the image from its top left, and text)."""
    texts, renderer = drawn_texts(fig)
    # The tight box savefig would use, made explicit so the texts' boxes map onto the image.
    box = fig.get_tightbbox(renderer).padded(0.1)
    labels = []
    for t in texts:
        e = t.get_window_extent(renderer)
        x0, x1 = (e.x0 / fig.dpi - box.x0) / box.width, (e.x1 / fig.dpi - box.x0) / box.width
        y0, y1 = (box.y1 - e.y1 / fig.dpi) / box.height, (box.y1 - e.y0 / fig.dpi) / box.height
        labels.append([round(x0, 5), round(y0, 5), round(x1, 5), round(y1, 5), t.get_text()])
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches=box, pad_inches=0)
    return buf.getvalue(), labels


def _log_floor(x):
    return 10 ** math.floor(math.log10(x))


def _log_ceil(x):
    return 10 ** math.ceil(math.log10(x))


# Layers named on a roofline at most, and layers or blocks drawn in the cycle plot before the rest
# are summed into one bar; tables show TOP_LAYERS rows, then one for the rest.
ROOFLINE_LABELS = 12
CYCLE_BARS = 16
TOP_LAYERS = 20
SI = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def _si(v):
    """A tick in engineering notation: 1.5 T, 20 G, 300 k, 0.01; never 1e13."""
    for f, p in SI:
        if abs(v) >= f:
            return f"{v / f:g} {p}"
    return f"{v:g}"


def _place_labels(fig, ax, points):
    """Names `points` ((x, y, name) in data coordinates) beside their markers, trying four sides,
    keeping only the names that overlap no text already on the figure. Returns how many it kept."""
    texts, renderer = drawn_texts(fig)
    placed = [t.get_window_extent(renderer) for t in texts]
    kept = 0
    for x, y, name in points:
        for dx, dy, ha, va in ((5, -3, "left", "top"), (5, 3, "left", "bottom"),
                               (-5, -3, "right", "top"), (-5, 3, "right", "bottom")):
            a = ax.annotate(name, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7.5,
                            ha=ha, va=va, annotation_clip=False)
            box = a.get_window_extent(renderer)
            inside = fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
            if inside and not any(overlapping(box, b) for b in placed):
                placed.append(box)
                kept += 1
                break
            a.remove()
    return kept


def roofline_plot(run, Figure, ticker):
    peak, bw = run.peak_ops_per_s, run.off_chip_bytes_per_s
    ridge = peak / bw
    finite, unbounded = [], []
    for layer in run.layers:
        if layer["ops"] <= 0 or layer["ops_per_s"] <= 0:
            continue
        if layer["bytes_off_chip"] > 0:
            finite.append((layer["ops"] / layer["bytes_off_chip"], layer["ops_per_s"], layer["name"]))
        else:
            unbounded.append((layer["ops_per_s"], layer["name"]))
    t = run.totals
    whole = None
    if t["bytes_off_chip"] > 0 and t["ops_per_s"] > 0:
        whole = (t["ops"] / t["bytes_off_chip"], t["ops_per_s"])

    xs = [ridge] + [p[0] for p in finite] + ([whole[0]] if whole else [])
    ys = [p[1] for p in finite] + [p[0] for p in unbounded] + ([whole[1]] if whole else [])
    x_lo, x_hi = _log_floor(min(xs)) / 10, _log_ceil(max(xs)) * 10
    y_lo = _log_floor(min(ys + [peak])) / 10
    y_hi = _log_ceil(max(ys + [peak])) * 3

    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    roof_x = [x_lo, ridge, x_hi]
    ax.plot(roof_x, [min(peak, bw * x) for x in roof_x], color="black", lw=1.6, zorder=2)
    ax.axvline(ridge, color="black", lw=0.8, ls=":", zorder=1)
    ax.annotate(f"peak {sig(peak / 1e12)} {run.ops_unit}", (ridge, peak), xytext=(6, 4),
                textcoords="offset points", ha="left", va="bottom")
    # The bandwidth label follows the slope: its angle on screen, from the axes' transform.
    slope_lo = max(x_lo, y_lo / bw)
    slope_x = math.sqrt(slope_lo * ridge)
    (x0, y0), (x1, y1) = ax.transData.transform([(slope_lo, bw * slope_lo), (ridge, peak)])
    ax.annotate(f"off-chip {sig(bw / 1e9)} GB/s", (slope_x, bw * slope_x), xytext=(0, 4),
                textcoords="offset points", ha="center", va="bottom", rotation_mode="anchor",
                rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)))
    ax.annotate(f"ridge {sig(ridge)} ops/B", (ridge, y_lo), xytext=(4, 4), textcoords="offset points",
                ha="left", va="bottom")

    for x, y, _ in finite:
        ax.scatter([x], [y], s=28, color="#1f77b4", zorder=3)
    for y, _ in unbounded:
        # No off-chip byte: the intensity is unbounded, so the point sits at the right edge.
        ax.scatter([x_hi], [y], s=40, marker=">", color="#1f77b4", zorder=3, clip_on=False)
    if whole:
        ax.scatter([whole[0]], [whole[1]], s=140, marker="*", color="#d62728", zorder=4)
        ax.annotate("whole run", whole, xytext=(7, 3), textcoords="offset points", fontsize=8,
                    color="#d62728", fontweight="bold")
    # Names for the layers with the most ops, each where it overlaps no other text; the rest of
    # the points stay unnamed (a ResNet-50 has 53 convolutions).
    ops = {l["name"]: l["ops"] for l in run.layers}
    candidates = sorted([(x, y, name) for x, y, name in finite] + [(x_hi, y, name) for y, name in unbounded],
                        key=lambda p: -ops[p[2]])
    labelled = _place_labels(fig, ax, candidates[:ROOFLINE_LABELS])
    ax.set_xlabel("operational intensity (ops per off-chip byte; 1 MAC = 2 ops)")
    ax.set_ylabel("achieved over the layer's span (ops/s)")
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _si(v)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _si(v)))
    ax.set_title(f"{run.label}: roofline")
    ax.grid(True, which="major", lw=0.4, color="#dddddd")

    notes = []
    above = [name for _, y, name in finite if y > peak] + [name for y, name in unbounded if y > peak]
    if above:
        notes.append(f"Above the compute ceiling: {', '.join(above)} (a report whose rates predate span_cycles: "
                     "docs/report.md, \"Per-layer cycles\").")
    if unbounded:
        notes.append("Layers without off-chip traffic are drawn at the right edge (▶).")
    if not whole:
        notes.append("The whole run moved no off-chip byte and is not drawn.")
    shown = len(finite) + len(unbounded)
    if labelled < shown:
        notes.append(f"Named: the {labelled} of the {shown} layers with the most ops whose names fit "
                     "without overlapping; the layer table below has every layer.")
    caption = (f"{esc(run.label)}: compute ceiling {esc(sig(peak / 1e12))} {esc(run.ops_unit)}, "
               f"off-chip bandwidth ceiling {esc(sig(bw / 1e9))} GB/s, ridge at {esc(sig(ridge))} ops/B; "
               f"{shown} layers with MACs (●){' and the whole run (★)' if whole else ''}. "
               + esc(" ".join(notes)))
    return Plot("roofline", run.label, _svg(fig), f"Roofline of {run.label}", caption)


def block_of(name):
    """A layer's block: `conv3_block2` for `conv3_block2_1_conv` (Keras's ResNet and MobileNet
    names); None for a layer outside any block."""
    m = re.match(r"(.+?_block\d+)_", name)
    return m.group(1) if m else None


def layer_groups(run):
    """The units the cycle plot draws: a model with blocks (ResNet-50's conv3_block2_...) by block,
    layers outside blocks alone; other models layer by layer. Each is (name, [layers])."""
    groups = {}
    for l in run.layers:
        groups.setdefault(block_of(l["name"]) or l["name"], []).append(l)
    return list(groups.items())


def _stacked_bars(Figure, units, keys, colours, labels):
    """Horizontal bars, one per unit (name, {key: value}) in order, first at the top, each stacked
    by `keys`: the CYCLE_BARS - 1 largest units, in order, and the rest summed into one bar at the
    end. Returns the figure, its axes and the units drawn."""
    if len(units) > CYCLE_BARS:
        top = set(sorted(range(len(units)), key=lambda i: -sum(units[i][1].values()))[:CYCLE_BARS - 1])
        rest = [u for i, u in enumerate(units) if i not in top]
        units = [u for i, u in enumerate(units) if i in top] + [
            (f"the other {len(rest)}", {k: sum(u[k] for _, u in rest) for k in keys})]
    fig = Figure(figsize=(6.4, max(3.0, 1.2 + 0.26 * len(units))))
    ax = fig.add_subplot()
    names = [n for n, _ in units][::-1]
    left = [0.0] * len(units)
    for k in keys:
        values = [u[k] for _, u in units][::-1]
        ax.barh(names, values, left=left, color=colours[k], label=labels[k], height=0.65)
        left = [x + y for x, y in zip(left, values)]
    return fig, ax, units


def buckets_plot(run, Figure, ticker):
    grouped = any(block_of(l["name"]) for l in run.layers)
    units = []
    for name, layers in layer_groups(run):
        b = {k: sum(l["buckets"][k] for l in layers) for k in BUCKETS}
        if any(v > 0 for v in b.values()):
            units.append((name + (f" ({len(layers)} layers)" if len(layers) > 1 else ""), b))
    empty = sum(1 for l in run.layers if not any(l["buckets"][k] > 0 for k in BUCKETS))
    fig, ax, units = _stacked_bars(Figure, units, BUCKETS, BUCKET_COLOURS, BUCKET_LABELS)
    mxus = run.mxus
    ax.set_xlabel("MXU cycles" + (f" (summed over {mxus} MXUs)" if mxus and mxus > 1 else ""))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _si(v)))
    ax.tick_params(axis="y", labelsize=7.5)
    ax.set_title(f"{run.label}: MXU cycles per {'block' if grouped else 'layer'}")
    ax.legend(fontsize=7.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 1.2 / fig.get_figheight() / 4),
              ncol=3)
    if not units:
        ax.text(0.5, 0.5, "no MXU cycles in any layer", transform=ax.transAxes, ha="center")

    total = sum(run.buckets.values())
    shares = ", ".join(f"{BUCKET_LABELS[b]} {sig(100 * run.buckets[b] / total)} %"
                       for b in BUCKETS if total and run.buckets[b] > 0)
    caption = f"{esc(run.label)}, whole run: {esc(shares or 'no MXU cycles')}."
    if grouped:
        caption += " Layers of a block (conv3_block2_…) are summed into one bar."
    if any(n.startswith("the other ") for n, _ in units):
        caption += f" The {CYCLE_BARS - 1} bars with the most MXU cycles are drawn; the rest are summed in the last."
    if empty:
        caption += f" {empty} layers have no MXU cycles of their own (setup, pooling, fused activations) and are not drawn."
    return Plot("cycles", run.label, _svg(fig), f"MXU cycle buckets per layer of {run.label}", caption)


def _part_colours(parts):
    colours, i = {}, 0
    for p in parts:
        if p in ENERGY_COLOURS:
            colours[p] = ENERGY_COLOURS[p]
        else:
            colours[p] = ENERGY_PALETTE[i % len(ENERGY_PALETTE)]
            i += 1
    return colours


def _all_parts(runs):
    parts = []
    for r in runs:
        for p in r.energy:
            if p not in parts:
                parts.append(p)
    return parts


def energy_plot(runs, Figure, ticker):
    parts = _all_parts(runs)
    colours = _part_colours(parts)
    labels = [r.label for r in runs]
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    for ax, include_static, title in ((axes[0], True, "all energy"),
                                      (axes[1], False, "dynamic energy (without static)")):
        bottom = [0.0] * len(runs)
        for p in parts:
            if p == "static" and not include_static:
                continue
            values = [1e6 * r.energy.get(p, 0.0) / r.workload["images"] for r in runs]
            ax.bar(labels, values, bottom=bottom, color=colours[p], label=p.replace("_", " "), width=0.6)
            bottom = [x + y for x, y in zip(bottom, values)]
        ax.set_ylabel("energy per image (µJ)")
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=20)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles[::-1], names[::-1], loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    caption = ("Energy per image by component (energy.&lt;part&gt;_j ÷ images), stacked; right: the same "
               "without static (idle-power) energy.")
    return Plot("energy", None, _svg(fig), "Energy breakdown per chip", caption)


def _bar_panel(ax, ticker, labels, values, colours, ylabel, fmt):
    bars = ax.bar(labels, values, color=colours, width=0.6)
    positive = [v for v in values if v > 0]
    if len(positive) == len(values) and positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")
    for b, v in zip(bars, values):
        ax.annotate(fmt(v), (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8)
    else:
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _si(v)))
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=20)
    ax.margins(y=0.15)


def comparison_plot(runs, Figure, ticker):
    labels = [r.label for r in runs]
    colours = [r.colour for r in runs]
    fig = Figure(figsize=(12, 3.8))
    axes = fig.subplots(1, 3)
    _bar_panel(axes[0], ticker, labels, [r.totals["images_per_s"] for r in runs], colours,
               "throughput (images/s)", sig)
    axes[0].set_title("throughput (higher is better)")
    _bar_panel(axes[1], ticker, labels, [1e6 * r.totals["energy_per_image_j"] for r in runs], colours,
               "energy per image (µJ)", sig)
    axes[1].set_title("energy per image (lower is better)")
    _bar_panel(axes[2], ticker, labels, [100 * r.totals["utilization"] for r in runs], colours,
               "MXU utilization (%)", sig)
    axes[2].set_title("utilization of peak MACs")
    fig.tight_layout()
    caption = ("Throughput, energy per image and utilization per chip (totals.images_per_s, "
               "totals.energy_per_image_j, totals.utilization); a panel is logarithmic when its bars "
               "span more than 30×.")
    return Plot("comparison", None, _svg(fig), "Chip comparison: throughput, energy per image, utilization",
                caption)


def memory_plot(runs, Figure, ticker):
    fig = Figure(figsize=(11, 4.0))
    ax = fig.add_subplot()
    n = len(runs)
    width = 0.8 / n
    for i, r in enumerate(runs):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(MEMORY_LEVELS))]
        values = [r.bytes[level] / r.workload["images"] for level, _ in MEMORY_LEVELS]
        ax.bar(xs, [v if v > 0 else float("nan") for v in values], width=width,
               color=r.colour, label=r.label)
    ax.set_xticks(range(len(MEMORY_LEVELS)), [name for _, name in MEMORY_LEVELS])
    ax.set_yscale("log")
    ax.set_ylabel("bytes per image")
    ax.legend(frameon=False, fontsize=8)
    ax.grid(True, axis="y", which="major", lw=0.4, color="#dddddd")
    caption = ("Bytes moved per image at each memory level (totals.bytes.&lt;level&gt; ÷ images); "
               "logarithmic.")
    return Plot("memory", None, _svg(fig), "Bytes per image at each memory level per chip", caption)


# ---------------------------------------------------------------------------------------------
# The comparison page

CSS = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 24px auto;
       max-width: 1280px; padding: 0 16px; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: 2px; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; }
th { background: #f2f2f2; text-align: center; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name { white-space: nowrap; }
td.bad { color: #b00020; font-weight: bold; }
figure.plot { margin: 0.6em 0; }
figure.plot img { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 0.85em; color: #555; max-width: 60em; }
.grid { display: flex; flex-wrap: wrap; gap: 16px; }
.grid figure { flex: 1 1 560px; }
.note { background: #fff6d6; border-left: 4px solid #e0b000; padding: 6px 10px; }
dl.workload { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; font-size: 0.92em; }
dl.workload dt { color: #555; }
dl.workload dd { margin: 0; }
footer { margin-top: 2em; font-size: 0.8em; color: #666; }
"""


def _table(head, rows, numeric):
    # A unit in parentheses never breaks across lines.
    head = [re.sub(r"\([^)]*\)", lambda m: m.group(0).replace(" ", "\u00a0"), h) for h in head]
    out = ["<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = "num" if numeric[i] else ("name" if i == 0 else "")
            if isinstance(cell, tuple):
                cell, extra = cell
                cls = (cls + " " + extra).strip()
            cells.append(f'<td class="{cls}">{esc(cell)}</td>' if cls else f"<td>{esc(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def comparison_table(runs):
    head = ["chip", "run time (cycles)", "simulated time (ms)", "throughput (images/s)",
            "achieved / peak (T ops/s)", "utilization (%)", "energy per image (µJ)", "average power (W)",
            "efficiency (G ops/J)", "top-1 (%)", "bit-exact (yes/no)"]
    rows = []
    for r in runs:
        t = r.totals
        if r.bit_exact is None:
            exact = "—"
        elif r.bit_exact:
            exact = "yes"
        else:
            exact = (f"NO ({count(r.mismatches)} mismatches)" if r.mismatches is not None else "NO", "bad")
        rows.append([
            r.label, count(t["cycles"]), sig(1e3 * t["seconds"], 4), sig(t["images_per_s"], 4),
            f"{sig(t['ops_per_s'] / 1e12)} / {sig(r.peak_ops_per_s / 1e12)} {r.ops_unit}",
            sig(100 * t["utilization"]), sig(1e6 * t["energy_per_image_j"]), sig(t["avg_power_w"]),
            sig(t["ops_per_j"] / 1e9), "—" if r.top1 is None else f"{100 * r.top1:.2f}", exact,
        ])
    return _table(head, rows, [False] + [True] * 9 + [False])


def steady_table(runs):
    """Serving after the one-time model load beside the totals, which include it (docs/report.md,
    "Load and steady state")."""
    head = ["chip", "steady cycles per batch", "steady throughput (images/s)", "totals throughput (images/s)",
            "steady achieved (T ops/s)", "steady utilization (%)", "steady energy per image (µJ)"]
    rows = []
    for r in runs:
        st = r.steady
        rows.append([r.label, count(round(st["cycles_per_batch"])), sig(st["images_per_s"], 4),
                     sig(r.totals["images_per_s"], 4), sig(st["ops_per_s"] / 1e12), sig(100 * st["utilization"]),
                     sig(1e6 * st["energy_per_image_j"])])
    return _table(head, rows, [False] + [True] * 6)


def energy_table(runs):
    parts = _all_parts(runs)
    head = ["chip"] + [f"{p.replace('_', ' ')} (µJ/image)" for p in parts] + ["total (µJ/image)"]
    rows = []
    for r in runs:
        n = r.workload["images"]
        rows.append([r.label] + [sig(1e6 * r.energy[p] / n) if p in r.energy else "—" for p in parts]
                    + [sig(1e6 * r.totals["energy_j"] / n)])
    return _table(head, rows, [False] + [True] * (len(parts) + 1))


def memory_table(runs):
    head = (["chip"] + [f"{name} (bytes/image)" for _, name in MEMORY_LEVELS]
            + ["off-chip intensity (ops/B)"])
    rows = []
    for r in runs:
        n = r.workload["images"]
        off = r.bytes["off_chip"]
        rows.append([r.label] + [sig(r.bytes[level] / n) for level, _ in MEMORY_LEVELS]
                    + [sig(r.totals["ops"] / off) if off > 0 else "no off-chip bytes"])
    return _table(head, rows, [False] + [True] * (len(MEMORY_LEVELS) + 1))


def layer_table(run):
    """Per layer: the span its rates are taken over beside its retirement cycles (docs/report.md,
    "Per-layer cycles"), so each rate recomputes from its row. A model with more than TOP_LAYERS
    layers shows its TOP_LAYERS longest (by span) in model order, then one row summing the rest."""
    clock = run.clock_hz
    head = ["layer", "type", "span (cycles)", "retired (cycles)", "retired share (%)", "ops (M)",
            "off-chip (bytes)", "intensity (ops/B)", f"achieved ({run.ops_unit})", "utilization (%)",
            "energy (µJ/image)"]
    rows = []
    n = run.workload["images"]
    total = run.totals["cycles"]
    layers = run.layers
    rest = []
    if len(layers) > TOP_LAYERS + 1:
        by_time = sorted(range(len(layers)), key=lambda i: -(layers[i]["span_cycles"] or layers[i]["cycles"]))
        top = set(by_time[:TOP_LAYERS])
        rest = [l for i, l in enumerate(layers) if i not in top]
        layers = [l for i, l in enumerate(layers) if i in top]
    for l in layers:
        if l["ops"] <= 0:
            intensity = "—"
        else:
            intensity = sig(l["ops"] / l["bytes_off_chip"]) if l["bytes_off_chip"] > 0 else "∞"
        rows.append([
            l["name"], l["type"], count(l["span_cycles"]), count(l["cycles"]), sig(100 * l["cycles"] / total),
            sig(l["ops"] / 1e6), count(l["bytes_off_chip"]), intensity,
            sig(l["ops_per_s"] / 1e12), sig(None if l["utilization"] is None else 100 * l["utilization"]),
            sig(None if l["energy_j"] is None else 1e6 * l["energy_j"] / n),
        ])
    if rest:
        # Spans overlap and do not add up, so the rest has no span and no rate of its own.
        ops = sum(l["ops"] for l in rest)
        energy = None if any(l["energy_j"] is None for l in rest) else sum(l["energy_j"] for l in rest)
        retired = sum(l["cycles"] for l in rest)
        rows.append([f"the other {len(rest)} layers", "", "—", count(retired), sig(100 * retired / total),
                     sig(ops / 1e6), count(sum(l["bytes_off_chip"] for l in rest)), "—", "—", "—",
                     sig(None if energy is None else 1e6 * energy / n)])
    basis = (f"Rates over each layer's span: achieved = ops × {sig(clock / 1e6, 4)} MHz ÷ span; "
             f"utilization = ops ÷ 2 ÷ (peak {count(run.peak_ops_per_s / clock / 2)} MAC/cycle × span). "
             if clock else "")
    note = (f"<p>{esc(basis)}Retired cycles (each cycle charged to the layer of the oldest unfinished "
            "instruction) add up to the run's; spans overlap and do not (docs/report.md, \"Per-layer cycles\")."
            + (f" The {TOP_LAYERS} layers with the longest spans, in model order; the last row sums "
               f"the other {len(rest)}." if rest else "") + "</p>")
    return note + _table(head, rows, [False, False] + [True] * 9)


def block_table(run):
    """A model with blocks (ResNet-50's conv3_block2_...): per block, its layers' retired cycles,
    ops and energy summed, and its longest layer."""
    groups = [(name, layers) for name, layers in layer_groups(run) if block_of(layers[0]["name"])]
    if not groups:
        return ""
    head = ["block", "layers", "retired (cycles)", "retired share (%)", "ops (M)", "energy (µJ/image)",
            "longest layer (span cycles)"]
    rows = []
    n, total = run.workload["images"], run.totals["cycles"]
    for name, layers in groups:
        retired = sum(l["cycles"] for l in layers)
        longest = max(layers, key=lambda l: l["span_cycles"] or 0)
        energy = None if any(l["energy_j"] is None for l in layers) else sum(l["energy_j"] for l in layers)
        rows.append([name, str(len(layers)), count(retired), sig(100 * retired / total),
                     sig(sum(l["ops"] for l in layers) / 1e6), sig(None if energy is None else 1e6 * energy / n),
                     f"{longest['name']} ({count(longest['span_cycles'])})"])
    return ("<p>Per block (the layers named <code>convN_blockM_…</code>), summed over its layers.</p>"
            + _table(head, rows, [False, True, True, True, True, True, False]))


def training_plot(fit, Figure, ticker):
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 2)
    epochs = [e["epoch"] for e in fit.epochs]
    for ax, key, label in ((axes[0], "loss", "loss"), (axes[1], "accuracy", "accuracy")):
        ax.plot(epochs, [e[key] for e in fit.epochs], marker="o", color="#1f77b4", label=f"training {label}")
        val = [(e["epoch"], e["val_" + key]) for e in fit.epochs if e["val_" + key] is not None]
        if val:
            ax.plot([v[0] for v in val], [v[1] for v in val], marker="s", linestyle="none",
                    color="#d62728", label=f"validation {label}")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.legend(fontsize=8, frameon=False)
    axes[0].set_yscale("log")
    axes[0].set_title(f"{fit.model} on {fit.on}: loss (log scale)")
    axes[1].set_title(f"{fit.model} on {fit.on}: accuracy")
    caption = (f"Per epoch: the mean loss and accuracy of the epoch's training images as the chip "
               f"computed them (epochs[].loss, accuracy) and, where it validated, on the test set "
               f"(val_loss, val_accuracy); {esc(fit.where)}.")
    return Plot("training", fit.on, _svg(fig), f"Loss and accuracy per epoch of {fit.model} on {fit.on}",
                caption)


def step_split_plot(fit, Figure, ticker):
    fig = Figure(figsize=(11, 1.9))
    ax = fig.add_subplot()
    total = sum(fit.split.values())
    left = 0.0
    for part in FIT_PARTS:
        v = fit.split[part]
        ax.barh([0], [v], left=left, color=FIT_PART_COLOURS[part],
                label=f"{part} {100 * v / total:.1f} %" if total else part, height=0.6)
        left += v
    ax.set_yticks([])
    ax.set_xlabel("cycles of the last step")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _si(v)))
    ax.legend(fontsize=8, frameon=False, ncol=len(FIT_PARTS), loc="upper center",
              bbox_to_anchor=(0.5, -0.55))
    caption = (f"The last training step's {count(total)} cycles by part (step.last.split_cycles): "
               "each cycle of a core charged to the part of its oldest unfinished instruction, "
               "averaged over the cores (docs/training.md, \"The report's step split\").")
    return Plot("step-split", fit.on, _svg(fig), f"Step split of {fit.model} on {fit.on}", caption)


def step_cycles_plot(fit, Figure, ticker):
    """The last step's retired cycles per block (ResNet-50's conv3_block2_...) or per layer, each
    bar stacked by the parts of the step split its rows belong to; the step's own rows (infeed,
    loss, gradient exchange, update, ...) are bars of their own."""
    units = {}
    for l in fit.step_layers.layers:
        name = (block_of(l["layer"]) or l["layer"]) if l["layer"] else l["name"]
        part = l["phase"] if l["phase"] in FIT_PARTS else "forward"
        units.setdefault(name, {p: 0.0 for p in FIT_PARTS})[part] += l["cycles"]
    units = [(n, u) for n, u in units.items() if sum(u.values()) > 0]
    grouped = any(l["layer"] and block_of(l["layer"]) for l in fit.step_layers.layers)
    used = [p for p in FIT_PARTS if any(u[p] > 0 for _, u in units)]
    fig, ax, units = _stacked_bars(Figure, units, used, FIT_PART_COLOURS, {p: p for p in used})
    ax.set_xlabel("cycles of the last step (retired, averaged over the cores)")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _si(v)))
    ax.tick_params(axis="y", labelsize=7.5)
    ax.set_title(f"{fit.model} on {fit.on}: the step per {'block' if grouped else 'layer'}")
    ax.legend(fontsize=7.5, frameon=False, loc="upper center",
              bbox_to_anchor=(0.5, -0.12 - 1.2 / fig.get_figheight() / 4), ncol=len(used) or 1)
    caption = ("The last training step's cycles per " + ("block (its layers' forward and backward rows summed)"
               if grouped else "layer (its forward and backward rows)") +
               " and per row of the step's own (step.last.layers[].cycles), coloured by their part of the step split.")
    if any(n.startswith("the other ") for n, _ in units):
        caption += f" The {CYCLE_BARS - 1} bars with the most cycles are drawn; the rest are summed in the last."
    return Plot("step-cycles", fit.on, _svg(fig), f"Cycles per {'block' if grouped else 'layer'} of a step of "
                f"{fit.model} on {fit.on}", caption)


def training_section(fit, Figure, ticker):
    out = [f"<h2>Training: {esc(fit.model)} on {esc(fit.on)}</h2>"]
    desc = [f"{fit.replicas:,} replicas (TensorCores)", f"global batch {fit.global_batch:,}"]
    if fit.micro_batch:
        desc.append(f"micro-batch {fit.micro_batch:,}")
    if fit.optimizer:
        desc.append(fit.optimizer + (f", learning rate {fit.learning_rate:g}" if fit.learning_rate else ""))
    desc.append(f"{fit.steps:,} steps")
    if fit.step_cycles is not None and fit.step_seconds is not None:
        desc.append(f"median step {count(fit.step_cycles)} cycles = {sig(1e3 * fit.step_seconds, 4)} ms simulated")
    if fit.checked is not None:
        desc.append("weights bit-exact with the training reference after every step" if fit.checked
                    else "not checked against the training reference")
    if fit.wall_seconds is not None:
        desc.append(f"host time {sig(fit.wall_seconds)} s")
    out.append(f"<p>{esc('; '.join(desc))}.</p>")
    if fit.steady is not None:
        st = fit.steady
        steps = "the step" if st["steps"] == 1 else f"the {count(st['steps'])} steps"
        out.append(f"<p>Steady state over {steps} after the first: "
                   f"{sig(1e3 * st['seconds_per_step'], 4)} ms per step, {sig(st['images_per_s'], 4)} images/s, "
                   f"{sig(st['tflops'])} TFLOPS, {sig(1e6 * st['energy_per_image_j'])} µJ per image.</p>")
    if any(e["loss"] is not None for e in fit.epochs):
        out.append(training_plot(fit, Figure, ticker).html())
    else:
        out.append("<p>Timing only (<code>fit --timing-only</code>): no losses or accuracies were computed.</p>")
    if fit.split:
        extra = []
        if fit.last_tflops is not None:
            extra.append(f"{sig(fit.last_tflops)} TFLOPS")
        if fit.last_energy_j is not None:
            extra.append(f"{sig(fit.last_energy_j)} J")
        if extra:
            out.append(f"<p>Last step: {esc(', '.join(extra))}.</p>")
        out.append(step_split_plot(fit, Figure, ticker).html())
    head = ["epoch", "loss", "accuracy (%)", "val_loss", "val_accuracy (%)", "simulated time (ms)"]
    rows = [[str(e["epoch"]), sig(e["loss"], 4), "—" if e["accuracy"] is None else f"{100 * e['accuracy']:.2f}",
             sig(e["val_loss"], 4) if e["val_loss"] is not None else "—",
             f"{100 * e['val_accuracy']:.2f}" if e["val_accuracy"] is not None else "—",
             sig(1e3 * e["simulated_seconds"], 4)] for e in fit.epochs]
    out.append(_table(head, rows, [True] * 6))
    if fit.step_layers is not None:
        out.append("<h3>The last step per layer, forward and backward</h3>")
        out.append(step_cycles_plot(fit, Figure, ticker).html())
        out.append(block_table(fit.step_layers))
        out.append(layer_table(fit.step_layers))
    return "\n".join(out)


def _unique_labels(runs):
    names = [r.chip for r in runs]
    for r in runs:
        if names.count(r.chip) > 1:
            r.label = f"{r.chip} ({os.path.basename(r.where)}#{runs.index(r) + 1})"


def comparison_page(docs, sources):
    runs = [d for d in docs if isinstance(d, Run)]
    failed = [d for d in docs if isinstance(d, FailedRun)]
    fits = [d for d in docs if isinstance(d, Fit)]
    if not runs and not fits:
        raise Fatal(f"{', '.join(sources)}: no run to show")
    Figure, ticker = _mpl()
    if not runs:
        title = "tpusim: training " + ", ".join(f"{f.model} on {f.on}" for f in fits)
        body = [f"<h1>{esc(title)}</h1>"] + [training_section(f, Figure, ticker) for f in fits]
        body.append("<footer>Written by scripts/report.py; how each number is computed: "
                    "docs/html-report.md.</footer>")
        return title, "\n".join(body)
    _unique_labels(runs)
    for i, r in enumerate(runs):
        r.colour = CHIP_COLOURS[i % len(CHIP_COLOURS)]
    w = runs[0].workload
    chips = ", ".join(r.label for r in runs)
    title = f"tpusim: {w['model']} on {chips}"
    body = [f"<h1>{esc(title)}</h1>"]

    body.append('<dl class="workload">')
    for name, value in (("model", w["model"]), ("images", f"{w['images']:,}"), ("batch", w["batch"]),
                        ("inputs", w["inputs"]), ("weights", w["weights"]),
                        ("reports", ", ".join(sources))):
        if value is not None:
            body.append(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>")
    body.append("</dl>")
    differ = [r for r in runs if (r.workload["model"], r.workload["images"], r.workload["batch"])
              != (w["model"], w["images"], w["batch"])]
    if differ:
        body.append('<p class="note">These runs did not all run the same workload: '
                    + esc("; ".join(f"{r.label}: {r.workload['model']}, {r.workload['images']:,} images, "
                                    f"batch {r.workload['batch']}" for r in runs))
                    + ". Per-image figures stay comparable; totals do not.</p>")

    body.append("<h2>Chip comparison</h2>")
    if failed:
        body.append('<p class="note">Failed, not shown: '
                    + esc("; ".join(f"{f.chip_file}: {f.error}" for f in failed)) + "</p>")
    body.append(comparison_table(runs))
    body.append(comparison_plot(runs, Figure, ticker).html())
    steady = [r for r in runs if r.steady is not None]
    if steady:
        body.append("<h2>Steady state</h2>")
        body.append("<p>Serving after the one-time model load (the weights' upload over the host link); "
                    "the totals above include the load.</p>")
        body.append(steady_table(steady))

    body.append("<h2>Energy</h2>")
    body.append(energy_plot(runs, Figure, ticker).html())
    body.append(energy_table(runs))

    body.append("<h2>Memory traffic</h2>")
    with_bytes = [r for r in runs if r.bytes is not None]
    without = [r.label for r in runs if r.bytes is None]
    if with_bytes:
        body.append(memory_plot(with_bytes, Figure, ticker).html())
        body.append(memory_table(with_bytes))
    if without:
        body.append('<p class="note">No bytes per memory level (totals.bytes) in the report of '
                    + esc(", ".join(without)) + "; the report predates them. Off-chip bytes "
                    "(totals.bytes_off_chip) are in the rooflines below.</p>")

    for r in runs:
        desc = []
        if r.input_type:
            desc.append(f"{r.input_type} MXU inputs")
        if all(r.array):
            desc.append(f"{r.array[0]:,}×{r.array[1]:,} arrays")
        if r.cores is not None and r.mxus_per_core is not None:
            desc.append(f"{r.cores:,} TensorCore(s) × {r.mxus_per_core:,} MXU(s)")
        if r.clock_hz:
            desc.append(f"{sig(r.clock_hz / 1e6)} MHz")
        if r.chip_file:
            desc.append(r.chip_file)
        body.append(f'<h2 id="chip-{runs.index(r) + 1}">{esc(r.label)}</h2>')
        if desc:
            body.append(f"<p>{esc('; '.join(desc))}</p>")
        body.append('<div class="grid">')
        body.append(roofline_plot(r, Figure, ticker).html())
        body.append(buckets_plot(r, Figure, ticker).html())
        body.append("</div>")
        body.append(block_table(r))
        body.append(layer_table(r))

    for f in fits:
        body.append(training_section(f, Figure, ticker))

    body.append("<footer>Written by scripts/report.py; how each number is computed: docs/html-report.md."
                "</footer>")
    return title, "\n".join(body)


# a document's `page` -> page builder(documents, source names) -> (title, body HTML).
PAGES = {
    "comparison": comparison_page,
}


def build_page(docs, sources):
    pages = {d.page for d in docs}
    if len(pages) != 1:
        raise Fatal(f"{', '.join(sources)}: these inputs need different pages ({', '.join(sorted(pages))}); "
                    "give one kind at a time")
    title, body = PAGES[pages.pop()](docs, sources)
    # The policy keeps the page self-contained: anything fetched from elsewhere is blocked (and
    # reported in the browser's console, where the Chromium test looks).
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{esc(title)}</title>
<style>{CSS}</style>
</head>
<body>
{body}
</body>
</html>
"""


def main(argv=None):
    p = argparse.ArgumentParser(prog="report.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="tpusim.run/1, tpusim.compare/1 or tpusim.fit/1 JSON, or one sweep results directory")
    p.add_argument("--html", required=True, metavar="OUT", help="the page to write")
    a = p.parse_args(argv)
    tpusim_io.install_signal_exit()
    # A sweep directory (tpusim sweep --out DIR) has its own page: scripts/sweep_plots.py.
    if len(a.inputs) == 1 and os.path.isdir(a.inputs[0]):
        return sweep_plots.main([a.inputs[0], "--html", a.html])
    try:
        tpusim_io.check_not_input(a.html, a.inputs)
    except ValueError as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return 2
    try:
        docs = []
        for path in a.inputs:
            docs.extend(read_input(path))
        page = build_page(docs, a.inputs)
    except Fatal as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return 2
    try:
        tpusim_io.write_output(a.html, page)
    except OSError as e:
        sys.stderr.write(f"{PROG}: {a.html}: cannot write ({e.strerror})\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
