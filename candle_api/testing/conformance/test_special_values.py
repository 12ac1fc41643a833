"""IEEE special values (NaN, infinities, signed zeros, extremes) give the IEEE
answers NumPy gives, and never an error."""

import math

import numpy as np
import pytest

from candle_api.device import get_device
from candle_api.dtype import get_dtype
from candle_api.ops.creation import from_array
from candle_api.testing.opinfo import UNARY

SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 0.5, -0.5, 1.0, -1.0, 88.0, -88.0,
            1000.0, -1000.0]
FLOAT_DTYPES = ["f32", "f64"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name,ref", [(n, r) for n, r, _, _ in UNARY], ids=[n for n, *_ in UNARY])
def test_unary_special_values(candle_device, name, ref, dtype):
    device = get_device(candle_device)
    x = np.array(SPECIALS, dtype=get_dtype(dtype).np)
    with np.errstate(all="ignore"):
        want = np.asarray(ref(x.astype(np.float64))).astype(x.dtype)
    got = getattr(from_array(x, None, device), name)().numpy()
    rtol = 1e-6 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True, err_msg=f"{name} on {SPECIALS}")
    # Signed zeros: where NumPy returns -0.0 the backend must too.
    assert list(np.signbit(got[want == 0])) == list(np.signbit(want[want == 0])), f"{name}: sign of zero"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", ["maximum", "minimum", "add", "mul", "div", "sub"])
def test_binary_special_values(candle_device, op, dtype):
    device = get_device(candle_device)
    a = np.array(SPECIALS, dtype=get_dtype(dtype).np)
    b = a[::-1].copy()
    ref = {"maximum": np.maximum, "minimum": np.minimum, "add": np.add, "mul": np.multiply, "div": np.divide,
           "sub": np.subtract}[op]
    with np.errstate(all="ignore"):
        want = ref(a, b)
    ta, tb = from_array(a, None, device), from_array(b, None, device)
    got = getattr(ta, op)(tb).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_reductions_propagate_nan(candle_device, dtype):
    device = get_device(candle_device)
    short = np.array([[1.0, math.nan, 3.0, math.nan], [4.0, 2.0, -math.inf, math.inf]])
    # rows longer than any vector width, NaN or inf in the vector body and in the tail
    long = np.random.default_rng(0).integers(-8, 8, size=(4, 37)).astype(np.float64)
    long[0, 5] = long[1, 36] = math.nan
    long[2, 3], long[2, 35] = math.inf, -math.inf
    for x in (short.astype(get_dtype(dtype).np), long.astype(get_dtype(dtype).np)):
        t = from_array(x, None, device)
        with np.errstate(invalid="ignore"):
            want_max, want_min, want_sum = np.max(x, 1), np.min(x, 1), np.sum(x, 1)
        np.testing.assert_array_equal(t.amax(1).numpy(), want_max)
        np.testing.assert_array_equal(t.amin(1).numpy(), want_min)
        np.testing.assert_array_equal(t.argmax(1).numpy(), np.argmax(x, 1).astype(np.uint32))
        np.testing.assert_array_equal(t.argmin(1).numpy(), np.argmin(x, 1).astype(np.uint32))
        np.testing.assert_array_equal(t.sum(1).numpy(), want_sum)


@pytest.mark.parametrize("dst", ["u8", "u32", "i16", "i32", "i64"])
@pytest.mark.parametrize("src", ["f16", "f32", "f64", "bf16"])
def test_float_to_int_casts_saturate(candle_device, src, dst):
    """Out-of-range floats clamp to the integer range and NaN becomes 0 (Rust's `as`,
    which Candle inherits), never undefined behaviour."""
    device = get_device(candle_device)
    s, d = get_dtype(src), get_dtype(dst)
    info = np.iinfo(d.np)
    with np.errstate(over="ignore"):  # 1e30 is inf in f16
        x = np.array([math.nan, math.inf, -math.inf, 1e30, -1e30, 3.7, -3.7, 0.0], dtype=np.float64).astype(s.np)
    got = from_array(x, s, device).to_dtype(d).numpy()
    lo, hi = int(info.min), int(info.max)
    want = [0, hi, lo, hi, lo, min(max(3, lo), hi), max(min(-3, hi), lo), 0]
    assert got.tolist() == want


@pytest.mark.parametrize("dst", ["bf16", "f16"])
def test_casts_to_half_round_to_nearest_even(candle_device, dst):
    """f32 -> bf16/f16 rounds to nearest even bit for bit as ml_dtypes does, keeping
    subnormals (which a flush-to-zero instruction would lose), infinities, signed
    zeros and NaN, whether a value sits in a vector block or in the tail."""
    device = get_device(candle_device)
    d = get_dtype(dst)
    tiny = np.finfo(np.float32).smallest_subnormal
    specials = np.array([1e-40, -1e-42, tiny, -tiny, 1e-39, 6e-8, 3e-5, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,
                         1 + 2.0 ** -11, 65520.0, 3.4028235e38, -3.4028235e38, math.inf, -math.inf, -0.0, 0.0,
                         math.nan], dtype=np.float32)
    normal = np.random.default_rng(0).standard_normal(47).astype(np.float32)
    x = np.concatenate([normal[:13], specials, normal[13:], specials[:5]])  # specials in blocks and in the tail
    with np.errstate(over="ignore"):
        want = x.astype(d.np)
    got = from_array(x, None, device).to_dtype(d).numpy()
    nan = np.isnan(want.astype(np.float32))
    assert np.isnan(got.astype(np.float32))[nan].all()
    assert got.view(np.uint16)[~nan].tolist() == want.view(np.uint16)[~nan].tolist()
