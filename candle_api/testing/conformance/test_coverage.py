"""The op table exercises every (op, dtype) kernel of the contract a device
claims (custom ops are the business of the packages that define them)."""

from candle_api.contract import BY_NAME
from candle_api.device import get_device
from candle_api.testing.conformance.test_int8 import KERNELS as INT8_KERNELS
from candle_api.testing.conformance.test_panels import KERNELS as PANELS_KERNELS
from candle_api.testing.conformance.test_quantized import KERNELS as QUANTIZED_KERNELS
from candle_api.testing.opinfo import OPS, covered_kernels


def test_every_claimed_kernel_is_exercised(candle_device):
    device = get_device(candle_device)
    claimed = {(op, str(dtype)) for op, dtype in device.kernels if op in BY_NAME}
    missing = sorted(claimed - covered_kernels(OPS) - QUANTIZED_KERNELS - PANELS_KERNELS - INT8_KERNELS)
    assert not missing, f"kernels {device} claims that no conformance case exercises: {missing}"
