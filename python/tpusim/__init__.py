"""tpusim from Python (docs/python.md).

In this process: load and check chip and system configs and models, the graph after each
compiler pass, the compiled program (the C++ the CLI calls, through the _tpusim extension).
In a child process each: run, fit, compare and sweep, which spawn the tpusim binary with
``--json -`` and return its report as Python data. SystemC's kernel cannot be reset and a
simulation owns its process, so a simulation never runs inside Python.

Chips, systems and models may be named ('v3', 'v2-512', 'resnet50'): a name that is not a file
is configs/chips/<name>.json (configs/systems/, configs/models/) in the data directory.
"""

import json
import os
import subprocess
import tempfile
from pathlib import Path

try:
    from . import _tpusim
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "tpusim: the _tpusim extension is missing: build tpusim (scripts/build.sh) and put "
        "build/python on PYTHONPATH, or install the package (docs/python.md)"
    ) from e

__all__ = [
    "Error", "Bug", "binary", "data_dir", "chip_path", "system_path", "model_path",
    "load_chip", "load_system", "describe", "load_model", "graph", "compile",
    "run", "fit", "compare", "sweep",
]

Error = _tpusim.Error
Error.__doc__ = ("A bad input: tpusim's one-line message (the CLI's status 2), naming the file "
                 "and what is allowed. A ValueError.")


class Bug(RuntimeError):
    """tpusim failed on its own (the CLI's status 3, or a crash): a bug to report."""


def _locations():
    # The build's paths (python/CMakeLists.txt writes _paths.py); an install writes its own.
    try:
        from . import _paths
        return _paths.binary, _paths.data_dir
    except ImportError:  # pragma: no cover
        return "tpusim", ""


def binary():
    """The tpusim executable the runners spawn: $TPUSIM_BINARY, else the one built or installed
    with this package."""
    return os.environ.get("TPUSIM_BINARY") or _locations()[0]


def data_dir():
    """The directory holding configs/ (chips, systems, models, weights): $TPUSIM_DATA_DIR, else
    the source tree of a build, or <prefix>/share/tpusim of an install."""
    return os.environ.get("TPUSIM_DATA_DIR") or _locations()[1]


def _named(value, folder, suffix=".json"):
    """A path as given when it names a file (or looks like a path); else the shipped
    configs/<folder>/<value><suffix>, when that exists."""
    if value is None:
        return None
    value = os.fspath(value)
    if os.path.exists(value) or os.sep in value or value.endswith(suffix):
        return value
    shipped = Path(data_dir()) / "configs" / folder / (value + suffix)
    return str(shipped) if shipped.exists() else value


def chip_path(chip):
    """'v3' -> <data dir>/configs/chips/v3.json; a path stays as it is."""
    return _named(chip, "chips")


def system_path(system):
    """'v2-512' -> <data dir>/configs/systems/v2-512.json; a path stays as it is."""
    return _named(system, "systems")


def model_path(model):
    """'resnet50' -> <data dir>/configs/models/resnet50.json; None -> the default model (the
    Fashion-MNIST CNN, as the CLI's); a path stays as it is."""
    if model is None:
        return str(Path(data_dir()) / "configs" / "models" / "fashion_mnist_cnn.json")
    return _named(model, "models")


def load_chip(chip):
    """The resolved chip config as a dict (`tpusim info --chip C --json`); raises Error naming
    the file for a bad one."""
    return json.loads(_tpusim.chip_json(chip_path(chip)))


def load_system(system):
    """The resolved system config as a dict (`tpusim info --system S --json`)."""
    return json.loads(_tpusim.system_json(system_path(system)))


def describe(chip=None, system=None):
    """`tpusim info`'s text for a chip or a system."""
    if (chip is None) == (system is None):
        raise Error("describe needs a chip or a system (one of them)")
    if chip is not None:
        return _tpusim.describe_chip(chip_path(chip))
    return _tpusim.describe_system(system_path(system))


def _workload(model, topology, weights, random_weights, seed, data_dir_):
    return dict(model=model_path(model), topology=os.fspath(topology) if topology else "",
                weights=os.fspath(weights) if weights is not None else None,
                random_weights=bool(random_weights), seed=int(seed),
                data_dir=os.fspath(data_dir_) if data_dir_ else "")


def graph(model=None, chip=None, pass_name=None, topology=None, weights=None,
          random_weights=False, seed=1, data_dir=None):
    """The model's graph after each compiler pass: `tpusim graph --json`'s tpusim.graph/1 report
    (with a chip: quantization, tiling and buffer lifetimes too; pass_name keeps one pass)."""
    return json.loads(_tpusim.graph_json(
        chip=chip_path(chip) or "", pass_name=pass_name or "",
        **_workload(model, topology, weights, random_weights, seed, data_dir)))


def load_model(model=None, topology=None, weights=None, random_weights=False, seed=1,
               data_dir=None):
    """Loads and checks a model (tpusim or Keras JSON, ONNX, SCALE-Sim CSV) and its weights:
    {"name", "file", "weights", "macs_per_image", "operations"} as imported."""
    g = graph(model, None, "import", topology, weights, random_weights, seed, data_dir)
    return dict(g["model"], operations=g["passes"][0]["operations"])


def compile(model=None, chip=None, system=None, images=None, batch=256, topology=None,
            weights=None, random_weights=False, seed=1, data_dir=None):
    """The program the driver would load, without running it: the tpusim.program/1 report, with
    per core its instructions as assembly text ("cores"[i]["assembly"], docs/isa.md). `images`
    defaults to one batch."""
    return json.loads(_tpusim.program_json(
        chip=chip_path(chip) or "", system=system_path(system) or "",
        images=int(images if images is not None else batch), batch=int(batch),
        **_workload(model, topology, weights, random_weights, seed, data_dir)))


def _flags(options):
    """Keyword arguments as the CLI's flags: timing_only=True -> --timing-only, images=256 ->
    --images 256, a list repeats its flag; None and False leave the flag out."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def _message(stderr):
    """The run's one line: its last `tpusim: ` line, without the prefix."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("tpusim: "):
            return line[len("tpusim: "):]
    return lines[-1] if lines else "no message"


def _spawn(args, partial_ok=False):
    """Runs tpusim with `args`; returns (status, stdout). Status 2 raises Error and 3 (or a
    signal) Bug, each with the run's one-line message; 1 is returned when `partial_ok` (compare
    and sweep: some runs failed, their errors are in the report)."""
    p = subprocess.run([binary(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=False)
    if p.returncode == 0 or (partial_ok and p.returncode == 1):
        return p.returncode, p.stdout
    if p.returncode == 2:
        raise Error(_message(p.stderr))
    if p.returncode < 0:
        raise Bug(f"tpusim {args[0]} ended by signal {-p.returncode}: {_message(p.stderr)}")
    raise Bug(_message(p.stderr))


def _chip_or_system(chip, system):
    args = []
    if chip is not None:
        args += ["--chip", chip_path(chip)]
    if system is not None:
        args += ["--system", system_path(system)]
    return args


def _with_model(options):
    if "model" in options:
        options["model"] = model_path(options["model"])
    return options


def run(chip=None, system=None, **options):
    """`tpusim run` in its own process; returns its tpusim.run/1 report (docs/report.md).
    Options are run's flags as keywords: model, topology, weights, random_weights, seed,
    data_dir, images, batch, no_check, timing_only, trace, csv, markdown."""
    _, out = _spawn(["run", *_chip_or_system(chip, system), *_flags(_with_model(options)),
                     "--json", "-"])
    return json.loads(out)


def fit(chip=None, system=None, **options):
    """`tpusim fit` in its own process; returns its tpusim.fit/1 report (docs/training.md).
    Options are fit's flags as keywords (epochs, steps, batch, optimizer, timing_only, ...)."""
    _, out = _spawn(["fit", *_chip_or_system(chip, system), *_flags(_with_model(options)),
                     "--json", "-"])
    return json.loads(out)


def compare(chips=(), systems=(), **options):
    """`tpusim compare` (each chip's run in its own process); returns its tpusim.compare/1
    report. A run that failed is in the report with its error, as the CLI's."""
    args = ["compare"]
    for c in chips:
        args += ["--chip", chip_path(c)]
    for s in systems:
        args += ["--system", system_path(s)]
    _, out = _spawn([*args, *_flags(_with_model(options)), "--json", "-"], partial_ok=True)
    return json.loads(out)


def sweep(spec, out=None, **options):
    """`tpusim sweep SPEC` (every point in its own process); returns its results.json table
    (docs/sweeps.md). `out` keeps the results directory (and resumes a sweep there); without it
    a temporary one is used and removed."""
    spec = _named(spec, "sweeps")
    if out is not None:
        _spawn(["sweep", spec, "--out", os.fspath(out), *_flags(options)], partial_ok=True)
        return json.loads((Path(out) / "results.json").read_text())
    with tempfile.TemporaryDirectory(prefix="tpusim-sweep-") as tmp:
        _spawn(["sweep", spec, "--out", tmp, *_flags(options)], partial_ok=True)
        return json.loads((Path(tmp) / "results.json").read_text())
