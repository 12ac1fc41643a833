"""The device keeps the backend contract: its device object has every method
of the Protocol, and it has a kernel for every required row of the contract
version it declares, in every dtype it declares (a row newer than that
version is not asked for: it runs as its decomposition, or is reported
unsupported)."""

import pytest

from candle_api.contract import ROWS, missing_members
from candle_api.device import get_device
from candle_api.registry import registry
from candle_api.testing.pytest_plugin import missing_kernel


def _spec(device):
    return registry().backends()[device.type][0]


def test_device_object_conforms(candle_device):
    device = get_device(candle_device)
    assert not missing_members(device.backend)
    assert 1 <= _spec(device).contract_version


@pytest.mark.parametrize("row", [r for r in ROWS if r.required], ids=lambda r: r.name)
def test_required_kernel(pytestconfig, candle_device, row):
    device = get_device(candle_device)
    spec = _spec(device)
    if row.since > spec.contract_version:
        pytest.skip(f"{row.name} was added in contract version {row.since}; {device.type} implements "
                    f"{spec.contract_version}")
    missing = [d for d in row.dtypes if d in spec.dtypes and (row.name, d) not in device.kernels]
    if missing:  # skipped, or failed with --candle-strict
        missing_kernel(pytestconfig, f"{device} lacks the required kernel {row.name} for {' '.join(missing)}")
    assert not missing
