"""GGML-quantized tensors on the cpu kernels against the NumPy reference codecs.

Three kinds of case, by ``index % 3``, over every quantized type, random row
counts and widths (whole blocks), and 1 to 20 rows of x (the dot-product and
the GEMM paths):

- hostile blocks: random bytes (scales that are NaN, infinite, subnormal or
  huge) or real blocks with bits flipped: dequantize must equal the reference bit for bit (NaN where it has
  NaN), embedding must give those rows, and matmul_t must run; where the
  weights are finite its result must lie within the rounding bound of the
  conformance suite (quantized activations, bf16 operands);
- quantize: values from normal to 1e30 and subnormal, quantized in C, must
  give the reference's bytes;
- bad input: a buffer of the wrong size, a type that does not exist, rows
  that are not whole blocks, an id out of range: a candle error."""

from __future__ import annotations

import numpy as np

import candle_api as c
from candle_api.errors import CandleError
from candle_api.quantized import GGML_TYPES, QTensor, dequantize_array, quantize_array
from candle_api.testing.conformance.test_quantized import qmatmul_bound

from ..case import Case, pick

TYPES = [name for name, t in GGML_TYPES.items() if t.block_size > 1]


def _shape(rng, name: str) -> tuple[int, int]:
    size = GGML_TYPES[name].block_size
    blocks = int(rng.integers(1, 13 if size == 32 else 4))
    return int(rng.integers(1, 70)), blocks * size


def hostile_blocks(rng, name: str):
    t = GGML_TYPES[name]
    n, k = _shape(rng, name)
    if rng.random() < 0.5:  # any bytes at all: most tensors then hold a NaN or infinite scale somewhere
        raw = rng.integers(0, 256, n * (k // t.block_size) * t.type_size, dtype=np.uint8)
        made = "random blocks"
    else:  # real blocks with a few bits flipped, scales included
        raw = quantize_array(rng.standard_normal((n, k)).astype(np.float32), name)
        flips = rng.random(raw.shape) < 0.01
        raw[flips] ^= (1 << rng.integers(0, 8, int(flips.sum()))).astype(np.uint8)
        made = "blocks with flipped bits"
    m = int(pick(rng, [1, 2, 3, 7, 8, 9, 20]))
    x = rng.standard_normal((m, k)).astype(np.float32)

    def run():
        q = QTensor(raw, (n, k), name)
        want = dequantize_array(raw, name, (n, k))
        np.testing.assert_array_equal(q.dequantize().numpy(), want)
        ids = rng.integers(0, n, 5)
        np.testing.assert_array_equal(q.embedding(c.tensor(ids.tolist(), dtype="i64")).numpy(), want[ids])
        y = q.matmul_t(c.from_numpy(x)).numpy()
        if not np.isfinite(want).all() or np.abs(want).max() > 1e30:
            return "ran (non-finite weights)"
        w = want.astype(np.float64)
        err = np.abs(y - x.astype(np.float64) @ w.T)
        bound = qmatmul_bound(x.astype(np.float64), w, t.block_size)
        assert (err <= bound).all(), f"worst error {err.max():.3g} beyond its bound {bound.flat[err.argmax()]:.3g}"
        return "within bound"

    return Case(f"{name}: {n}x{k} {made}, x {m} rows", run)


def quantize(rng, name: str):
    n, k = _shape(rng, name)
    scale = float(pick(rng, [1.0, 1e-3, 1e30, 1e-40, 3e38 / k]))
    x = (rng.standard_normal((n, k)) * scale).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = 0

    def run():
        np.testing.assert_array_equal(QTensor.quantize(c.from_numpy(x), name).data, quantize_array(x, name))
        return "bit-exact"

    return Case(f"{name}: quantize {n}x{k} values of scale {scale:g}", run)


def bad_input(rng, name: str):
    t = GGML_TYPES[name]
    n, k = _shape(rng, name)
    raw = np.zeros(n * (k // t.block_size) * t.type_size, np.uint8)
    kind = pick(rng, ["size", "type", "row", "id"])

    def run():
        if kind == "size":
            QTensor(raw[: len(raw) - int(rng.integers(1, t.type_size + 1))], (n, k), name)
        elif kind == "type":
            QTensor(raw, (n, k), pick(rng, ["q4_9", "iq2_xxs", "Q9_K", ""]))
        elif kind == "row":
            QTensor.quantize(c.ones(n, k + int(rng.integers(1, t.block_size))), name)
        else:
            QTensor(raw, (n, k), name).embedding(c.tensor([pick(rng, [n, n + 7, -1])], dtype="i64"))
        raise AssertionError(f"{kind}: no error")

    return Case(f"{name}: bad {kind}", run, (CandleError,))


def make(rng, index, tmp) -> Case:
    name = pick(rng, TYPES)
    return (hostile_blocks, quantize, bad_input)[index % 3](rng, name)
