"""Every op of the table, every dtype, every layout, against NumPy; and every
differentiable op's backward pass against finite differences in float64,
with its inputs in every layout."""

import pytest

from candle_api.device import get_device
from candle_api.errors import UnsupportedOpError
from candle_api.testing.opinfo import cases, grad_cases
from candle_api.testing.pytest_plugin import missing_kernel


def _run(config, candle_device, check):
    try:
        check(get_device(candle_device))
    except UnsupportedOpError as exc:
        # A backend being written lacks ops: say which instead of failing the suite.
        missing_kernel(config, f"not implemented: {exc}")


@pytest.mark.parametrize("case", cases(), ids=str)
def test_op(pytestconfig, candle_device, case):
    _run(pytestconfig, candle_device, case.check_against_reference)


@pytest.mark.parametrize("case", grad_cases(), ids=str)
def test_gradient(pytestconfig, candle_device, case):
    _run(pytestconfig, candle_device, case.check_gradient)
