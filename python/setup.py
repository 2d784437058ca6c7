"""Packages the tpusim Python code with the _tpusim extension and _paths.py that a CMake build
made (python/CMakeLists.txt): $TPUSIM_BUILD_DIR, else the source tree's build/. The installed
package runs that build's tpusim binary and reads the source tree's configs (docs/python.md)."""
import os
import shutil
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("TPUSIM_BUILD_DIR", HERE.parent / "build")).resolve()


class BuildPyWithExtension(build_py):
    """The Python files, then the built extension and paths beside them."""

    def run(self):
        super().run()
        built = BUILD / "python" / "tpusim"
        files = sorted(built.glob("_tpusim*.so")) + [built / "_paths.py"]
        missing = [str(f) for f in files if not f.exists()] or ([] if files[:-1] else [
            str(built / "_tpusim*.so")])
        if missing:
            raise SystemExit(f"setup.py: {', '.join(missing)} missing: build tpusim first "
                             f"(scripts/build.sh), or set TPUSIM_BUILD_DIR to its build directory")
        dest = Path(self.build_lib) / "tpusim"
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy2(f, dest / f.name)


class BinaryDistribution(Distribution):
    """A platform wheel: it carries a compiled extension."""

    def has_ext_modules(self):
        return True


# setuptools' own build products go into the CMake build directory, not the source tree.
SCRATCH = BUILD / "python" / "setuptools"
SCRATCH.mkdir(parents=True, exist_ok=True)
setup(cmdclass={"build_py": BuildPyWithExtension}, distclass=BinaryDistribution,
      options={"build": {"build_base": str(SCRATCH / "build")},
               "egg_info": {"egg_base": str(SCRATCH)}})
