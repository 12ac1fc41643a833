"""Seeded random numbers: reproducible, in range, with the right moments."""

import numpy as np
import pytest

import candle_api as c


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
def test_rand_is_seeded_and_in_range(candle_device, dtype):
    c.manual_seed(1234)
    a = c.rand(1000, 7, lo=-2.0, up=3.0, dtype=dtype, device=candle_device).numpy().astype(np.float64)
    c.manual_seed(1234)
    b = c.rand(1000, 7, lo=-2.0, up=3.0, dtype=dtype, device=candle_device).numpy().astype(np.float64)
    np.testing.assert_array_equal(a, b)
    assert a.min() >= -2.0 and a.max() <= 3.0
    if dtype in ("f32", "f64"):
        assert a.max() < 3.0
    assert abs(a.mean() - 0.5) < 0.05 and abs(a.std() - 5 / np.sqrt(12)) < 0.05


def test_consecutive_draws_differ(candle_device):
    c.manual_seed(7)
    a = c.randn(64, device=candle_device).numpy()
    b = c.randn(64, device=candle_device).numpy()
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_randn_moments(candle_device, dtype):
    c.manual_seed(99)
    x = c.randn(200_000, mean=1.5, std=2.0, dtype=dtype, device=candle_device).numpy().astype(np.float64)
    assert abs(x.mean() - 1.5) < 0.02
    assert abs(x.std() - 2.0) < 0.02
    # tails of a normal: about 4.55% beyond two standard deviations
    assert abs(np.mean(np.abs(x - 1.5) > 4.0) - 0.0455) < 0.003


def test_random_needs_a_float_dtype(candle_device):
    with pytest.raises(c.DTypeError):
        c.rand(3, dtype="u32", device=candle_device)
