"""Build step: compiles csrc/swiglu.c into candle_example_customop/libswiglu.so
when the package is installed (`pip install ./examples/custom_op_plugin`).

The library is plain C loaded with ctypes, not a Python extension module, so
it is built by a small build_ext command instead of an Extension; the wheel
is still marked platform-specific, since it carries a compiled file.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
PACKAGE = "candle_example_customop"
LIB_NAME = "libswiglu.so"  # native.py loads this name from the package folder
# -fno-math-errno lets gcc inline what it can of libm; the warnings stay on, and
# CANDLE_WERROR=1 (what CI sets) turns them into errors.
FLAGS = ["-std=c11", "-O2", "-fPIC", "-shared", "-fno-math-errno", "-Wall", "-Wextra", "-Wshadow",
         "-Wstrict-prototypes"]


def compile_library(out: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise RuntimeError(f"{PACKAGE} needs a C compiler (gcc) at install: none found on PATH")
    flags = FLAGS + (["-Werror"] if os.environ.get("CANDLE_WERROR") == "1" else [])
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [cc, *flags, str(HERE / "csrc" / "swiglu.c"), "-o", str(out), "-lm"]
    print(" ".join(cmd))
    subprocess.run(cmd, check=True)


class BuildNative(build_ext):
    def run(self):
        # An editable install keeps the library next to the sources; a normal
        # one puts it in the build tree, from which the wheel is made.
        inplace = self.inplace or getattr(self, "editable_mode", False)
        compile_library((HERE if inplace else Path(self.build_lib)) / PACKAGE / LIB_NAME)

    def get_outputs(self):
        return [str(Path(self.build_lib) / PACKAGE / LIB_NAME)]


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel, and build_ext runs although there is no Extension


setup(cmdclass={"build_ext": BuildNative}, distclass=NativeDistribution)
