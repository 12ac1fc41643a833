"""The backend contract as code: the kernel table (:mod:`.table`) and the
device Protocol (:mod:`.device`). docs/backend-contract.md is generated from
them (``python -m candle_api.contract.docs``)."""

from .device import BackendDevice, Storage, missing_members
from .table import ACTIVATIONS, ALL, BY_NAME, CONTRACT_VERSION, FLOATS, ROWS, KernelRow

__all__ = ["BackendDevice", "Storage", "missing_members", "ACTIVATIONS", "ALL", "BY_NAME", "CONTRACT_VERSION",
           "FLOATS", "ROWS", "KernelRow"]
