"""The native GGML block codecs (cd_quantize / cd_dequantize of the cpu
library): byte for byte the NumPy reference codecs of candle_api.quantized
(which follow ggml's reference code) on seeded inputs of every kind, gguf-py's
bytes for the types it quantizes (tests/fixtures/gguf_quants.npz, from
tests/fixtures/make_gguf_quant_fixtures.py), the same bytes whatever the
thread count, and a clear KernelError for bad arguments."""

import ctypes
from pathlib import Path

import numpy as np
import pytest

from candle_api import utils
from candle_api.errors import KernelError
from candle_api.quantized import GGML_TYPES, dequantize_array, quantize_array
from candle_backend_cpu import library

BLOCK_TYPES = [name for name, t in GGML_TYPES.items() if t.block_size > 1]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gguf_quants.npz"
COLS = 512  # two super-blocks or sixteen blocks per row


@pytest.fixture(scope="module")
def lib():
    return library.load()


def c_quantize(lib, name, x):
    """Rows of x (2-d float32) quantized by the library, as flat uint8 blocks."""
    t = GGML_TYPES[name]
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(t.nbytes(x.size), np.uint8)
    if lib.cd_quantize(t.type_id, x.shape[0], x.shape[1], x.ctypes.data, out.ctypes.data):
        raise library.error()
    return out


def c_dequantize(lib, name, blocks, shape):
    t = GGML_TYPES[name]
    out = np.zeros(shape, np.float32)
    if lib.cd_dequantize(t.type_id, shape[0], shape[1], blocks.ctypes.data, out.ctypes.data):
        raise library.error()
    return out


def assert_same_floats(got, want, what=""):
    """Bit for bit (so -0.0 is not 0.0), except that any NaN matches any NaN:
    how NaN payloads propagate through a * b + c is the compiler's choice."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=what)
    np.testing.assert_array_equal(np.where(nan, 0, got).view(np.uint32), np.where(nan, 0, want).view(np.uint32),
                                  err_msg=what)


def cases(seed):
    """(what, 3 x COLS float32) inputs: distributions, outliers, zero and constant
    blocks, ties, and scales too small or too large for f16."""
    rng = np.random.default_rng(seed)
    shape = (3, COLS)
    normal = rng.standard_normal(shape)
    outliers = normal * np.where(rng.random(shape) < 0.02, 100.0, 1.0)
    zero_blocks = normal.copy()
    zero_blocks[0, :256] = 0      # a whole super-block
    zero_blocks[1, 32:64] = 0     # one block of 32
    zero_blocks[2, ::2] = 0       # every other value
    constant = np.repeat(rng.choice([1.25, -3.0, 0.5, 7.0], (3, COLS // 32)), 32, axis=1)
    constant[2] = 2.0
    yield "normal", normal
    yield "uniform", rng.uniform(-1, 1, shape)
    yield "positive", rng.uniform(0.5, 3.0, shape)
    yield "shifted", rng.standard_normal(shape) + 100
    yield "outliers", outliers
    yield "heavy tails", rng.standard_t(2, shape) * 1e-3
    yield "zeros", np.zeros(shape)
    yield "zero blocks", zero_blocks
    yield "constant blocks", constant
    yield "ties", np.round(rng.uniform(-4, 4, shape) * 4) / 4
    yield "integers", rng.integers(-127, 128, shape).astype(float)
    yield "tiny (subnormal scales)", normal * 1e-38
    yield "subnormal values", normal * 1e-42
    yield "huge (f16 scales overflow)", normal * 1e30


@pytest.mark.parametrize("name", BLOCK_TYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_quantize_matches_numpy_bytes(lib, name, seed):
    for what, x in cases(seed):
        x = x.astype(np.float32)
        np.testing.assert_array_equal(c_quantize(lib, name, x), quantize_array(x, name), err_msg=what)


@pytest.mark.parametrize("name", BLOCK_TYPES)
def test_dequantize_matches_numpy(lib, name):
    """On the blocks of every case, and on random bytes (inf and NaN scales included)."""
    t = GGML_TYPES[name]
    for what, x in cases(2):
        blocks = quantize_array(x.astype(np.float32), name)
        assert_same_floats(c_dequantize(lib, name, blocks, x.shape), dequantize_array(blocks, name, x.shape), what)
    raw = np.random.default_rng(3).integers(0, 256, t.nbytes(8 * COLS), dtype=np.uint8)
    assert_same_floats(c_dequantize(lib, name, raw, (8, COLS)), dequantize_array(raw, name, (8, COLS)), "bytes")


@pytest.mark.parametrize("name", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4"])
def test_quantize_matches_gguf_py(lib, name):
    fixtures = np.load(FIXTURES)
    x, want = fixtures["x"], fixtures[name].reshape(-1)
    np.testing.assert_array_equal(c_quantize(lib, name, x), want)
    np.testing.assert_array_equal(quantize_array(x, name), want)


@pytest.mark.parametrize("name", ["q4_0", "q4k", "iq4_xs"])
def test_bytes_do_not_depend_on_the_thread_count(lib, name):
    x = np.random.default_rng(4).standard_normal((64, 4096)).astype(np.float32)
    before = utils.get_num_threads()
    try:
        utils.set_num_threads(1)
        one = c_quantize(lib, name, x)
        y_one = c_dequantize(lib, name, one, x.shape)
        utils.set_num_threads(3)
        np.testing.assert_array_equal(c_quantize(lib, name, x), one)
        assert_same_floats(c_dequantize(lib, name, one, x.shape), y_one)
    finally:
        utils.set_num_threads(before)


def test_empty_input_is_a_no_op(lib):
    assert lib.cd_quantize(GGML_TYPES["q4k"].type_id, 0, 256, None, None) == 0
    assert lib.cd_dequantize(GGML_TYPES["q4_0"].type_id, 5, 0, None, None) == 0


def call_error(fn, *args):
    assert fn(*args) == -1
    err = library.error()
    assert isinstance(err, KernelError)
    return str(err)


@pytest.mark.parametrize("type_id, named", [(99, "type id 99"), (-1, "type id -1"), (0, "type id 0"),
                                            (30, "type id 30"), (16, "type id 16")])
def test_unknown_or_unsupported_type(lib, type_id, named):
    x, out = np.zeros(32, np.float32), np.zeros(64, np.uint8)
    for fn in (lib.cd_quantize, lib.cd_dequantize):
        msg = call_error(fn, type_id, 1, 32, x.ctypes.data, out.ctypes.data)
        assert named in msg and "q4_0" in msg and "mxfp4" in msg, msg


@pytest.mark.parametrize("name, ncols", [("q4_0", 33), ("q8_0", 16), ("q4k", 128), ("iq4_xs", 300)])
def test_rows_must_be_whole_blocks(lib, name, ncols):
    t = GGML_TYPES[name]
    x, out = np.zeros(4 * ncols, np.float32), np.zeros(8 * ncols, np.uint8)
    msg = call_error(lib.cd_quantize, t.type_id, 4, ncols, x.ctypes.data, out.ctypes.data)
    assert f"{name} stores rows in blocks of {t.block_size} values" in msg and f"{ncols} values per row" in msg, msg
    msg = call_error(lib.cd_dequantize, t.type_id, 4, ncols, out.ctypes.data, x.ctypes.data)
    assert f"not a multiple of {t.block_size}" in msg, msg


@pytest.mark.parametrize("nrows, ncols", [(-1, 32), (2, -32), (-3, -64)])
def test_negative_sizes(lib, nrows, ncols):
    x, out = np.zeros(64, np.float32), np.zeros(64, np.uint8)
    msg = call_error(lib.cd_quantize, GGML_TYPES["q8_0"].type_id, nrows, ncols, x.ctypes.data, out.ctypes.data)
    assert "negative size" in msg, msg


def test_sizes_that_overflow(lib):
    x, out = np.zeros(256, np.float32), np.zeros(256, np.uint8)
    msg = call_error(lib.cd_dequantize, GGML_TYPES["q4k"].type_id, 2**62, 256, out.ctypes.data, x.ctypes.data)
    assert "too large" in msg, msg


def test_null_and_misaligned_buffers(lib):
    t = GGML_TYPES["q4_0"]
    x, out = np.zeros(64 + 1, np.float32), np.zeros(2 * t.type_size + 2, np.uint8)
    assert "NULL buffer" in call_error(lib.cd_quantize, t.type_id, 1, 64, None, out.ctypes.data)
    assert "NULL buffer" in call_error(lib.cd_dequantize, t.type_id, 1, 64, out.ctypes.data, None)
    odd = ctypes.c_void_p(out.ctypes.data + 1)  # q4_0 blocks hold a u16
    msg = call_error(lib.cd_quantize, t.type_id, 1, 64, x.ctypes.data, odd)
    assert "misaligned" in msg and "2-byte" in msg, msg
    msg = call_error(lib.cd_quantize, t.type_id, 1, 64, ctypes.c_void_p(x.ctypes.data + 2), out.ctypes.data)
    assert "misaligned" in msg, msg
