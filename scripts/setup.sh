#!/usr/bin/env bash
# Installs the Debian 12 packages tpusim needs, skipping what is already there. Idempotent.
# Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libsystemc-dev          # SystemC 2.3.4 kernel + TLM-2.0 (built for C++17)
  nlohmann-json3-dev      # JSON configs, models and reports
  libcli11-dev            # the tpusim command line
  libfmt-dev              # message formatting
  zlib1g-dev              # reads the gzip'd Fashion-MNIST IDX files directly
  libonnx-dev libprotobuf-dev  # ONNX import: onnx-ml.proto's classes, on protobuf (docs/onnx.md)
  libonnx-testdata        # the ONNX project's test models and their outputs (tb/system/onnx)
  libgtest-dev libgmock-dev  # unit, system and golden tests
  libbenchmark-dev        # tb/bench
  libdnnl-dev             # oneDNN: the quantized reference's int8 sums, tb/bench's native anchor
  verilator               # RTL co-simulation (tb/rtl)
  dataset-fashion-mnist   # the real data set, /usr/share/datasets/fashion-mnist
  python3 python3-matplotlib  # scripts/report.py
  python3-dev pybind11-dev python3-pybind11  # the tpusim Python package's extension (docs/python.md)
  python3-pytest          # its tests (tb/python)
  python3-pip python3-setuptools  # pip install --no-build-isolation ./python, and its test
  slurm-wlm munge         # the Slurm executor of `tpusim sweep` and its test (tb/system/sweep)
  clang libclang-rt-14-dev  # tb/fuzz: clang++ and libFuzzer (scripts/test.sh's fuzz stage)
  llvm                    # llvm-symbolizer: source lines in sanitizer and fuzzer reports
  chromium                # renders the HTML report in its test (tb/system/report_html_test.py)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
