#!/usr/bin/env python3
"""Runs tb/python's pytest tests on the package a build made (build/python, python/CMakeLists.txt).

Exit 77 (ctest: skipped) with the reason when there is no extension to test: a sanitized build
(an ASan extension cannot load into the unsanitized python3), or pybind11 or pytest missing
(scripts/setup.sh installs them).
"""
import argparse
import os
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--package-dir", required=True, help="the directory holding tpusim/")
    ap.add_argument("--built", default="", help="python/CMakeLists.txt's TPUSIM_PYTHON_BUILT")
    ap.add_argument("--sanitize", default="", help="the build's TPUSIM_SANITIZE")
    a = ap.parse_args()
    if a.sanitize:
        print(f"run_pytest: skipped: a sanitized build ({a.sanitize}) builds no Python extension "
              "(its runtime cannot load into the unsanitized python3)")
        return 77
    if a.built not in ("ON", "TRUE", "1"):
        print("run_pytest: skipped: the Python extension was not built (pybind11-dev or "
              "python3-dev missing: scripts/setup.sh installs them)")
        return 77
    try:
        import pytest
    except ImportError:
        print("run_pytest: skipped: pytest missing (apt install python3-pytest)")
        return 77
    # The tests' own processes (the runners' tpusim) inherit the path too.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [a.package_dir] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    sys.path.insert(0, a.package_dir)
    here = Path(__file__).resolve().parent
    # No cache: nothing is written into the source tree.
    return pytest.main([str(here), "-q", "-p", "no:cacheprovider", "-rs"])


if __name__ == "__main__":
    sys.exit(int(main()))
