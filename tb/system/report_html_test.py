#!/usr/bin/python3
"""System test of scripts/report.py, the HTML report: real `tpusim run` reports on three chips
(int8 v1, bf16 v3, Edge) rendered into one page, loaded in headless Chromium (Debian's `chromium`,
installed by scripts/setup.sh) through the DevTools protocol. Checks that the page loads, that
every plot the reports call for is there and decoded, that nothing is fetched from elsewhere and
that the console stays free of errors; and that bad input exits with status 2, one line naming the
file and the key, and no page. And that the page scales (issue 17): a ResNet-50 run's page,
screenshotted in Chromium, has no two texts of a plot overlapping on screen (the boxes each plot
lists of the texts matplotlib's renderer drew, placed over the image as the browser laid it out),
a bar per block rather than per layer, and a layer table of the longest layers and one row for
the rest.

Usage: report_html_test.py --tpusim BUILD/tpusim [--report scripts/report.py] [--screenshots DIR]
       [unittest options]
Exit status 77 (ctest's SKIP_RETURN_CODE) when Chromium is missing and the browser tests skipped."""
import argparse
import base64
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chromium_devtools  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHIPS = ["v1", "v3", "edge"]
IMAGES = 256
ARGS = None

# Evaluated in the page once it has loaded: every plot decoded, with its size, and the first
# table's rows.
CHECK_SCRIPT = """(async () => {
  const plots = [];
  for (const fig of document.querySelectorAll('figure.plot')) {
    const img = fig.querySelector('img');
    let decoded = true;
    try { await img.decode(); } catch (e) { decoded = false; }
    const box = img.getBoundingClientRect();
    plots.push({kind: fig.dataset.plot, chip: fig.dataset.chip || null, decoded: decoded,
                complete: img.complete, naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight,
                shownWidth: box.width, shownHeight: box.height});
  }
  const table = document.querySelector('table');
  const rows = table ? [...table.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)) : [];
  return {title: document.title, plots: plots, rows: rows, readyState: document.readyState};
})()"""


# Each plot's image as the browser laid it out, in page pixels, and the texts its figure drew.
LABELS_SCRIPT = """(async () => {
  const out = [];
  for (const fig of document.querySelectorAll('figure.plot')) {
    const img = fig.querySelector('img');
    try { await img.decode(); } catch (e) {}
    const r = img.getBoundingClientRect();
    out.push({kind: fig.dataset.plot, labels: JSON.parse(fig.dataset.labels || '[]'),
              box: [r.left + scrollX, r.top + scrollY, r.right + scrollX, r.bottom + scrollY]});
  }
  return out;
})()"""


def overlap(a, b, slack=0.5):
    """Boxes [left, top, right, bottom] overlapping by more than `slack` px both ways."""
    return min(a[2], b[2]) - max(a[0], b[0]) > slack and min(a[3], b[3]) - max(a[1], b[1]) > slack


def screen_boxes(plot):
    """A plot's texts placed over its image on the page: (text, [left, top, right, bottom] px)."""
    x0, y0, x1, y1 = plot["box"]
    w, h = x1 - x0, y1 - y0
    return [(t, [x0 + l * w, y0 + u * h, x0 + r * w, y0 + d * h]) for l, u, r, d, t in plot["labels"]]


class PageParser(HTMLParser):
    """The plots (kind, chip, decoded SVG) and the tables (rows of cell text) of a page."""

    def __init__(self):
        super().__init__()
        self.plots, self.tables, self._figure, self._cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "plot" in a.get("class", "").split():
            self._figure = {"kind": a.get("data-plot"), "chip": a.get("data-chip"), "svg": None}
            self.plots.append(self._figure)
        elif tag == "img" and self._figure is not None:
            prefix = "data:image/svg+xml;base64,"
            src = a.get("src", "")
            self._figure["svg"] = base64.b64decode(src[len(prefix):]) if src.startswith(prefix) else None
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        elif tag in ("td", "th"):
            self.tables[-1][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def parse_page(path):
    p = PageParser()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return p


def expected_plots(reports):
    """What the page must show for these run reports (docs/html-report.md): per chip a roofline and
    a cycle-bucket plot; one energy, one comparison, and one memory-traffic plot when any report
    has bytes per memory level."""
    want = {("roofline", r["chip"]["name"]): 1 for r in reports}
    want.update({("cycles", r["chip"]["name"]): 1 for r in reports})
    want[("energy", None)] = 1
    want[("comparison", None)] = 1
    if any("bytes" in r["totals"] for r in reports):
        want[("memory", None)] = 1
    return want


def count_plots(plots):
    got = {}
    for p in plots:
        key = (p["kind"], p["chip"])
        got[key] = got.get(key, 0) + 1
    return got


def run_report(*args):
    return subprocess.run([sys.executable, ARGS.report, *args], capture_output=True, text=True, timeout=300)


TMP = None
REPORT_FILES, REPORTS = [], []
FIT_FILE, FIT_REPORT = None, None
PAGE_FILE = None


def setUpModule():
    """Run reports from the real simulator and their page, made once for all tests."""
    global TMP, PAGE_FILE
    TMP = tempfile.TemporaryDirectory(prefix="tpusim-report-test-")
    for chip in CHIPS:
        out = os.path.join(TMP.name, f"{chip}.json")
        config = os.path.join(ROOT, "configs", "chips", f"{chip}.json")
        r = subprocess.run([ARGS.tpusim, "run", "--chip", config, "--images", str(IMAGES), "--json", out],
                           capture_output=True, text=True, cwd=ROOT, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"tpusim run --chip {chip} failed ({r.returncode}): {r.stdout}{r.stderr}")
        REPORT_FILES.append(out)
        with open(out) as f:
            REPORTS.append(json.load(f))
    # A short training run (tpusim.fit/1) for the Training section.
    global FIT_FILE, FIT_REPORT
    FIT_FILE = os.path.join(TMP.name, "fit.json")
    r = subprocess.run([ARGS.tpusim, "fit", "--chip", os.path.join(ROOT, "configs", "chips", "v3.json"),
                        "--epochs", "2", "--steps-per-epoch", "1", "--batch", "8", "--json", FIT_FILE],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"tpusim fit failed ({r.returncode}): {r.stdout}{r.stderr}")
    with open(FIT_FILE) as f:
        FIT_REPORT = json.load(f)
    PAGE_FILE = os.path.join(TMP.name, "report.html")
    r = run_report(*REPORT_FILES, "--html", PAGE_FILE)
    if r.returncode != 0:
        raise RuntimeError(f"report.py failed ({r.returncode}): {r.stderr}")


RESNET50_REPORTS = {}


def resnet50_report_of(name, command, *args):
    """tpusim `command` of ResNet-50 on v3 with `args`, its report written once into `name`."""
    path = os.path.join(TMP.name, name)
    if path not in RESNET50_REPORTS:
        r = subprocess.run([ARGS.tpusim, command, "--chip", os.path.join(ROOT, "configs", "chips", "v3.json"),
                            "--model", os.path.join(ROOT, "configs", "models", "resnet50.json"),
                            *args, "--json", path],
                           capture_output=True, text=True, cwd=ROOT, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"tpusim {command} resnet50 failed ({r.returncode}): {r.stdout}{r.stderr}")
        with open(path) as f:
            RESNET50_REPORTS[path] = json.load(f)
    return path, RESNET50_REPORTS[path]


def resnet50_report():
    """ResNet-50 on v3, timing only (the layers and their cycles are what the page draws)."""
    return resnet50_report_of("resnet50.json", "run", "--images", "8", "--timing-only")


def resnet50_fit_report():
    """One ResNet-50 training step on v3 (momentum, timing only, global batch 4)."""
    return resnet50_report_of("resnet50_fit.json", "fit", "--steps", "1", "--batch", "4",
                              "--optimizer", "momentum", "--timing-only")


def tearDownModule():
    TMP.cleanup()


class ReportFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=TMP.name)
        cls.report_files, cls.reports = REPORT_FILES, REPORTS

    def write_json(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def render(self, name, *inputs):
        out = os.path.join(self.dir, name)
        r = run_report(*inputs, "--html", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out


def chromium_or_skip():
    """Chromium's binary, or the test class skipped (scripts/setup.sh installs it)."""
    binary = chromium_devtools.find_chromium()
    if binary is None:
        raise unittest.SkipTest("chromium is not installed (scripts/setup.sh installs it)")
    return binary


class ReportHtmlInChromium(ReportFixture):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.binary = chromium_or_skip()
        cls.page_file = PAGE_FILE
        browser = chromium_devtools.Chromium(cls.binary)
        try:
            cls.page = browser.load("file://" + cls.page_file, CHECK_SCRIPT)
        finally:
            browser.close()

    def test_page_loads_with_the_workload_in_its_title(self):
        self.assertEqual(self.page.value["readyState"], "complete")
        self.assertIn(self.reports[0]["workload"]["model"], self.page.value["title"])
        for r in self.reports:
            self.assertIn(r["chip"]["name"], self.page.value["title"])

    def test_every_plot_the_reports_call_for_is_present_and_decoded(self):
        plots = self.page.value["plots"]
        self.assertEqual(count_plots(plots), expected_plots(self.reports))
        for p in plots:
            with self.subTest(plot=p["kind"], chip=p["chip"]):
                self.assertTrue(p["decoded"] and p["complete"])
                self.assertGreater(p["naturalWidth"], 0)
                self.assertGreater(p["naturalHeight"], 0)
                self.assertGreater(p["shownWidth"], 0)
                self.assertGreater(p["shownHeight"], 0)

    def test_console_has_no_errors(self):
        self.assertEqual(self.page.console_errors, [])
        self.assertEqual(self.page.failed_loads, [])

    def test_page_fetches_nothing_but_itself(self):
        others = [u for u in self.page.urls if u != "file://" + self.page_file and not u.startswith("data:")]
        self.assertEqual(others, [])

    def test_comparison_table_has_one_row_per_chip_with_its_reported_cycles(self):
        rows = self.page.value["rows"]
        self.assertEqual([row[0] for row in rows], [r["chip"]["name"] for r in self.reports])
        for row, r in zip(rows, self.reports):
            self.assertEqual(row[1], f"{r['totals']['cycles']:,}")


class ReportHtmlScalesToResNet50(ReportFixture):
    """Issue 17: the page of a ResNet-50 run (177 layers, 16 blocks) and a training step of it
    stays readable."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.binary = chromium_or_skip()
        cls.resnet_file, cls.resnet = resnet50_report()
        cls.fit_file, cls.fit = resnet50_fit_report()
        out = os.path.join(cls.dir, "resnet50.html")
        r = run_report(cls.resnet_file, cls.fit_file, "--html", out)
        if r.returncode != 0:
            raise RuntimeError(f"report.py failed on ResNet-50 ({r.returncode}): {r.stderr}")
        cls.page_file = out
        shots = ARGS.screenshots or cls.dir
        os.makedirs(shots, exist_ok=True)
        cls.screenshot = os.path.join(shots, "resnet50_report.png")
        browser = chromium_devtools.Chromium(cls.binary)
        try:
            cls.page = browser.load("file://" + out, LABELS_SCRIPT, screenshot=cls.screenshot)
        finally:
            browser.close()

    def test_screenshot_of_the_whole_page_is_taken(self):
        with open(self.screenshot, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n")
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        self.assertGreaterEqual(width, 1200)  # 1280 less a scroll bar
        bottom = max(p["box"][3] for p in self.page.value)
        self.assertGreaterEqual(height, bottom, "the screenshot covers every plot")

    def test_no_two_texts_of_a_plot_overlap_on_the_page(self):
        plots = self.page.value
        self.assertEqual({p["kind"] for p in plots},
                         {"roofline", "cycles", "energy", "comparison", "memory", "step-split", "step-cycles"})
        for p in plots:
            texts = screen_boxes(p)
            with self.subTest(plot=p["kind"]):
                self.assertGreater(len(texts), 5, "the plot lists the texts it drew")
                for i, (a, box_a) in enumerate(texts):
                    for b, box_b in texts[i + 1:]:
                        self.assertFalse(overlap(box_a, box_b), f"{a!r} overlaps {b!r} in the {p['kind']} plot")
                    self.assertTrue(p["box"][0] - 1 <= box_a[0] and box_a[2] <= p["box"][2] + 1
                                    and p["box"][1] - 1 <= box_a[1] and box_a[3] <= p["box"][3] + 1,
                                    f"{a!r} lies outside the {p['kind']} plot's image")
        # Plots do not overlap each other either.
        for i, a in enumerate(plots):
            for b in plots[i + 1:]:
                self.assertFalse(overlap(a["box"], b["box"]), f"the {a['kind']} and {b['kind']} plots overlap")

    def test_roofline_names_some_layers_and_the_cycle_plot_draws_blocks(self):
        by_kind = {p["kind"]: [t for t, _ in screen_boxes(p)] for p in self.page.value}
        names = {l["name"] for l in self.resnet["layers"]}
        named = [t for t in by_kind["roofline"] if t in names]
        self.assertTrue(0 < len(named) <= 12, named)
        bars = [t for t in by_kind["cycles"] if re.match(r"conv\d_block\d+ \(\d+ layers\)$", t)]
        self.assertGreaterEqual(len(bars), 8, by_kind["cycles"])
        self.assertFalse(any(re.match(r"conv\d_block\d+_\d_conv$", t) for t in by_kind["cycles"]),
                         "the cycle plot draws blocks, not their layers")
        # The training step's plot too: blocks, the step's own rows, at most 16 bars.
        step = by_kind["step-cycles"]
        self.assertGreaterEqual(len([t for t in step if re.match(r"conv\d_block\d+$", t)]), 8, step)
        self.assertIn("update", step)
        self.assertFalse(any(re.match(r"conv\d_block\d+_\d_conv$", t) for t in step), step)

    def layer_tables(self):
        page = parse_page(self.page_file)
        layer_head = ["layer", "type", "span (cycles)", "retired (cycles)"]
        layers = [t for t in page.tables if [h.replace("\u00a0", " ") for h in t[0][:4]] == layer_head]
        blocks = [t for t in page.tables if t[0][0] == "block"]
        return layers, blocks

    def check_layer_table(self, rows, layers, cycles):
        """The 20 longest layers by span, each with its span, and a row for the rest; the retired
        cycles of all rows add up to `cycles`."""
        self.assertEqual(len(rows), 21)
        self.assertEqual(rows[-1][0], f"the other {len(layers) - 20} layers")
        by_name = {l["name"]: l for l in layers}
        longest = sorted(l["span_cycles"] for l in layers)[-20]
        for row in rows[:-1]:
            l = by_name[row[0]]
            self.assertEqual(row[2], f"{round(l['span_cycles']):,}")
            self.assertGreaterEqual(l["span_cycles"], longest)
        retired = sum(int(row[3].replace(",", "")) for row in rows)
        self.assertAlmostEqual(retired, cycles, delta=len(rows))

    def test_layer_tables_show_the_longest_layers_with_their_spans_and_one_row_for_the_rest(self):
        layers, blocks = self.layer_tables()
        self.assertEqual(len(layers), 2, "the run's layers and the training step's")
        self.check_layer_table(layers[0][1:], self.resnet["layers"], self.resnet["totals"]["cycles"])
        last = self.fit["step"]["last"]
        self.check_layer_table(layers[1][1:], last["layers"], last["cycles"])
        # ResNet-50's 16 bottleneck blocks, forward and backward together in the step's.
        self.assertEqual([len(b) - 1 for b in blocks], [16, 16])

    def test_captions_stay_short(self):
        with open(self.page_file) as f:
            captions = re.findall(r"<figcaption>(.*?)</figcaption>", f.read(), re.S)
        for c in captions:
            self.assertLess(len(c), 700, c[:200])


class ReportHtmlContent(ReportFixture):
    def test_every_plot_is_an_svg_that_draws_something(self):
        page = parse_page(PAGE_FILE)
        self.assertEqual(count_plots(page.plots), expected_plots(self.reports))
        for p in page.plots:
            with self.subTest(plot=p["kind"], chip=p["chip"]):
                self.assertIsNotNone(p["svg"])
                root = ET.fromstring(p["svg"])
                self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
                drawn = [e for e in root.iter() if e.tag.rsplit("}", 1)[-1] in ("path", "use")]
                self.assertGreater(len(drawn), 20)

    def test_comparison_input_gives_the_same_page_as_its_run_reports(self):
        compare = {"schema": "tpusim.compare/1", "workload": self.reports[0]["workload"],
                   "runs": self.reports}
        from_compare = self.render("from_compare.html", self.write_json("compare.json", compare))
        from_runs = PAGE_FILE
        strip = lambda text: re.sub(r"<dt>reports</dt><dd>.*?</dd>", "", text)  # noqa: E731
        with open(from_compare) as a, open(from_runs) as b:
            self.assertEqual(strip(a.read()), strip(b.read()))

    def test_comparison_names_its_failed_chips(self):
        failed = {"chip_file": "configs/chips/broken.json", "error": "exit status 2: bad config"}
        compare = {"schema": "tpusim.compare/1", "workload": self.reports[0]["workload"],
                   "runs": self.reports[:1], "failed": [failed]}
        with open(self.render("failed.html", self.write_json("failed.json", compare))) as f:
            text = f.read()
        self.assertIn(f"{failed['chip_file']}: {failed['error']}", text)

    def test_report_without_bytes_per_level_renders_and_names_what_is_missing(self):
        old = copy.deepcopy(self.reports[0])
        for section in [old["totals"]] + old["layers"]:
            section.pop("bytes", None)
            section.pop("macs_per_off_chip_byte", None)
        out = self.render("no_bytes.html", self.write_json("no_bytes.json", old), self.report_files[1])
        page = parse_page(out)
        self.assertEqual(count_plots(page.plots), expected_plots([old, self.reports[1]]))
        with open(out) as f:
            text = f.read()
        self.assertRegex(text, r'class="note">[^<]*totals\.bytes[^<]*' + re.escape(old["chip"]["name"]) + "|"
                         + re.escape(old["chip"]["name"]) + r"[^<]*totals\.bytes")


    def test_steady_state_table_shows_each_chips_serving_rate_beside_its_totals(self):
        with open(PAGE_FILE) as f:
            text = f.read()
        self.assertIn("<h2>Steady state</h2>", text)
        table = text.split("<h2>Steady state</h2>", 1)[1].split("</table>", 1)[0]
        for r in self.reports:
            st = r["steady_state"]
            with self.subTest(chip=r["chip"]["name"]):
                self.assertIn(f'<td class="name">{r["chip"]["name"]}</td>'
                              f'<td class="num">{round(st["cycles_per_batch"]):,}</td>', table)

    def test_report_without_steady_state_renders_without_its_section(self):
        old = copy.deepcopy(self.reports[0])
        old.pop("steady_state")
        old.pop("load", None)
        with open(self.render("no_steady.html", self.write_json("no_steady.json", old))) as f:
            self.assertNotIn("Steady state", f.read())

    def test_a_fit_report_joins_the_page_as_a_training_section(self):
        out = self.render("with_fit.html", *self.report_files, FIT_FILE)
        page = parse_page(out)
        want = expected_plots(self.reports)
        want[("training", FIT_REPORT["chip"])] = 1
        want[("step-split", FIT_REPORT["chip"])] = 1
        want[("step-cycles", FIT_REPORT["chip"])] = 1  # its step.last.layers
        self.assertEqual(count_plots(page.plots), want)
        with open(out) as f:
            text = f.read()
        self.assertIn(f"<h2>Training: {FIT_REPORT['model']} on {FIT_REPORT['chip']}</h2>", text)
        # One row per epoch, the validated one with its val_accuracy.
        last = FIT_REPORT["epochs"][-1]
        self.assertIn(f"{100 * last['val_accuracy']:.2f}", text)
        # Two steps: the second is the steady state.
        self.assertIn("Steady state over the step after the first: ", text)

    def test_a_fit_report_alone_makes_a_training_page(self):
        page = parse_page(self.render("fit_only.html", FIT_FILE))
        self.assertEqual(count_plots(page.plots), {("training", FIT_REPORT["chip"]): 1,
                                                   ("step-split", FIT_REPORT["chip"]): 1,
                                                   ("step-cycles", FIT_REPORT["chip"]): 1})

    def test_a_system_fit_report_names_the_system_and_its_chips(self):
        # fit --system, as scripts/demo.sh runs it on the v2-8 (one short step here).
        fit = os.path.join(self.dir, "fit_system.json")
        r = subprocess.run([ARGS.tpusim, "fit", "--system", os.path.join(ROOT, "configs", "systems", "v2-8.json"),
                            "--steps", "1", "--batch", "8", "--json", fit],
                           capture_output=True, text=True, cwd=ROOT, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(fit) as f:
            report = json.load(f)
        on = f"{report['system']['name']} ({report['system']['chips']} × {report['chip']})"
        out = self.render("fit_system.html", fit)
        self.assertEqual(count_plots(parse_page(out).plots),
                         {("training", on): 1, ("step-split", on): 1, ("step-cycles", on): 1})
        with open(out) as f:
            self.assertIn(f"<h2>Training: {report['model']} on {on}</h2>", f.read())


class ReportBadInput(ReportFixture):
    def assert_rejected(self, inputs, *needles):
        out_dir = tempfile.mkdtemp(dir=self.dir)
        out = os.path.join(out_dir, "page.html")
        r = run_report(*inputs, "--html", out)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for n in needles:
            self.assertIn(n, lines[0])
        self.assertEqual(os.listdir(out_dir), [], "no page and no temporary file")

    def test_missing_file_is_rejected_naming_the_file(self):
        missing = os.path.join(self.dir, "nonexistent.json")
        self.assert_rejected([missing], missing)

    def test_file_that_is_not_json_is_rejected_naming_the_file(self):
        path = os.path.join(self.dir, "not.json")
        with open(path, "w") as f:
            f.write("tpusim summary, not JSON\n")
        self.assert_rejected([path], path, "not JSON")

    def test_unknown_schema_is_rejected_naming_the_schema_key(self):
        data = dict(self.reports[0], schema="tpusim.run/99")
        path = self.write_json("schema.json", data)
        self.assert_rejected([path], path, "schema", "tpusim.run/99")

    def test_run_report_missing_a_required_key_is_rejected_naming_the_key(self):
        data = copy.deepcopy(self.reports[0])
        del data["totals"]["cycles"]
        path = self.write_json("no_cycles.json", data)
        self.assert_rejected([self.report_files[1], path], path, "totals.cycles")

    def test_comparison_whose_run_lacks_a_key_is_rejected_naming_run_and_key(self):
        runs = copy.deepcopy(self.reports)
        del runs[1]["chip"]["peak_ops_per_s"]
        path = self.write_json("bad_compare.json", {"schema": "tpusim.compare/1",
                                                    "workload": runs[0]["workload"], "runs": runs})
        self.assert_rejected([path], path, "runs[1].chip.peak_ops_per_s")

    def test_mistyped_key_is_rejected_naming_the_key(self):
        data = copy.deepcopy(self.reports[0])
        data["layers"][1]["ops"] = "many"
        path = self.write_json("typed.json", data)
        self.assert_rejected([path], path, "layers[1].ops")

    def test_fit_report_missing_a_key_is_rejected_naming_the_key(self):
        data = copy.deepcopy(FIT_REPORT)
        del data["epochs"][0]["loss"]
        path = self.write_json("bad_fit.json", data)
        self.assert_rejected([path], path, "epochs[0].loss", "missing")

    def test_bad_input_leaves_an_existing_page_untouched(self):
        out = os.path.join(self.dir, "kept.html")
        with open(out, "w") as f:
            f.write("previous page")
        r = run_report(os.path.join(self.dir, "nonexistent.json"), "--html", out)
        self.assertEqual(r.returncode, 2)
        with open(out) as f:
            self.assertEqual(f.read(), "previous page")


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tpusim", required=True, help="the tpusim binary")
    p.add_argument("--report", default=os.path.join(ROOT, "scripts", "report.py"))
    p.add_argument("--screenshots", metavar="DIR",
                   help="keep the ResNet-50 page's screenshot here (default: a temporary directory)")
    ARGS, rest = p.parse_known_args()
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    result = prog.result
    if not result.wasSuccessful():
        return 1
    return 77 if result.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
