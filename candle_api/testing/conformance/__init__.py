"""The conformance suite: ``pytest --pyargs candle_api.testing.conformance [--candle-device DEV]``."""


def table_tests(ops=None) -> tuple:
    """A conformance module's two tests of an op table (``test_op, test_gradient
    = table_tests(OPS)``): every case against NumPy, and every differentiable
    case's gradient against finite differences, on each device."""
    import pytest

    from ...device import get_device
    from ..opinfo import cases, grad_cases

    @pytest.mark.parametrize("case", cases(ops), ids=str)
    def test_op(candle_device, case):
        case.check_against_reference(get_device(candle_device))

    @pytest.mark.parametrize("case", grad_cases(ops), ids=str)
    def test_gradient(candle_device, case):
        case.check_gradient(get_device(candle_device))

    return test_op, test_gradient
