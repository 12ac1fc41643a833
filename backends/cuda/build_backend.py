"""The build backend: setuptools', plus the ``nvidia-cuda-nvcc`` wheel as a
build requirement when the machine has no nvcc of its own, so that building
the plugin from source needs no CUDA toolkit (the wheel brings nvcc, cicc,
ptxas and the headers). Named in pyproject.toml with ``backend-path``."""

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook setuptools defines)

from build_fatbin import system_nvcc

NVCC_WHEEL = "nvidia-cuda-nvcc>=13,<14"


def _nvcc() -> list:
    import os

    return [] if os.environ.get("CANDLE_NVCC") or system_nvcc() else [NVCC_WHEEL]


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _nvcc()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _nvcc()
