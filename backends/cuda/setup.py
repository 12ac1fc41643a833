"""Build hook: compiles the CUDA kernels into fatbins inside the package (see build_fatbin.py)."""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("build_fatbin", HERE / "build_fatbin.py")
build_fatbin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_fatbin)


class BuildFatbins(build_ext):
    """Builds candle_backend_cuda/fatbin/*.fatbin (device code only: no Python extension module)."""

    def run(self):
        root = HERE if self.inplace or getattr(self, "editable_mode", False) else Path(self.build_lib)
        self._out = root / "candle_backend_cuda" / "fatbin"
        build_fatbin.build(self._out)

    def get_outputs(self):
        out = Path(self.build_lib) / "candle_backend_cuda" / "fatbin"
        return [str(out / "manifest.json"), *(str(out / f"{s.stem}.fatbin") for s in build_fatbin.sources())]


class NativeDistribution(Distribution):
    """Marks the wheel as platform-specific: it carries device code built for x86-64 Linux drivers."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_ext": BuildFatbins}, distclass=NativeDistribution)
