"""The dispatch seam: the fast paths of apply_unary / apply_one / apply_binary
agree with apply() itself, which serves every case they pass on (a gradient
to record, an observer, no kernel, broadcasting)."""

import numpy as np
import pytest

import candle_api as c
from candle_api.ops import dispatch

CASES = {
    "exp": lambda x, y: x.exp(),
    "affine": lambda x, y: x * 3.0 - 1.0,
    "clamp": lambda x, y: x.clamp(-0.5, 0.5),
    "to_dtype": lambda x, y: x.to_dtype("f64"),
    "add": lambda x, y: x + y,
    "gt": lambda x, y: x > y,
    "sum": lambda x, y: x.sum(1),
    "max_keepdim": lambda x, y: x.max_keepdim(0),
    "argmax": lambda x, y: x.argmax(1),
    "matmul": lambda x, y: x @ y.t(),
    "softmax": lambda x, y: x.softmax(-1),
    "log_softmax": lambda x, y: x.log_softmax(0),
}


@pytest.mark.parametrize("name", CASES)
def test_fast_paths_agree_with_apply(name):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32)
    fast = CASES[name](c.Tensor(a), c.Tensor(b))
    # a leaf that wants its gradient sends every op through apply() and its prepare
    general = CASES[name](c.Tensor(a).requires_grad_(), c.Tensor(b).requires_grad_())
    assert fast.dtype == general.dtype and fast.shape == general.shape
    np.testing.assert_array_equal(fast.numpy(), general.numpy())


def test_an_observer_sees_the_fast_paths():
    x = c.Tensor([1.0, 2.0])
    with c.trace() as t:
        x.exp(), x + x, x.sum_all(), x.to_dtype("f64")
    assert dispatch.observer is None
    assert {k[1] for k in t.kernels} == {"exp", "add", "sum", "cast"}
