"""The tpusim Python package (docs/python.md): each function returns what the CLI's JSON says,
bad inputs raise tpusim.Error with the CLI's one-line message, crashes tpusim.Bug.

Run by run_pytest.py with the build's package on the path (ctest Python.*)."""
import importlib.util
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

import tpusim

DATA = Path(tpusim.data_dir())
V1 = str(DATA / "configs" / "chips" / "v1.json")
V3 = str(DATA / "configs" / "chips" / "v3.json")
MLP = str(DATA / "configs" / "models" / "mlp.json")
CNN = str(DATA / "configs" / "models" / "fashion_mnist_cnn.json")


def cli_json(*args, status=0):
    """The tpusim binary's JSON on standard output (`--json -`)."""
    p = subprocess.run([tpusim.binary(), *args, "--json", "-"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, check=False)
    assert p.returncode == status, p.stderr
    return json.loads(p.stdout)


def without_host(report):
    """A report without its wall-clock figures, the only part two runs do not share."""
    return {k: v for k, v in report.items() if k != "host"}


# --- in-process: configs, models, graph, program -------------------------------------------


def test_chip_name_resolves_to_the_shipped_config():
    assert tpusim.chip_path("v3") == V3
    assert tpusim.chip_path("./my.json") == "./my.json"


def test_load_chip_equals_info_json():
    assert tpusim.load_chip("v3") == cli_json("info", "--chip", V3)


def test_load_system_equals_info_json():
    path = str(DATA / "configs" / "systems" / "v2-512.json")
    assert tpusim.load_system("v2-512") == cli_json("info", "--system", path)


def test_describe_is_infos_text():
    p = subprocess.run([tpusim.binary(), "info", "--chip", V1], stdout=subprocess.PIPE,
                       text=True, check=True)
    assert tpusim.describe(chip="v1") == p.stdout


def test_bad_chip_raises_error_naming_the_file(tmp_path):
    cfg = json.loads(Path(V1).read_text())
    cfg["mxu"]["rows"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(cfg))
    with pytest.raises(tpusim.Error) as e:
        tpusim.load_chip(str(bad))
    assert isinstance(e.value, ValueError)
    assert str(bad) in str(e.value) and "/mxu/rows" in str(e.value)
    # The CLI's one line, without its "tpusim: " prefix.
    p = subprocess.run([tpusim.binary(), "info", "--chip", str(bad)], stderr=subprocess.PIPE,
                       text=True, check=False)
    assert p.returncode == 2
    assert p.stderr.strip() == "tpusim: " + str(e.value)


def test_missing_model_raises_error():
    with pytest.raises(tpusim.Error, match="no_such_model.json"):
        tpusim.load_model("/nonexistent/no_such_model.json")


def test_load_model_is_the_imported_graph():
    m = tpusim.load_model("mlp", random_weights=True)
    g = cli_json("graph", "--model", MLP, "--random-weights", "--pass", "import")
    assert m["name"] == g["model"]["name"]
    assert m["macs_per_image"] == g["model"]["macs_per_image"]
    assert m["operations"] == g["passes"][0]["operations"]


def test_graph_equals_graph_json():
    # The default model is the CLI's, named by its absolute path.
    assert tpusim.graph(chip="v1") == cli_json("graph", "--chip", V1, "--model", CNN)


def test_graph_unknown_pass_is_an_error():
    with pytest.raises(tpusim.Error):
        tpusim.graph(pass_name="no-such-pass")


def test_compile_matches_the_runs_program():
    prog = tpusim.compile(chip="v3", images=256, batch=256)
    chip = tpusim.load_chip("v3")
    assert prog["schema"] == "tpusim.program/1"
    assert len(prog["cores"]) == chip["tensor_cores"]
    assert sum(c["instructions"] for c in prog["cores"]) == prog["instructions"]
    for core in prog["cores"]:
        assert len([l for l in core["assembly"].splitlines() if l.strip()]) >= core["instructions"]
    run = tpusim.run(chip="v3", images=256, timing_only=True)
    for key in ("micro_batch_per_core", "instructions", "weights_in_unified_buffer",
                "unified_buffer_bytes_used"):
        assert prog[key] == run["workload"][key], key


def test_compile_assembly_round_trips_through_asm(tmp_path):
    prog = tpusim.compile(model="mlp", chip="v1", random_weights=True, batch=32)
    text = tmp_path / "core0.s"
    text.write_text(prog["cores"][0]["assembly"])
    binary = tmp_path / "core0.bin"
    subprocess.run([tpusim.binary(), "asm", str(text), "-o", str(binary)], check=True)
    out = subprocess.run([tpusim.binary(), "disasm", str(binary)], stdout=subprocess.PIPE,
                         text=True, check=True)
    assert out.stdout == prog["cores"][0]["assembly"]


# --- child processes: run, fit, compare, sweep ------------------------------------------------


def test_run_equals_the_clis_json():
    r = tpusim.run(chip="v3", images=256)
    assert r["totals"]["cycles"] > 0
    assert without_host(r) == without_host(cli_json("run", "--chip", V3, "--images", "256"))


def test_run_bad_input_raises_error_with_the_runs_message():
    with pytest.raises(tpusim.Error, match="--batch 3 does not split evenly|batch"):
        tpusim.run(system="v2-512", images=512, batch=3, timing_only=True)


def test_run_status_3_raises_bug(tmp_path, monkeypatch):
    fake = tmp_path / "tpusim"
    fake.write_text("#!/bin/sh\necho 'tpusim: internal error: boom' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("TPUSIM_BINARY", str(fake))
    with pytest.raises(tpusim.Bug, match="^internal error: boom$"):
        tpusim.run(chip="v3", images=1)


def test_fit_equals_the_clis_json():
    args = dict(steps=1, batch=16, timing_only=True)
    r = tpusim.fit(chip="v3", **args)
    cli = cli_json("fit", "--chip", V3, "--steps", "1", "--batch", "16", "--timing-only")
    assert without_host(r) == without_host(cli)


def test_compare_equals_the_clis_json():
    r = tpusim.compare(chips=["v1", "v3"], model="mlp", random_weights=True, images=32,
                       batch=32, timing_only=True, jobs=1)
    cli = cli_json("compare", "--chip", V1, "--chip", V3, "--model", MLP, "--random-weights",
                   "--images", "32", "--batch", "32", "--timing-only", "-j", "1")

    def strip(c):
        c = json.loads(json.dumps(c))
        for run in c.get("runs", []):
            if isinstance(run, dict):
                run.pop("host", None)
                if isinstance(run.get("report"), dict):
                    run["report"].pop("host", None)
        return c

    assert strip(r) == strip(cli)


def test_sweep_equals_the_clis_table(tmp_path):
    spec = {
        "name": "py_small",
        "base": V1,
        "axes": [{"name": "clock_mhz", "pointer": "/clock_mhz", "values": [700, 940]}],
        "workloads": [{"name": "mlp", "model": MLP, "weights": "random", "images": 32,
                       "batch": 32}],
    }
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    table = tpusim.sweep(str(spec_file), jobs=1)
    out = tmp_path / "cli"
    subprocess.run([tpusim.binary(), "sweep", str(spec_file), "--out", str(out), "-j", "1"],
                   stdout=subprocess.PIPE, check=True)
    assert table == json.loads((out / "results.json").read_text())
    kept = tmp_path / "kept"
    assert tpusim.sweep(str(spec_file), out=kept, jobs=1) == table
    assert (kept / "results.csv").exists()


# --- installing: pip ----------------------------------------------------------------------------


def test_pip_install_packages_the_built_extension(tmp_path):
    """`pip install --no-build-isolation ./python`, offline, into a scratch target: the installed
    package imports from there and runs this build's binary."""
    # Looked up, not imported: setuptools replaces distutils in the process that imports it.
    for needed in ("pip", "setuptools"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} missing (apt install python3-{needed}: scripts/setup.sh)")
    build = Path(tpusim.__file__).resolve().parents[2]
    source = Path(__file__).resolve().parents[2]
    target = tmp_path / "site"
    env = dict(os.environ, TPUSIM_BUILD_DIR=str(build))
    env.pop("PYTHONPATH", None)
    p = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-index", "--target", str(target), str(source / "python")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                       check=False)
    assert p.returncode == 0, p.stdout
    env["PYTHONPATH"] = str(target)
    probe = "import tpusim; print(tpusim.__file__); print(tpusim.load_chip('v3')['name'])"
    out = subprocess.run(["/usr/bin/python3", "-c", probe], stdout=subprocess.PIPE, text=True,
                         env=env, cwd=tmp_path, check=True).stdout.split()
    assert out == [str(target / "tpusim" / "__init__.py"), tpusim.load_chip("v3")["name"]]
    assert not (source / "python" / "build").exists()
    assert not (source / "python" / "tpusim.egg-info").exists()
