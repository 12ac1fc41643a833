"""The quantized rows of the contract (quantize, dequantize, qmatmul,
qembedding, qpack, qmatmul_packed) on every GGML type, against the reference
NumPy codecs (and packing).

Quantize and dequantize are bit-exact. A quantized product may quantize its
activations on the fly as ggml does (Q8_0, Q8_1 or Q8_K blocks, 127 levels
each side of zero), or round both operands to bf16 for a GEMM, so it is
checked against the exact product of the dequantized weights within the bound
those roundings allow: per block, half a step of the activation's scale (plus
its f16 rounding) times the sum of the weights' magnitudes there; 2^-8 of
sum |x| |w| for bf16 operands; and f32 rounding."""

import numpy as np
import pytest

from candle_api.device import get_device
from candle_api.errors import CandleError, IndexOutOfRangeError
from candle_api.ops.creation import from_numpy, tensor
from candle_api.ops.dispatch import apply
from candle_api.ops.quantized import QPACK, qmatmul_packed
from candle_api.quantized import GGML_TYPES, QTensor, dequantize_array, quantize_array
from candle_api.quantized.packed import FIELD_KINDS, pack_array

#: Every quantized type (f32/f16/bf16 are plain) but the activation-only Q8_K.
TYPES = [name for name, t in GGML_TYPES.items() if t.block_size > 1 and name != "q8k"]
#: The kernels these tests exercise (for test_coverage).
KERNELS = {("quantize", "f32"), ("dequantize", "u8"), ("qmatmul", "f32"), ("qembedding", "u8"), ("qpack", "u8"),
           ("qmatmul_packed", "f32")}
#: The types with a packed layout.
PACKED_TYPES = [name for name in TYPES if name in FIELD_KINDS]


def _weights(rng, rows: int, cols: int) -> np.ndarray:
    """Rows of several kinds: normal, with an outlier, all zero, constant, tiny."""
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    w[0, 3] = 25.0
    if rows > 3:
        w[1] = 0
        w[2] = 0.75
        w[3] *= 1e-6
    return w


def _cols(name: str) -> int:
    """Rows of 9 blocks of 32 values (kernels may take 8 blocks at a time, then the rest) or 2 of 256."""
    size = GGML_TYPES[name].block_size
    return 9 * size if size == 32 else 2 * size


def _quantized(device, name: str, seed: int, rows: int):
    """Seeded weights of ``rows`` rows and the QTensor quantized from them on ``device``."""
    w = _weights(np.random.default_rng(seed), rows, _cols(name))
    return w, QTensor.quantize(from_numpy(w).to_device(device), name)


@pytest.mark.parametrize("name", TYPES)
def test_quantize_dequantize_bit_exact(candle_device, name):
    device = get_device(candle_device)
    w, q = _quantized(device, name, 1, 5)
    want = quantize_array(w, name)
    assert q.device == device
    np.testing.assert_array_equal(q.data, want)
    np.testing.assert_array_equal(q.dequantize().numpy(), dequantize_array(want, name, w.shape))


def qmatmul_bound(x: np.ndarray, wq: np.ndarray, block: int) -> np.ndarray:
    """The most that a quantized product may be from x @ wq.T (wq the dequantized weights): quantizing
    each block of x's rows (127 steps of amax / 127, scale rounded to f16; activations are quantized in
    blocks as long as the weight's: Q8_0/Q8_1 32 values, Q8_K 256), bf16 operands, and f32 rounding."""
    m, k = x.shape
    step = np.abs(x.reshape(m, k // block, block)).max(-1) / 127           # (m, blocks)
    mass = np.abs(wq.reshape(len(wq), k // block, block)).sum(-1)          # (n, blocks)
    activations = 0.6 * step.astype(np.float64) @ mass.T.astype(np.float64)
    return activations + 2**-8 * (np.abs(x) @ np.abs(wq).T) + 1e-6


@pytest.mark.parametrize("m", [1, 3, 9, 40])  # 2m rows: dot products, decoded tiles (8+), the GEMM (32+)
@pytest.mark.parametrize("name", TYPES)
def test_qmatmul_within_rounding(candle_device, name, m):
    device = get_device(candle_device)
    rng = np.random.default_rng(2 + m)
    k, n = _cols(name), 37
    w = _weights(rng, n, k)
    x = rng.standard_normal((2, m, k)).astype(np.float32)
    q = QTensor.quantize(from_numpy(w).to_device(device), name)
    y = q.matmul_t(from_numpy(x).to_device(device))
    assert y.shape == (2, m, n) and y.dtype.name == "f32"
    wq = dequantize_array(quantize_array(w, name), name, w.shape).astype(np.float64)
    flat = x.reshape(-1, k)
    want = flat.astype(np.float64) @ wq.T
    bound = qmatmul_bound(flat, wq, GGML_TYPES[name].block_size)
    err = np.abs(y.numpy().reshape(-1, n) - want)
    assert (err <= bound).all(), f"{name}: worst error {err.max():.3g} beyond its bound {bound.flat[err.argmax()]:.3g}"


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_qpack_bit_exact(candle_device, name):
    """Two groups of 16 rows and 5 rows left in the blocks' own layout."""
    device = get_device(candle_device)
    w, q = _quantized(device, name, 5, 37)
    packed = apply(QPACK, q.blocks, qtype=GGML_TYPES[name].type_id, n=37)
    np.testing.assert_array_equal(packed.numpy(), pack_array(quantize_array(w, name), name, w.shape))


@pytest.mark.parametrize("m", [1, 3, 5, 9, 40])  # passes of 1..4 rows of activations, and several of them
@pytest.mark.parametrize("name", PACKED_TYPES)
def test_qmatmul_packed_within_rounding(candle_device, name, m):
    device = get_device(candle_device)
    rng = np.random.default_rng(7 + m)
    k, n = _cols(name), 37
    w = _weights(rng, n, k)
    q = QTensor.quantize(from_numpy(w).to_device(device), name)
    t = GGML_TYPES[name]
    packed = apply(QPACK, q.blocks, qtype=t.type_id, n=n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = qmatmul_packed(from_numpy(x).to_device(device), packed, t.type_id, n)
    wq = dequantize_array(quantize_array(w, name), name, w.shape).astype(np.float64)
    want = x.astype(np.float64) @ wq.T
    err = np.abs(y.numpy() - want)
    bound = qmatmul_bound(x, wq, t.block_size)
    assert (err <= bound).all(), f"{name}: worst error {err.max():.3g} beyond its bound {bound.flat[err.argmax()]:.3g}"
    # a row's result does not depend on the rows beside it: exactly, from a kernel of the row; within
    # rounding, from the decomposition (dequantize, then the device's matmul, whose blocking may follow m)
    alone = qmatmul_packed(from_numpy(x[-1:]).to_device(device), packed, t.type_id, n)
    if ("qmatmul_packed", "f32") in device.kernels:
        np.testing.assert_array_equal(alone.numpy()[0], y.numpy()[-1])
    else:
        np.testing.assert_allclose(alone.numpy()[0], y.numpy()[-1], rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_packed_qtensor_keeps_its_values(candle_device):
    """QTensor.pack: the products read the packed blocks; everything else gives what it gave before."""
    device = get_device(candle_device)
    w, q = _quantized(device, "q4_0", 6, 19)
    want = quantize_array(w, "q4_0")
    x = from_numpy(np.random.default_rng(6).standard_normal((2, w.shape[1])).astype(np.float32)).to_device(device)
    before = q.matmul_t(x).numpy()
    packs = q.pack()
    assert q.packed == packs and q.pack() == packs and q.device == device
    if packs:  # the same integer sums, in another order
        np.testing.assert_allclose(q.matmul_t(x).numpy(), before, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(q.data, want)
    np.testing.assert_array_equal(q.dequantize().numpy(), dequantize_array(want, "q4_0", w.shape))
    np.testing.assert_array_equal(q.embedding(tensor([18, 0], dtype="u32", device=device)).numpy(),
                                  dequantize_array(want, "q4_0", w.shape)[[18, 0]])
    assert not QTensor.quantize(from_numpy(w[:, :256]).to_device(device), "q6k").pack()  # no packed layout


def test_qmatmul_half_inputs_and_gradient(candle_device):
    device = get_device(candle_device)
    rng = np.random.default_rng(3)
    w = _weights(rng, 6, 64)
    q = QTensor.quantize(from_numpy(w).to_device(device), "q8_0")
    x = from_numpy(rng.standard_normal((4, 64)).astype(np.float32)).to_device(device)
    assert q.matmul_t(x.to_dtype("bf16")).dtype.name == "bf16"
    leaf = x.detach().requires_grad_()
    q.matmul_t(leaf).sum_all().backward()
    wq = q.dequantize().numpy()
    np.testing.assert_allclose(leaf.grad.numpy(), np.broadcast_to(wq.sum(0), (4, 64)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", TYPES)
def test_qembedding_decodes_the_rows(candle_device, name):
    device = get_device(candle_device)
    w, q = _quantized(device, name, 4, 7)
    ids = tensor([[6, 0], [2, 2]], dtype="u32", device=device)
    got = q.embedding(ids)
    assert got.shape == (2, 2, w.shape[1])
    want = dequantize_array(quantize_array(w, name), name, w.shape)
    np.testing.assert_array_equal(got.numpy(), want[[[6, 0], [2, 2]]])
    with pytest.raises(IndexOutOfRangeError):
        q.embedding(tensor([7], dtype="i64", device=device))


def test_bad_blocks_are_refused(candle_device):
    device = get_device(candle_device)
    blocks = from_numpy(np.zeros(18 * 4, np.uint8)).to_device(device)  # four q4_0 blocks
    with pytest.raises(CandleError, match="takes 72 bytes"):
        QTensor(blocks.narrow(0, 0, 70), (2, 64), "q4_0")
    with pytest.raises(CandleError, match="multiple of 32"):
        QTensor(blocks, (4, 36), "q4_0")
    with pytest.raises(CandleError, match="unknown GGML type"):
        QTensor(blocks, (2, 64), "q4_9")
    q = QTensor(blocks, (2, 64), "q4_0")
    with pytest.raises(CandleError, match="input features"):
        q.matmul_t(from_numpy(np.zeros((1, 32), np.float32)).to_device(device))
    with pytest.raises(CandleError, match="packed layout"):
        apply(QPACK, QTensor.quantize(np.zeros((2, 256), np.float32), "q6k").blocks.to_device(device), qtype=14, n=2)
