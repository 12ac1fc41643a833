"""Fixtures of the cuda plugin's tests. Tests that need a device run on
whatever the driver found: a GPU, or the CPU emulation when
CANDLE_CUDA_DRIVER names libcuda_emu.so (emu/); without either they skip,
naming the reason."""

import os
import subprocess
import sys

import pytest

from candle_api.registry import registry

SPEC = registry().backends()["cuda"][0]


def availability() -> tuple[bool, str]:
    return SPEC.availability()


@pytest.fixture
def dev():
    ok, reason = availability()
    if not ok:
        pytest.skip(f"no cuda device: {reason}")
    import candle_api as c

    return c.get_device("cuda")


@pytest.fixture
def emulated(dev):
    """The device is the CPU emulation (tests of what only it can set up: its memory size, its GPUs)."""
    if "emulation" not in dev.backend.gpu.name:
        pytest.skip("needs the CPU emulation (CANDLE_CUDA_DRIVER=libcuda_emu.so)")
    return dev


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, **{k: str(v) for k, v in env.items()}}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=full)


@pytest.fixture
def run_python():
    """run_python(code, **env): code in a fresh interpreter (the driver and the probe load once per
    process), with env added to the environment."""
    return _run_python
