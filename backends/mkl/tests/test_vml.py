"""The vector math kernels against NumPy in float64, within the contract's
tolerances; strided inputs go back to the cpu kernel; special values give the
IEEE results without a word on stderr."""

import subprocess
import sys

import numpy as np
import pytest

import candle_api as c
from candle_api.contract.table import TOLERANCES
from candle_api.info import kernel_providers
from candle_api.testing import reference as R
from candle_backend_mkl import vml

DOMAINS = {"log": (0.01, 10), "sqrt": (0, 10), "recip": (0.1, 10), "rsqrt": (0.1, 10), "asin": (-0.99, 0.99),
           "acos": (-0.99, 0.99), "atanh": (-0.99, 0.99), "acosh": (1.01, 10), "log1p": (-0.9, 10),
           "tan": (-1.5, 1.5)}
NUMPY = {"log": np.log, "recip": lambda x: 1 / x, "rsqrt": lambda x: 1 / np.sqrt(x), "erf": R.erf,
         "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh,
         "atanh": np.arctanh}


def test_mkl_serves_the_vector_math_when_forced():
    providers = kernel_providers("cpu")
    for op in vml.UNARY:
        assert providers[op]["f32"] == providers[op]["f64"] == "mkl", op
        assert providers[op]["f16"] == "cpu"
    assert providers["powf"]["f32"] == providers["pow"]["f64"] == "mkl"


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("op", sorted(vml.UNARY))
def test_unary_matches_float64(op, dtype):
    lo, hi = DOMAINS.get(op, (-3, 3))
    x = np.random.default_rng(3).uniform(lo, hi, 40009)  # several of the pool's chunks.astype(dtype.replace("f", "float"))
    want = NUMPY.get(op, getattr(np, op, None))(x.astype(np.float64))
    rtol, atol = TOLERANCES[dtype]
    t = c.Tensor(x)
    np.testing.assert_allclose(getattr(t, op)().numpy(), want, rtol=rtol, atol=atol, err_msg=op)
    # a strided view goes to the cpu kernel, with the same answer
    strided = c.Tensor(np.stack([x, x], 1))[:, 0]
    np.testing.assert_allclose(getattr(strided, op)().numpy(), want, rtol=rtol, atol=atol, err_msg=f"{op} strided")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_pow_and_powf(dtype):
    rng = np.random.default_rng(4)
    a = rng.uniform(0.1, 3, 40009).astype(dtype.replace("f", "float"))
    b = rng.uniform(-2, 2, 40009).astype(a.dtype)
    rtol, atol = TOLERANCES[dtype]
    np.testing.assert_allclose(c.Tensor(a).powf(2.5).numpy(), a.astype(np.float64) ** 2.5, rtol=rtol, atol=atol)
    np.testing.assert_allclose(c.Tensor(a).pow(c.Tensor(b)).numpy(), a.astype(np.float64) ** b, rtol=rtol, atol=atol)
    # broadcasting arrives with zero strides: the cpu kernel takes it
    row = c.Tensor(b[:7])
    got = c.Tensor(a[:21].reshape(3, 7)).pow(row).numpy()
    np.testing.assert_allclose(got, a[:21].reshape(3, 7).astype(np.float64) ** b[:7], rtol=rtol, atol=atol)


SPECIAL = """
import numpy as np, candle_api as c
x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, -1.0, 2.0], np.float32)
with np.errstate(all="ignore"):
    for op, fn in [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh), ("recip", np.reciprocal),
                   ("acosh", np.arccosh), ("atanh", np.arctanh), ("erf", None), ("log1p", np.log1p)]:
        got = getattr(c.Tensor(x), op)().numpy()
        special = ~np.isfinite(got) | (got == 0)
        if fn is not None:
            want = fn(x)
            special |= ~np.isfinite(want) | (want == 0)
            np.testing.assert_array_equal(got[special], want[special], err_msg=op)
    assert list(c.Tensor(x[:3]).erf().numpy()[:2]) == [1, -1]
print("ok")
"""


def test_special_values_are_ieee_and_silent():
    proc = subprocess.run([sys.executable, "-c", SPECIAL], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "MKL" not in proc.stderr and "oneMKL" not in proc.stderr, proc.stderr
