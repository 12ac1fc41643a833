"""Every differentiable op's backward pass against finite differences in
float64, with its inputs in every layout."""

import pytest

from candle_api.device import get_device
from candle_api.errors import UnsupportedOpError
from candle_api.testing.opinfo import grad_cases


@pytest.mark.parametrize("case", grad_cases(), ids=str)
def test_gradient(candle_device, case):
    device = get_device(candle_device)
    try:
        case.check_gradient(device)
    except UnsupportedOpError as exc:
        pytest.skip(f"not implemented: {exc}")
