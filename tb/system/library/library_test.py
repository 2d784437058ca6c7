#!/usr/bin/python3
"""tpusim as an installed SystemC library (docs/library.md): `cmake --install` of this build into
a scratch prefix, then one of
  virtual_platform  examples/virtual_platform configured against the prefix (find_package(tpusim),
                    CMAKE_PREFIX_PATH), built and run: its chip must compute the product it
                    checks; and the installed tpusim binary finds its shipped model in
                    <prefix>/share/tpusim from another directory, as does the installed Python
                    package (docs/python.md) when the build made one
  cxx20             a consumer configured with CMAKE_CXX_STANDARD 20 is stopped by
                    find_package(tpusim) with the message that names both standards and the fix
Exit status 0 when it holds, 77 (ctest's SKIP_RETURN_CODE) in a sanitizer build: its libraries
need the sanitizer runtimes, which the installed package does not link (the test runs in
scripts/test.sh's stage build)."""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def must(cmd, what, **kw):
    r = run(cmd, **kw)
    if r.returncode != 0:
        sys.exit(f"{what} failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True, help="tpusim's build directory")
    p.add_argument("--example", required=True, help="examples/virtual_platform")
    p.add_argument("--cxx", required=True, help="the C++ compiler tpusim was built with")
    p.add_argument("--sanitize", default="", help="TPUSIM_SANITIZE of the build")
    p.add_argument("--case", required=True, choices=["virtual_platform", "cxx20"])
    a = p.parse_args()
    if a.sanitize:
        print(f"skipped: this build is instrumented (TPUSIM_SANITIZE={a.sanitize}); an installed "
              "package of it would need the sanitizer runtimes in every consumer")
        return 77

    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "prefix")
        start = time.monotonic()
        must(["cmake", "--install", a.build, "--prefix", prefix], "cmake --install")
        configure = ["cmake", "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}",
                     f"-DCMAKE_CXX_COMPILER={a.cxx}", "-DCMAKE_BUILD_TYPE=Release"]

        if a.case == "cxx20":
            src = os.path.join(d, "consumer")
            os.makedirs(src)
            with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
                f.write("cmake_minimum_required(VERSION 3.25)\nproject(consumer LANGUAGES CXX)\n"
                        "find_package(tpusim REQUIRED)\n")
            r = run(configure + ["-DCMAKE_CXX_STANDARD=20", "-S", src, "-B",
                                 os.path.join(d, "consumer-build")])
            out = r.stdout + r.stderr
            if r.returncode == 0:
                sys.exit(f"a C++20 consumer configured without error:\n{out}")
            # CMake wraps long messages: compare with the line breaks and indents removed.
            flat = " ".join(out.split())
            for want in ["SystemC was built for C++17", "compiles for C++20",
                         "Set CMAKE_CXX_STANDARD to 17"]:
                if want not in flat:
                    sys.exit(f"the configure error lacks {want!r}:\n{out}")
            print("C++20 consumer refused at configure time:", flat[flat.find("tpusim: Sys"):][:200])
            return 0

        build = os.path.join(d, "vp")
        must(configure + ["-S", a.example, "-B", build], "configuring the example")
        must(["cmake", "--build", build, "-j", "2"], "building the example")
        r = must([os.path.join(build, "virtual_platform")], "the example")
        print(r.stdout, end="")
        for want in ["before: core 0 status: halts=0 issued=0", "after: core 0 status: halts=1",
                     "result 4x8: matches the C++ product"]:
            if want not in r.stdout:
                sys.exit(f"the example's output lacks {want!r}")

        # The installed binary: its default model from <prefix>/share/tpusim, run elsewhere.
        elsewhere = os.path.join(d, "elsewhere")
        os.makedirs(elsewhere)
        r = must([os.path.join(prefix, "bin", "tpusim"), "graph"], "installed tpusim graph",
                 cwd=elsewhere)
        model = os.path.join(prefix, "share", "tpusim", "configs", "models")
        if model not in r.stdout:
            sys.exit(f"installed tpusim graph does not name its model in {model}:\n{r.stdout}")
        # The installed Python package (docs/python.md), when the build made one: it names the
        # installed binary and data directory, and a run through it uses them.
        package = os.path.join(prefix, "lib", "python3", "dist-packages")
        if os.path.isdir(os.path.join(package, "tpusim")):
            probe = ("import tpusim; r = tpusim.run(chip='v1', model='mlp', random_weights=True, "
                     "images=32, batch=32, timing_only=True); "
                     "print(tpusim.binary()); print(tpusim.data_dir()); print(r['chip']['file'])")
            r = must([sys.executable, "-c", probe], "the installed Python package", cwd=elsewhere,
                     env=dict(os.environ, PYTHONPATH=package))
            want = [os.path.join(prefix, "bin", "tpusim"), os.path.join(prefix, "share", "tpusim"),
                    os.path.join(prefix, "share", "tpusim", "configs", "chips", "v1.json")]
            if r.stdout.split() != want:
                sys.exit(f"the installed Python package names {r.stdout.split()}, not {want}")
        print(f"install, build and run took {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
