"""Every op of the table, every dtype, every layout, against NumPy; and every
differentiable op's backward pass against finite differences in float64,
with its inputs in every layout."""

import pytest

from candle_api.device import get_device
from candle_api.testing.opinfo import cases, grad_cases

# An op the device lacks is reported by the pytest plugin as a missing kernel (a skip, or a failure
# with --candle-strict).


@pytest.mark.parametrize("case", cases(), ids=str)
def test_op(candle_device, case):
    case.check_against_reference(get_device(candle_device))


@pytest.mark.parametrize("case", grad_cases(), ids=str)
def test_gradient(candle_device, case):
    case.check_gradient(get_device(candle_device))
