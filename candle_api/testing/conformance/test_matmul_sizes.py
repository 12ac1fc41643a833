"""Matrix products at the sizes where a blocked GEMM changes course: edge
tiles of every height and width, several K slices (deeper than any slice a
kernel takes at once, and just past one), more rows than one block of A, the
single row or column of a GEMV, in every layout a view can have (transposed,
strided) and every float dtype. The op table's products are a few elements;
these reach the blocking of a real kernel.

Each result is held to the rounding a sum of k products may make:
|got - exact| <= (k + 2) * eps * (|A| @ |B|), with the exact product of the
operands as the backend holds them (half dtypes are rounded first, and their
result once more on return)."""

import numpy as np
import pytest

from candle_api.device import get_device
from candle_api.ops.creation import from_array

EPS = {"f32": 2.0**-24, "f64": 2.0**-53, "bf16": 2.0**-24, "f16": 2.0**-24}
#: the rounding of a half result on return, relative to its magnitude
RESULT_ROUNDING = {"bf16": 2.0**-8, "f16": 2.0**-11}
SHAPES = [  # m, n, k
    (1, 37, 300),  # a row: GEMV
    (37, 1, 300),  # a column
    (5, 3, 2),
    (7, 17, 9),  # one row and one column past a 6- or 14-row, 16- or 32-wide tile
    (13, 33, 257),
    (20, 31, 1100),  # past every kernel's deepest K slice
    (97, 100, 600),
    (250, 45, 300),  # more rows than one block of A
    (171, 129, 520),
    (400, 700, 300),  # more rows than one block of A, more columns than one chunk of B's panels (AVX2)
]
LAYOUTS = ["NN", "TN", "NT", "TT", "SN", "NS"]  # N: contiguous, T: transposed view, S: every other column


def _operand(rng, shape, layout, dtype, device):
    x = rng.standard_normal(shape).astype(np.float32)
    if layout == "T":
        t = from_array(np.ascontiguousarray(x.T), None, device).t()
    elif layout == "S":
        wide = np.zeros((shape[0], 2 * shape[1]), np.float32)
        wide[:, ::2] = x
        t = from_array(wide, None, device)[:, ::2]
    else:
        t = from_array(x, None, device)
    return t.to_dtype(dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "f16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_at_blocking_sizes(candle_device, dtype, layout):
    device = get_device(candle_device)
    rng = np.random.default_rng(sum(map(ord, dtype + layout)))
    for m, n, k in SHAPES:
        a = _operand(rng, (m, k), layout[0], dtype, device)
        b = _operand(rng, (k, n), layout[1], dtype, device)
        got = (a @ b).to_dtype("f64").numpy()
        a64, b64 = a.to_dtype("f64").numpy(), b.to_dtype("f64").numpy()
        want = a64 @ b64
        bound = (k + 2) * EPS[dtype] * (np.abs(a64) @ np.abs(b64)) + RESULT_ROUNDING.get(dtype, 0) * np.abs(want)
        err = np.abs(got - want)
        worst = np.unravel_index(np.argmax(err - bound), err.shape)
        assert (err <= bound).all(), (
            f"{m}x{k} @ {k}x{n} {dtype} {layout}: error {err[worst]:.3g} at {worst} exceeds {bound[worst]:.3g}")
