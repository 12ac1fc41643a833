"""The cpu GEMM packs a B whose rows are contiguous in the microkernel that first
reads each panel (templates/gemm_driver.h, first_tile_, where plan_ says when),
and any other B in a pass of its own. Both must give the same bits: each element of C is the same
sequence of multiply-adds whichever way its panels were packed."""

import numpy as np
import pytest

import candle_api as c
from candle_api import utils

SHAPES = [  # m, k, n
    (64, 384, 1536),  # few rows: each task packs its own panels (AVX2; AVX-512's block of A is shorter)
    (28, 256, 1000),  # few rows on every kernel, a partial last panel
    (20, 300, 100),
    (400, 300, 700),  # more rows than one block of A: shared panels, a partial last one
    (512, 512, 512),  # shared panels on one thread, one K slice (AVX2's shared depth: 512)
    (200, 1100, 300),  # shared panels, K past AVX2's shared depth: three slices
    (300, 520, 1100),  # B's rows a page or more apart: shared panels packed first
    (9, 1100, 40),  # K past the deepest slice, a partial panel
]


def product_both_ways(rng, m, k, n, dtype):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    wide = np.zeros((k, 2 * n), dtype)
    wide[:, ::2] = b
    # every other column: B's columns are not contiguous, so it is packed in a pass of its own
    strided = c.Tensor(wide)[:, ::2]
    assert strided.stride()[1] == 2
    bound = (k + 2) * np.finfo(dtype).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    # B times one, exactly B, in the backend's own memory: its rows start on cache lines, so shared
    # panels are packed as they are multiplied too (NumPy's buffers are only 16-byte aligned)
    lined = c.Tensor(b) * 1.0
    return (c.Tensor(a) @ lined).numpy(), (c.Tensor(a) @ strided).numpy(), a.astype(np.float64) @ b, bound


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packing_b_while_multiplying_gives_the_same_bits(dtype, threads):
    before = utils.get_num_threads()
    rng = np.random.default_rng(7)
    try:
        utils.set_num_threads(threads)
        for m, k, n in SHAPES:
            fused, packed_first, exact, bound = product_both_ways(rng, m, k, n, dtype)
            np.testing.assert_array_equal(fused, packed_first, err_msg=f"{m}x{k} @ {k}x{n}")
            assert (np.abs(fused - exact) <= bound).all(), f"{m}x{k} @ {k}x{n}"
    finally:
        utils.set_num_threads(before)
