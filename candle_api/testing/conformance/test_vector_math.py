"""Maximum error of the f32 transcendental functions against float64, on dense
sweeps of their useful range. Every backend must stay within these bounds; the
measured errors are printed in the pytest summary.

gelu (the tanh approximation) in float32 is limited by the rounding of its cubic
argument, which the exponential amplifies: it is held to ulps for x >= -3 and
to a relative error below that."""

import numpy as np
import pytest

from candle_api.device import get_device
from candle_api.ops.creation import from_array
from candle_api.testing import reference as R
from candle_api.testing.pytest_plugin import VECTOR_MATH_KEY


def _sweep(*ranges):
    return np.concatenate([np.linspace(lo, hi, n).astype(np.float32) for lo, hi, n in ranges])


# name: (reference, inputs, bound in ulp)
CASES = {
    "exp": (np.exp, _sweep((-87, 88.7, 300001), (-1e-3, 1e-3, 2001)), 2.0),
    "log": (np.log, np.concatenate([np.logspace(-37, 38, 300001).astype(np.float32), _sweep((0.5, 2.0, 100001))]),
            2.0),
    "tanh": (np.tanh, _sweep((-10, 10, 300001), (-1e-3, 1e-3, 2001)), 3.0),
    "sigmoid": (R.sigmoid, _sweep((-80, 80, 300001)), 3.0),
    "silu": (lambda x: x * R.sigmoid(x), _sweep((-80, 80, 300001)), 3.0),
    "erf": (R.erf, _sweep((-5, 5, 200001), (-1e-3, 1e-3, 2001)), 3.0),
    "gelu_erf": (R.gelu_erf, _sweep((-10, 10, 200001)), 8.0),
    "gelu": (R.gelu, _sweep((-3, 10, 200001)), 12.0),
}


def ulp_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    keep = np.abs(want) > 1e-30  # subnormal results have no meaningful ulp
    spacing = np.spacing(np.abs(want[keep]).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64)[keep] - want[keep]) / spacing


@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_math_max_error(candle_device, name, request):
    ref, x, bound = CASES[name]
    got = getattr(from_array(x, None, get_device(candle_device)), name)().numpy()
    err = ulp_errors(got, ref(x.astype(np.float64)))
    worst = float(err.max())
    request.config.stash.setdefault(VECTOR_MATH_KEY, {})[(candle_device, name)] = (worst, bound)
    assert worst <= bound, f"{name} max error {worst:.2f} ulp exceeds {bound} ulp at x={x[np.argmax(err)]}"


def test_gelu_tail_relative_error(candle_device):
    x = np.linspace(-10, -3, 100001).astype(np.float32)
    want = R.gelu(x.astype(np.float64))
    got = from_array(x, None, get_device(candle_device)).gelu().numpy().astype(np.float64)
    keep = np.abs(want) > 1e-30
    rel = np.max(np.abs(got[keep] - want[keep]) / np.abs(want[keep]))
    assert rel < 1e-5, f"gelu relative error {rel:.2e} below x = -3"

