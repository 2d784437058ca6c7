#!/usr/bin/env python3
"""Puts tpusim run reports (tpusim.run/1 JSON) side by side as a Markdown table.

Usage: scripts/compare.py REPORT.json [REPORT.json ...] [--markdown OUT.md]
       (--suffix S appends S to every report name, for shell globs without it)
The table is written atomically (temporary file, then rename)."""
import argparse
import json
import os
import sys
import tempfile

COLUMNS = [
    ("chip", lambda r: r["chip"]["name"]),
    ("top-1 (%)", lambda r: f'{100 * r["accuracy"]["top1"]:.2f}' if "top1" in r.get("accuracy", {}) else "-"),
    ("bit-exact", lambda r: ("yes" if r["accuracy"]["bit_exact"] else "NO") if "accuracy" in r else "-"),
    ("cycles", lambda r: f'{r["totals"]["cycles"]:,}'),
    ("time (ms)", lambda r: f'{1e3 * r["totals"]["seconds"]:.3f}'),
    ("images/s", lambda r: f'{r["totals"]["images_per_s"]:,.0f}'),
    ("T ops/s", lambda r: f'{r["totals"]["ops_per_s"] / 1e12:.3f}'),
    ("peak T ops/s", lambda r: f'{r["chip"]["peak_ops_per_s"] / 1e12:.2f}'),
    ("utilization (%)", lambda r: f'{100 * r["totals"]["utilization"]:.2f}'),
    ("energy/image (mJ)", lambda r: f'{1e3 * r["totals"]["energy_per_image_j"]:.4f}'),
    ("avg power (W)", lambda r: f'{r["totals"]["avg_power_w"]:.1f}'),
    ("G ops/J", lambda r: f'{r["totals"]["ops_per_j"] / 1e9:.1f}'),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+")
    p.add_argument("--suffix", default="")
    p.add_argument("--markdown", help="write the table here instead of stdout")
    a = p.parse_args()
    rows = []
    for name in a.reports:
        path = name + a.suffix
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"compare.py: {path}: {e}")
        if r.get("schema") != "tpusim.run/1":
            sys.exit(f"compare.py: {path}: schema is {r.get('schema')!r}, expected 'tpusim.run/1'")
        rows.append([str(f(r)) for _, f in COLUMNS])
    workload = r["workload"]
    text = f'Workload: {workload["model"]}, {workload["images"]} images, batch {workload["batch"]}\n\n'
    text += "| " + " | ".join(c for c, _ in COLUMNS) + " |\n"
    text += "|" + "|".join(" --- " for _ in COLUMNS) + "|\n"
    for row in rows:
        text += "| " + " | ".join(row) + " |\n"
    if not a.markdown:
        sys.stdout.write(text)
        return
    d = os.path.dirname(os.path.abspath(a.markdown))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".compare.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, a.markdown)


if __name__ == "__main__":
    main()
