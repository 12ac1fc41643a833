"""The int8 rows of the contract (quantize_u8_params, quantize_u8,
pack_int8_panels, matmul_int8) against exact NumPy references: the packed
bytes as the contract lays them out, integer products exact with every kind
of zero point, scaled products within f32 rounding, ONNX's dynamic
quantization to the bit; and the errors of the front ends."""

import numpy as np
import pytest

from candle_api.device import get_device
from candle_api.errors import DTypeError, KernelError, ShapeError
from candle_api.ops import int8
from candle_api.ops.creation import from_numpy

#: The kernels these tests exercise (for test_coverage).
KERNELS = {("quantize_u8_params", "f32"), ("quantize_u8", "f32"), ("pack_int8_panels", "u8"),
           ("pack_int8_panels", "i16"), ("matmul_int8", "u8")}


def _t(device, arr):
    return from_numpy(np.ascontiguousarray(arr)).to_device(device)


def _packed(w: np.ndarray, unsigned: bool) -> np.ndarray:
    """The contract's layout, from NumPy."""
    k, n = w.shape
    v = w.astype(np.int64) - (128 if unsigned else 0)
    panels, groups = -(-n // 16), -(-k // 4)
    padded = np.zeros((groups * 4, panels * 16), np.int64)
    padded[:k, :n] = v
    blocks = padded.reshape(groups, 4, panels, 16).transpose(2, 0, 3, 1)
    sums = padded.sum(0).astype(np.int32)
    return np.concatenate([blocks.astype(np.int8).reshape(-1).view(np.uint8), sums.view(np.uint8)])


SHAPES = [(1, 1, 1), (5, 16, 128), (9, 7, 33), (17, 300, 50), (1, 128, 512), (70, 64, 16)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("unsigned", [False, True])
def test_int8_products(candle_device, m, k, n, unsigned):
    device = get_device(candle_device)
    rng = np.random.default_rng(m + k + n)
    w = rng.integers(0, 256, (k, n)).astype(np.uint8) if unsigned else rng.integers(-128, 128, (k, n)).astype(np.int16)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    bp = int8.pack_int8_panels(_t(device, w.T).t())  # strided weights
    np.testing.assert_array_equal(bp.numpy(), _packed(w, unsigned))
    shift = 128 if unsigned else 0
    za = np.array([int(rng.integers(0, 256))], np.uint8)
    for zb in (None, np.array([int(rng.integers(0, 256)) - 128], np.int32), rng.integers(-128, 128, n).astype(np.int32)):
        # zb is in the stored (signed) domain: the weight's own zero point is zb + shift (none: shift)
        want = (a.astype(np.int64) - za[0]) @ (w.astype(np.int64) - shift - (0 if zb is None else zb.astype(np.int64)))
        got = int8.matmul_int8(_t(device, a), bp, n, _t(device, za), None if zb is None else _t(device, zb))
        assert got.dtype == "i32"
        np.testing.assert_array_equal(got.numpy(), want)
    sa, sb, bias = np.array([0.02], np.float32), rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    got = int8.matmul_int8(_t(device, a.reshape(1, m, k)), bp, n, None, None, _t(device, sa), _t(device, sb),
                           _t(device, bias)).numpy()
    want = (a.astype(np.int64) @ (w.astype(np.int64) - shift)) * (sa.astype(np.float64) * sb) + bias
    assert got.shape == (1, m, n)
    np.testing.assert_allclose(got[0], want, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "one"])
def test_dynamic_quantization(candle_device, case):
    device = get_device(candle_device)
    rng = np.random.default_rng(3)
    x = {"mixed": rng.standard_normal((3, 100)), "positive": rng.random((7,)) * 5, "negative": -rng.random((4, 4)),
         "zeros": np.zeros((2, 3)), "one": np.array([2.5])}[case].astype(np.float32)
    q, scale, zp = int8.quantize_u8(_t(device, x))
    lo, hi = np.float32(min(x.min(), 0)), np.float32(max(x.max(), 0))
    want_scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    want_zp = np.rint(np.clip(-lo / want_scale, 0, 255))
    assert scale.numpy() == want_scale and zp.numpy() == want_zp and zp.dtype == "u8"
    np.testing.assert_array_equal(q.numpy(), np.clip(np.rint(x / want_scale) + want_zp, 0, 255).astype(np.uint8))


def test_errors(candle_device):
    device = get_device(candle_device)
    bp = int8.pack_int8_panels(_t(device, np.zeros((8, 4), np.uint8)))
    a = _t(device, np.zeros((2, 8), np.uint8))
    with pytest.raises(ShapeError, match="not weights of depth 9"):
        int8.matmul_int8(_t(device, np.zeros((2, 9), np.uint8)), bp, 4)
    with pytest.raises(ShapeError, match="b_zp must hold 1 or 4 values"):
        int8.matmul_int8(a, bp, 4, b_zp=_t(device, np.zeros(3, np.int32)))
    with pytest.raises(DTypeError, match="u8"):
        int8.matmul_int8(_t(device, np.zeros((2, 8), np.float32)), bp, 4)
    with pytest.raises(ValueError, match="both scales"):
        int8.matmul_int8(a, bp, 4, a_scale=_t(device, np.ones(1, np.float32)))
    with pytest.raises(DTypeError, match="u8 or i16"):
        int8.pack_int8_panels(_t(device, np.zeros((8, 4), np.int32)))
    if candle_device == "cpu":  # the kernel checks the values of i16 weights
        with pytest.raises(KernelError, match="out of range"):
            int8.pack_int8_panels(_t(device, np.full((2, 2), 200, np.int16)))
