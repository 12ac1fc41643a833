"""Counter-based random numbers: element i of a draw depends only on (seed,
offset + i), so any worker may compute any element and a draw splits into
pieces that give the same values.

The generator is SplitMix64 (Steele, Lea and Flood, OOPSLA 2014): the k-th
value of the stream keyed by seed is mix(key + k * golden), and element i
takes stream positions 2 (offset + i) and 2 (offset + i) + 1, enough for
Box-Muller's two uniforms. Everything is uint64 arithmetic, wrapping."""

from __future__ import annotations

import numpy as np

from candle_api.dtype import f32, f64

from .strided import rounded

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MASK = (1 << 64) - 1


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijection of uint64 that spreads every input bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _uniforms(seed: int, offset: int, n: int, lane: int) -> np.ndarray:
    """n doubles in [0, 1) with 53 random bits, from stream positions 2 (offset + i) + lane."""
    key = _mix(np.array([seed & _MASK], np.uint64))
    counters = np.arange(n, dtype=np.uint64) + np.uint64(offset & _MASK)
    bits = _mix(key + (counters * np.uint64(2) + np.uint64(lane)) * _GOLDEN)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def draw(dtype, n: int, dist: int, p0: float, p1: float, seed: int, offset: int) -> np.ndarray:
    """n values in dtype: uniform in [p0, p1) (dist 0) or normal with mean p0 and
    standard deviation p1 (dist 1), computed in float64 and rounded once."""
    u = _uniforms(seed, offset, n, 0)
    if dist == 0:
        values = p0 + (p1 - p0) * u
    else:  # Box-Muller; 1 - u lies in (0, 1], so the log is finite
        values = p0 + p1 * np.sqrt(-2.0 * np.log(1.0 - u)) * np.cos(2.0 * np.pi * _uniforms(seed, offset, n, 1))
    out = rounded(values, dtype)
    if dist == 0 and dtype in (f32, f64) and p1 > p0:  # rounding must not reach the open upper bound
        out = np.minimum(out, np.nextafter(dtype.np.type(p1), -np.inf))
    return out
