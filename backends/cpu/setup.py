"""Build hook: compiles the C kernels into the package (see build_native.py)."""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("build_native", HERE / "build_native.py")
build_native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_native)


class BuildNative(build_ext):
    """Builds libcandle_cpu.so, a plain C library (no Python extension module)."""

    def run(self):
        root = HERE if self.inplace or getattr(self, "editable_mode", False) else Path(self.build_lib)
        self._lib = root / "candle_backend_cpu" / build_native.LIB_NAME
        build_native.build(self._lib)

    def get_outputs(self):
        return [str(Path(self.build_lib) / "candle_backend_cpu" / build_native.LIB_NAME)]


class NativeDistribution(Distribution):
    """Marks the wheel as platform-specific: it carries a compiled library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_ext": BuildNative}, distclass=NativeDistribution)
