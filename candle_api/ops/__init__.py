"""Op implementations behind the Tensor methods and module-level functions.

Each module validates its inputs (shapes, dtypes, devices), computes the
output layout, and calls the device's kernel for the op, found in the
device's cached kernel table. Ops with no kernel on a device but a
decomposition into other ops run as that decomposition, on the same device.
"""

from . import (  # noqa: F401
    core, creation, elementwise, shape, reduce, linalg, indexing, conv, nn, formatting, custom, optim, quantized,
    sorting, predicates, masking, einsum, rnn, panels, int8,
)
