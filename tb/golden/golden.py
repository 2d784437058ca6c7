#!/usr/bin/python3
"""Golden regressions: every shipped chip config x the workloads in tb/golden/workloads.json.

  golden.py list                         the cases, one per line (<chip>.<workload>)
  golden.py check --tpusim BIN CASE      run CASE, compare its report with its golden; exit 1 and
                                         print the fields that moved if they differ
  golden.py bless --tpusim BIN [-j N] [--diff] [CASE...]
                                         run the cases (all by default), rewrite their goldens and
                                         print what changed, for the commit message
  golden.py timing-only --tpusim BIN CASE
                                         run CASE with and without --timing-only; exit 1 and print
                                         the fields that differ unless the two reports are equal,
                                         every number exactly, less the full run's `accuracy` and
                                         the timing-only run's `"outputs_computed": false`

A golden is `tpusim run --json`'s report without its `host` section (host timings), preceded by
`golden_case` (the chip file and the run's arguments). Numbers that are whole in both files
(cycles, counts, bytes) must be equal; other numbers (energies, rates, ratios) may differ by
1e-9 relative. docs/robustness.md describes the stage."""
import argparse
import concurrent.futures
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_DIR = os.path.join(ROOT, "tb", "golden", "reports")
WORKLOADS = os.path.join(ROOT, "tb", "golden", "workloads.json")
RELATIVE_TOLERANCE = 1e-9
SHOWN_FIELDS = 40


class GoldenError(Exception):
    pass


def cases(with_rtl=True):
    """{case name: (chip file relative to ROOT, workload name, run arguments)}, sorted. Without
    RTL, chips whose MXU is the Verilated array (mxu.impl "rtl") are left out: a build without
    Verilator cannot run them."""
    with open(WORKLOADS) as f:
        workloads = json.load(f)["workloads"]
    out = {}
    for chip in sorted(glob.glob(os.path.join(ROOT, "configs", "chips", "*.json"))):
        if not with_rtl:
            with open(chip) as f:
                if json.load(f).get("mxu", {}).get("impl") == "rtl":
                    continue
        chip_name = os.path.splitext(os.path.basename(chip))[0]
        for name, args in workloads.items():
            out[f"{chip_name}.{name}"] = (os.path.relpath(chip, ROOT), name, args)
    return out


def golden_path(case):
    return os.path.join(GOLDEN_DIR, case + ".json")


def run_case(tpusim, case, spec, extra=()):
    chip, _, args = spec
    with tempfile.TemporaryDirectory(prefix="tpusim-golden-") as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [tpusim, "run", "--chip", chip] + args + list(extra) + ["--json", report]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            err = done.stderr.strip().splitlines()
            raise GoldenError(f"{case}: `{' '.join(cmd)}` failed (exit {done.returncode}): "
                              f"{err[-1] if err else 'no message'}")
        with open(report) as f:
            r = json.load(f)
    r.pop("host", None)
    return {"golden_case": {"chip": chip, "args": args}, **r}


def element_name(item, index):
    if isinstance(item, dict):
        if isinstance(item.get("name"), str):
            return item["name"]
        if "core" in item and "mxu" in item:
            return f"core{item['core']}.mxu{item['mxu']}"
    return str(index)


def numbers_match(a, b):
    if float(a).is_integer() and float(b).is_integer():
        return a == b
    return math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0)


def differences(golden, now, path="", exact=False):
    """Every leaf that moved: (path, golden value or None, value now or None). `exact`: numbers
    equal as parsed, without the tolerance (the timing-only comparison)."""
    is_number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if is_number(golden) and is_number(now):
        same = (golden == now and type(golden) is type(now)) if exact else numbers_match(golden, now)
        return [] if same else [(path, golden, now)]
    if isinstance(golden, dict) and isinstance(now, dict):
        out = []
        for k in golden:
            sub = f"{path}.{k}" if path else k
            out += (differences(golden[k], now[k], sub, exact) if k in now
                    else [(sub, golden[k], None)])
        out += [(f"{path}.{k}" if path else k, None, now[k]) for k in now if k not in golden]
        return out
    if isinstance(golden, list) and isinstance(now, list):
        out = []
        for i in range(max(len(golden), len(now))):
            g = golden[i] if i < len(golden) else None
            n = now[i] if i < len(now) else None
            sub = f"{path}[{element_name(g if g is not None else n, i)}]"
            if g is None or n is None:
                out.append((sub, g, n))
            else:
                out += differences(g, n, sub, exact)
        return out
    return [] if golden == now else [(path, golden, now)]


def show(v):
    if v is None:
        return "(absent)"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        text = json.dumps(v)
        return text if len(text) <= 40 else text[:37] + "..."
    if float(v).is_integer() and abs(v) < 1e18:
        return f"{int(v):,}"
    return f"{v:.10g}"


def change(g, n):
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (g, n)):
        return ""
    delta = n - g
    text = f"{int(delta):+,}" if float(delta).is_integer() and abs(delta) < 1e18 else f"{delta:+.4g}"
    return text + (f" ({100 * delta / g:+.4g}%)" if g else "")


def format_differences(diffs, limit=SHOWN_FIELDS, heads=("field", "golden", "now", "change")):
    rows = [(p, show(g), show(n), change(g, n)) for p, g, n in diffs[:limit]]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    line = lambda r: "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    out = [line(heads)] + [line(r) for r in rows]
    if len(diffs) > limit:
        out.append(f"  ... and {len(diffs) - limit} more fields")
    return "\n".join(out)


def load_golden(case):
    path = golden_path(case)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def check(args):
    all_cases = cases()
    if args.case not in all_cases:
        raise GoldenError(f"no case {args.case!r} (cases: {', '.join(all_cases)})")
    golden = load_golden(args.case)
    if golden is None:
        raise GoldenError(f"{args.case}: no golden {os.path.relpath(golden_path(args.case), ROOT)}"
                          " (a new chip config or workload? run scripts/bless-goldens.sh)")
    now = run_case(args.tpusim, args.case, all_cases[args.case])
    diffs = differences(golden, now)
    if not diffs:
        print(f"{args.case}: report equals its golden "
              f"({now['totals']['cycles']:,} cycles)")
        return 0
    print(f"{args.case}: {len(diffs)} field(s) moved from "
          f"{os.path.relpath(golden_path(args.case), ROOT)} (whole numbers must be equal, others "
          f"within {RELATIVE_TOLERANCE:g} relative):")
    print(format_differences(diffs))
    print("If the change is intended, run scripts/bless-goldens.sh and commit the goldens.")
    return 1


def timing_only(args):
    """The timing-only mode's promise (docs/timing-model.md, "Timing-only mode"): the same
    report as a full run's, bit for bit, less what only a computation gives."""
    all_cases = cases()
    if args.case not in all_cases:
        raise GoldenError(f"no case {args.case!r} (cases: {', '.join(all_cases)})")
    full = run_case(args.tpusim, args.case, all_cases[args.case])
    timing = run_case(args.tpusim, args.case, all_cases[args.case], ["--timing-only"])
    problems = []
    if "accuracy" not in full:
        problems.append("the full run has no accuracy block (was it checked?)")
    if "accuracy" in timing:
        problems.append("the timing-only run has an accuracy block")
    if timing.get("outputs_computed", True) is not False:
        problems.append('the timing-only run does not say "outputs_computed": false')
    full.pop("accuracy", None)
    timing.pop("outputs_computed", None)
    diffs = differences(full, timing, exact=True)
    if not diffs and not problems:
        print(f"{args.case}: the timing-only report equals the full run's "
              f"({timing['totals']['cycles']:,} cycles)")
        return 0
    for p in problems:
        print(f"{args.case}: {p}")
    if diffs:
        print(f"{args.case}: {len(diffs)} field(s) differ between the full run and the "
              "timing-only run (every value must be equal):")
        print(format_differences(diffs, heads=("field", "full run", "timing only", "change")))
    return 1


def write_atomically(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


HEADLINE = ["totals.cycles", "totals.energy_j", "totals.utilization", "accuracy.top1"]


def headline(diffs):
    """The moved fields a commit message should quote first: the run's cycles, energy,
    utilization and accuracy, then the rest in report order."""
    rank = lambda d: HEADLINE.index(d[0]) if d[0] in HEADLINE else len(HEADLINE)
    return sorted(diffs, key=rank)[:3]


def bless(args):
    all_cases = cases()
    unknown = [c for c in args.cases if c not in all_cases]
    if unknown:
        raise GoldenError(f"no case {unknown[0]!r} (cases: {', '.join(all_cases)})")
    chosen = args.cases or list(all_cases)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {c: pool.submit(run_case, args.tpusim, c, all_cases[c]) for c in chosen}
        failed = []
        reports = {}
        for c, f in futures.items():
            try:
                reports[c] = f.result()
            except GoldenError as e:
                failed.append(str(e))
    if failed:
        # Nothing is rewritten unless every chosen case ran.
        raise GoldenError(f"{len(failed)} case(s) failed, no golden rewritten; first: {failed[0]}")
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    changed, new, same = [], [], 0
    for c in chosen:
        old = load_golden(c)
        if old is None:
            new.append(c)
        else:
            diffs = differences(old, reports[c])
            if diffs:
                changed.append((c, diffs))
            else:
                same += 1
        write_atomically(golden_path(c), json.dumps(reports[c], indent=1) + "\n")
    removed = []
    if not args.cases:
        for path in sorted(glob.glob(os.path.join(GOLDEN_DIR, "*.json"))):
            c = os.path.splitext(os.path.basename(path))[0]
            if c not in all_cases:
                os.unlink(path)
                removed.append(c)
    print(f"Goldens: {len(chosen)} case(s) run, {len(changed)} changed, {same} unchanged, "
          f"{len(new)} new, {len(removed)} removed")
    for c, diffs in changed:
        moved = "; ".join(f"{p} {show(g)} -> {show(n)}" for p, g, n in headline(diffs))
        print(f"- {c}: {len(diffs)} field(s) moved; {moved}")
        if args.diff:
            print(format_differences(diffs))
    for c in new:
        print(f"- {c}: new ({reports[c]['totals']['cycles']:,} cycles)")
    for c in removed:
        print(f"- {c}: removed (no such chip config or workload)")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--without-rtl", action="store_true",
                    help="leave out chips with the RTL MXU (a build without Verilator)")
    c = sub.add_parser("check")
    c.add_argument("--tpusim", required=True)
    c.add_argument("case")
    b = sub.add_parser("bless")
    b.add_argument("--tpusim", required=True)
    b.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    b.add_argument("--diff", action="store_true", help="print every moved field")
    b.add_argument("cases", nargs="*")
    t = sub.add_parser("timing-only")
    t.add_argument("--tpusim", required=True)
    t.add_argument("case")
    args = p.parse_args()
    try:
        if args.command == "list":
            print("\n".join(cases(with_rtl=not args.without_rtl)))
            return 0
        if not os.access(args.tpusim, os.X_OK):
            raise GoldenError(f"--tpusim {args.tpusim}: not an executable file")
        args.tpusim = os.path.abspath(args.tpusim)
        if args.command == "timing-only":
            return timing_only(args)
        return check(args) if args.command == "check" else bless(args)
    except GoldenError as e:
        print(f"golden.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
