"""The ONNX project's own node test suite (onnx.backend.test, shipped in the
onnx wheel) against candle-api as an onnx.backend.base.Backend, on cpu.

onnx builds the 1884 node cases in memory. The cases expected to fail are
listed, with the reason, in expected_failures.txt; they run as expected
failures, so one that starts passing fails the run until it is taken off.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")
os.environ.setdefault("ONNX_HOME", tempfile.mkdtemp(prefix="onnx_home_"))  # the runner writes there

import onnx.backend.test  # noqa: E402

import candle_formats.onnx.backend as candle_backend  # noqa: E402

EXPECTED_FAILURES = Path(__file__).with_name("expected_failures.txt")


def expected_failures() -> dict[str, str]:
    """case name -> why it is expected to fail."""
    out, reason = {}, ""
    for line in EXPECTED_FAILURES.read_text().splitlines():
        line = line.strip()
        if line.startswith("## "):
            reason = line[3:]
        elif line and not line.startswith("#"):
            out[line] = reason
    return out


with warnings.catch_warnings():  # building the cases runs numpy code that warns (log of 0...)
    warnings.simplefilter("ignore")
    _suite = onnx.backend.test.BackendTest(candle_backend, __name__)
_suite.exclude(r"_cuda$")  # cpu only: the cuda copies would be skipped anyway
for _name in expected_failures():
    _suite.xfail(rf"^{_name}_cpu$")

# the node cases only (the model cases of the suite need downloads)
OnnxBackendNodeModelTest = _suite.test_cases["OnnxBackendNodeModelTest"]
