"""The npy/npz plugin: interop with numpy both ways, every numeric dtype, C
and Fortran order, big-endian input, zero-copy .npy, lazy .npz members, and
hostile files (hand-made and fuzzed) that must give FormatError and nothing
else. Pickles are never loaded."""

import io
import struct
import time
import zipfile

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import DTypeError, FormatError
from candle_formats import npz

# numpy dtype in a file -> numpy dtype of the candle-api tensor read back
DTYPE_RULE = {
    "|b1": np.bool_, "|u1": np.uint8, "|i1": np.int16, "<u2": np.uint32, "<i2": np.int16, "<u4": np.uint32,
    "<i4": np.int32, "<u8": np.int64, "<i8": np.int64, "<f2": np.float16, "<f4": np.float32, "<f8": np.float64,
}
BIG_ENDIAN = [">u2", ">i2", ">u4", ">i4", ">u8", ">i8", ">f2", ">f4", ">f8"]


def sample(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        top = min(info.max, np.iinfo(np.int64).max)  # u64 values beyond i64 are refused
        return rng.integers(info.min, top, shape, endpoint=True).astype(dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def same(tensor, want: np.ndarray):
    """Same values, shape and dtype per the widening rule (big-endian made native)."""
    got = tensor.numpy()
    target = np.dtype(DTYPE_RULE[want.dtype.newbyteorder("<").str if want.dtype.byteorder == ">" else want.dtype.str])
    assert got.dtype == target and got.shape == want.shape, (got.dtype, got.shape, target, want.shape)
    np.testing.assert_array_equal(got, want.astype(target))


def cases(rng):
    """name -> array: every dtype in C and Fortran order, big-endian, 0-d and empty."""
    out = {}
    for i, dtype in enumerate(list(DTYPE_RULE) + BIG_ENDIAN):
        arr = sample(rng, dtype, (3, 4, 2))
        out[f"c.{i}"] = arr
        out[f"f.{i}"] = np.asfortranarray(arr)
    out["scalar"] = np.float64(3.25).reshape(())
    out["empty"] = np.zeros((0, 5), np.int32)
    out["empty.f"] = np.zeros((4, 0), np.float32, order="F")
    return out


# ---- interop ---------------------------------------------------------------------------------------
def test_numpy_npy_files_load_identically(tmp_path):
    for name, arr in cases(np.random.default_rng(0)).items():
        path = tmp_path / f"{name}.npy"
        np.save(path, arr)
        loaded = c.load(path)
        assert loaded.format == "npy" and list(loaded) == ["arr_0"] and loaded.metadata == {}
        same(loaded["arr_0"], arr)
        if arr.dtype.isnative and arr.ndim > 1 and arr.size and arr.flags.f_contiguous:
            assert loaded["arr_0"].is_fortran_contiguous()


@pytest.mark.parametrize("writer", [np.savez, np.savez_compressed])
def test_numpy_npz_files_load_identically(tmp_path, writer):
    arrays = cases(np.random.default_rng(1))
    arrays["nested/name.with.dots"] = np.arange(4, dtype=np.int16)
    path = tmp_path / "arrays.npz"
    writer(path, **arrays)
    loaded = c.load(path)
    assert loaded.format == "npz" and sorted(loaded) == sorted(arrays)
    for name, arr in arrays.items():
        same(loaded[name], arr)


def test_candle_files_load_in_numpy(tmp_path):
    rng = np.random.default_rng(2)
    tensors = {}
    for dtype in ("u8", "u32", "i16", "i32", "i64", "f16", "f32", "f64"):
        base = c.from_numpy(sample(rng, c.get_dtype(dtype).np, (5, 6)))
        tensors.update({f"{dtype}": base, f"{dtype}.t": base.t(), f"{dtype}.sliced": base[1:4, ::3],
                        f"{dtype}.scalar": base[2, 3]})
    c.save(tensors, tmp_path / "all.npz")
    with np.load(tmp_path / "all.npz", allow_pickle=False) as got:
        assert sorted(got.files) == sorted(tensors)
        for name, t in tensors.items():
            assert got[name].dtype == t.dtype.np
            np.testing.assert_array_equal(got[name], t.numpy())
    for name in ("f32.t", "i64.sliced", "u8.scalar"):
        c.save({name: tensors[name]}, tmp_path / f"{name}.npy")
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy", allow_pickle=False), tensors[name].numpy())
    back = c.load(tmp_path / "all.npz")
    for name, t in tensors.items():
        np.testing.assert_array_equal(back[name].numpy(), t.numpy())


def test_save_errors(tmp_path):
    with pytest.raises(DTypeError, match="bf16"):
        c.save({"x": c.ones(2, dtype="bf16")}, tmp_path / "x.npz")
    with pytest.raises(ValueError, match="holds one tensor, got 2"):
        c.save({"a": c.ones(2), "b": c.ones(2)}, tmp_path / "x.npy")
    with pytest.raises(ValueError, match="store no metadata"):
        c.save({"a": c.ones(2)}, tmp_path / "x.npz", {"k": "v"})
    with pytest.raises(TypeError, match="not a candle_api.Tensor"):
        c.save({"a": [1, 2]}, tmp_path / "x.npz")
    assert not list(tmp_path.iterdir()), "a failed save leaves no file behind"


# ---- zero copy and laziness ---------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_tensors_are_views_of_the_file(tmp_path, order):
    """A write to the file shows in the loaded tensor, Fortran order included."""
    arr = np.zeros((64, 32), np.float32, order=order)
    path = tmp_path / "v.npy"
    np.save(path, arr)
    t = c.load(path)["arr_0"]
    data_offset = path.stat().st_size - arr.nbytes
    with open(path, "r+b") as f:
        f.seek(data_offset + 4 * 5)  # the 6th element in file order
        f.write(np.float32(7.0).tobytes())
    want = np.zeros(arr.size, np.float32)
    want[5] = 7.0
    np.testing.assert_array_equal(t.numpy(), want.reshape(arr.shape, order=order))


def member_data_offset(raw: bytes, info: zipfile.ZipInfo) -> int:
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len


def test_npz_members_are_read_when_accessed(tmp_path):
    """Only the zip directory is read on opening: a member corrupted after
    that fails (its CRC), alone, when its tensor is read."""
    path = tmp_path / "lazy.npz"
    arrays = {"a": np.arange(10.0), "b": np.arange(20.0), "c": np.arange(30.0)}
    np.savez(path, **arrays)
    loaded = c.load(path)
    raw = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).getinfo("b.npy")
    raw[member_data_offset(raw, info) + info.file_size - 1] ^= 0xFF  # the last data byte
    path.write_bytes(raw)
    np.testing.assert_array_equal(loaded["a"].numpy(), arrays["a"])
    np.testing.assert_array_equal(loaded["c"].numpy(), arrays["c"])
    with pytest.raises(FormatError, match="CRC"):
        loaded["b"]


# ---- recognizing files ---------------------------------------------------------------------------------
def zip_bytes(members: dict, compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def npy_bytes(arr) -> bytes:
    out = io.BytesIO()
    np.save(out, arr)
    return out.getvalue()


def test_sniff_claims_only_zips_of_npy(tmp_path):
    npy = npy_bytes(np.ones(2))
    files = {
        "arrays.bin": (zip_bytes({"a.npy": npy, "b.npy": npy}), True),
        "torch.bin": (zip_bytes({"archive/data.pkl": b"\x80\x02}q\x00.", "archive/data/0": b"\0" * 8}), False),
        "mixed.bin": (zip_bytes({"a.npy": npy, "notes.txt": b"hi"}), False),
        "empty.bin": (zip_bytes({}), False),
        "broken.bin": (b"PK\x03\x04" + bytes(40), False),
    }
    for name, (raw, claimed) in files.items():
        path = tmp_path / name
        path.write_bytes(raw)
        assert npz.sniff_npz(raw[:4096], path) is claimed, name
    assert c.load(tmp_path / "arrays.bin").format == "npz"
    assert npz.sniff_npy(npy, tmp_path) and not npz.sniff_npy(b"PK\x03\x04", tmp_path)


# ---- hostile files -----------------------------------------------------------------------------------
def npy_raw(header: str, data: bytes = b"", version=(1, 0)) -> bytes:
    """An npy file with the header text as given (the length field matching)."""
    text = header.encode("latin1")
    length = struct.pack("<H" if version == (1, 0) else "<I", len(text))
    return b"\x93NUMPY" + bytes(version) + length + text + data


def header(descr="'<f4'", fortran="False", shape="(2,)") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}\n"


HOSTILE_NPY = [
    (b"", "expected 8 bytes"),
    (b"\x93NUMPX\x01\x00", "bad magic"),
    (b"\x93NUMPY\x04\x00\x00\x00", "unsupported npy version 4.0"),
    (b"\x93NUMPY\x01\x00\x10", "npy header length: expected 2 bytes"),
    (b"\x93NUMPY\x02\x00\xff\xff\xff\xff", "exceeds the 10000-byte limit"),
    (b"\x93NUMPY\x01\x00\x00\x01{", "runs past the 11 bytes"),
    (npy_raw(header(), bytes(4)), "needs 8 bytes but 4 follow the header"),
    (npy_raw(header(descr="'|O'"), bytes(16)), "dtype object has no candle-api equivalent"),
    (npy_raw(header(descr="'<c8'"), bytes(16)), "complex64 has no candle-api equivalent"),
    (npy_raw(header(descr="'<U3'"), bytes(24)), "has no candle-api equivalent"),
    (npy_raw(header(descr="[('a', '<f4'), ('b', '<i4')]"), bytes(16)), "has no candle-api equivalent"),
    (npy_raw(header(descr="'(2,3)<f4'"), bytes(48)), "has no candle-api equivalent"),
    (npy_raw(header(descr="'<M8[s]'"), bytes(16)), "has no candle-api equivalent"),
    (npy_raw(header(descr="'<f16'"), bytes(32)), "has no candle-api equivalent"),
    (npy_raw(header(descr="'<q7'"), bytes(8)), "bad npy header"),
    (npy_raw(header(descr="7"), bytes(8)), "bad npy header"),
    (npy_raw(header(fortran="1"), bytes(8)), "bad npy header"),
    (npy_raw(header(shape="(-2,)"), bytes(8)), "non-negative ints"),
    (npy_raw(header(shape="(2.0,)"), bytes(8)), "bad npy header"),
    (npy_raw(header(shape="(" + "1," * 33 + ")"), bytes(4)), "at most 32"),
    (npy_raw(header(shape="(1180591620717411303424, 0)")), "too large for any array"),
    (npy_raw(header(shape="(4611686018427387904,)"), bytes(8)), "too large for any array"),
    (npy_raw(header(shape="(1048576, 1048576)"), bytes(8)), "needs 4398046511104 bytes but 8 follow"),
    (npy_raw("{'descr': '<f4', 'shape': (2,)}", bytes(8)), "bad npy header"),
    (npy_raw("[1, 2]", bytes(8)), "bad npy header"),
    (npy_raw("{'descr': " + "[" * 3000, bytes(8)), "bad npy header"),
    (npy_raw("[" * 200 + "descr': '<f4'", bytes(8)), "bad npy header"),  # the parser's MemoryError
    (npy_raw("{'descr': __import__('os').system('true')}", bytes(8)), "bad npy header"),
    (npy_raw("{'descr': '<f4', 'shape': (", bytes(8)), "EOF in multi-line statement"),
    (npy_raw(header(descr="'|i1'", shape="(4611686018427387904, 0)")), "too large for any array"),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # numpy's warning for headers written by Python 2
@pytest.mark.parametrize("raw, reason", HOSTILE_NPY)
def test_hostile_npy(tmp_path, raw, reason):
    path = tmp_path / "bad.npy"
    path.write_bytes(raw)
    with pytest.raises(FormatError, match=reason) as info:
        dict(c.load(path, format="npy"))
    assert str(path) in str(info.value) and info.value.offset is not None


def test_pickled_object_arrays_are_refused_not_run(tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(FormatError, match="object has no candle-api equivalent"):
        c.load(path)
    np.savez(tmp_path / "objects.npz", ok=np.ones(2), bad=np.array([1, "x"], dtype=object))
    loaded = c.load(tmp_path / "objects.npz")
    assert loaded["ok"].values() == [1.0, 1.0]
    with pytest.raises(FormatError, match="object has no candle-api equivalent"):
        loaded["bad"]


def patched(raw: bytes, signature: bytes, field: int, fmt: str, value) -> bytes:
    """raw with a field of every zip record starting with ``signature`` set to value."""
    out = bytearray(raw)
    pos = out.find(signature)
    while pos >= 0:
        struct.pack_into(fmt, out, pos + field, value)
        pos = out.find(signature, pos + 4)
    return bytes(out)


CENTRAL, LOCAL = b"PK\x01\x02", b"PK\x03\x04"


def hostile_npz():
    npy = npy_bytes(np.arange(6, dtype=np.float32))
    stored, deflated = zip_bytes({"a.npy": npy}), zip_bytes({"a.npy": npy}, zipfile.ZIP_DEFLATED)
    return [
        (zip_bytes({"a.npy": npy, "x.txt": b""}), "member 'x.txt' is not an .npy array"),
        (zip_bytes({"a.npy": npy}, zipfile.ZIP_BZIP2), "compression method 12 is not stored or deflated"),
        (patched(stored, CENTRAL, 8, "<H", 1), "is encrypted"),
        (patched(stored, CENTRAL, 24, "<I", 10**9), "claims 1000000000 bytes from"),
        (patched(deflated, CENTRAL, 24, "<I", 2**32 - 2), "claims 4294967294 bytes from"),
        (patched(stored, CENTRAL, 20, "<I", 10**6), "run past the end"),
        (patched(stored, CENTRAL, 42, "<I", 10**6), "run past the end"),
        (patched(stored, LOCAL, 0, "<I", 0), "has no local file header"),
        (zip_bytes({"a.npy": npy[:-4]}), "needs 24 bytes but 20 follow the header"),
        (zip_bytes({"a.npy": b"garbage" * 20}), "not an npy array"),
        (stored[:len(stored) // 2], "not a readable zip archive"),
        (deflated[:40] + bytes(20) + deflated[60:], "member 'a.npy'"),
    ]


@pytest.mark.parametrize("raw, reason", hostile_npz())
def test_hostile_npz(tmp_path, raw, reason):
    path = tmp_path / "bad.npz"
    path.write_bytes(raw)
    with pytest.raises(FormatError, match=reason) as info:
        dict(c.load(path, format="npz"))
    assert str(path) in str(info.value)


# ---- fuzzing --------------------------------------------------------------------------------------------
class Rng:
    def __init__(self, seed):
        self.gen = np.random.default_rng(seed)

    def pick(self, seq):
        return seq[int(self.gen.integers(len(seq)))]

    def num(self, lo, hi=None):
        return int(self.gen.integers(lo, hi)) if hi is not None else int(self.gen.integers(lo))

    def flips(self, raw: bytes, lo: int = 0, hi: int | None = None) -> bytes:
        buf = bytearray(raw)
        hi = len(buf) if hi is None else hi
        if hi <= lo:  # an empty region: anywhere then
            lo, hi = 0, len(buf)
        for _ in range(self.num(1, 9)):
            buf[self.num(lo, hi)] = self.num(256)
        return bytes(buf)


DESCRS = ["'<f4'", "'>f8'", "'|b1'", "'|i1'", "'<u8'", "'|O'", "'<c8'", "'<U3'", "'V8'", "'(2,3)<f4'", "'f4,i4'",
          "[('a', '<f4')]", "[('', '|V4')]", "'<M8[s]'", "'<f16'", "'S0'", "3", "None", "'xx'", "[('a', '<f4', (2,))]",
          "('<f4', (2,))", "{'a': 1}", "'<f4' 'x'"]
SHAPES = ["()", "(0,)", "(3,)", "(-1,)", "(1180591620717411303424,)", "(1.5,)", "(True, 2)", "[2, 3]", "((2,3),)",
          "(" + "1," * 40 + ")", "(4611686018427387904, 0)", "(2, 3)", "(3, 2)", "(10**3,)", "(1 + 2,)"]
ORDERS = ["True", "False", "1", "None", "'yes'"]


def mutated_npy(rng: Rng, raw: bytes) -> bytes:
    """One hostile variant of an npy file."""
    data_offset = 10 + struct.unpack("<H", raw[8:10])[0]
    kind = rng.num(6)
    if kind == 0:  # bytes flipped, in the header or the data
        return rng.flips(raw, *rng.pick([(0, data_offset), (data_offset, len(raw))]))
    if kind == 1:
        return raw[:rng.num(len(raw))]
    if kind == 2:  # the header length field
        value = rng.pick([0, 1, 9, 10, 0x7FFF, 0xFFFF, data_offset - 11, data_offset - 9, len(raw)])
        return raw[:8] + struct.pack("<H", value % 0x10000) + raw[10:]
    if kind == 3:  # header values
        text = header(rng.pick(DESCRS), rng.pick(ORDERS), rng.pick(SHAPES))
        version = rng.pick([(1, 0), (2, 0), (3, 0)])
        return npy_raw(text, raw[data_offset:][:rng.num(64)], version)
    if kind == 4:  # header text spliced with junk
        text = raw[10:data_offset].decode("latin1")
        pos = rng.num(len(text))
        junk = rng.pick(["{", "}", "(", ")", "'", ",", ":", "\\", "\x00", "[" * 200, "L", "\n", "é", "#"])
        return npy_raw(text[:pos] + junk + text[pos + rng.num(3):], raw[data_offset:])
    return raw[:6] + bytes([rng.num(256), rng.num(256)]) + raw[8:]  # the version


def mutated_npz(rng: Rng, raw: bytes, members: dict) -> bytes:
    """One hostile variant of an npz file."""
    kind = rng.num(5)
    if kind == 0:
        return rng.flips(raw)
    if kind == 1:
        return raw[:rng.num(len(raw))]
    if kind == 2:  # a field of the zip records: sizes, offsets, methods, flags, name lengths
        signature, fields = rng.pick([(CENTRAL, [8, 10, 20, 24, 28, 30, 42]), (LOCAL, [6, 8, 18, 22, 26, 28]),
                                      (b"PK\x05\x06", [8, 10, 12, 16, 20])])
        field = rng.pick(fields)
        fmt = "<H" if field in (6, 8, 10, 26, 28, 30) or (signature == b"PK\x05\x06" and field in (8, 10, 20)) \
            else "<I"
        top = 0xFFFF if fmt == "<H" else 0xFFFFFFFF
        value = rng.pick([0, 1, 2, 8, 12, 14, 99, len(raw), len(raw) + 1, top, top - 1, rng.num(top)])
        out = bytearray(raw)
        positions = [i for i in range(len(raw) - 3) if raw[i:i + 4] == signature]
        at = rng.pick(positions) + field if positions else len(out)
        if at + struct.calcsize(fmt) <= len(out):
            struct.pack_into(fmt, out, at, value)
        return bytes(out)
    # a member replaced by a hostile npy, stored or deflated
    name = rng.pick(list(members))
    changed = dict(members, **{name: mutated_npy(rng, members[name])})
    return zip_bytes(changed, rng.pick([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))


def npy_bases(rng) -> list[bytes]:
    arrays = [sample(rng, "<f4", (3, 4)), np.asfortranarray(sample(rng, ">i8", (2, 3))), sample(rng, "|b1", (5,)),
              sample(rng, "<u2", ()), np.zeros((0, 3), "<f2"), sample(rng, "|i1", (2, 2, 2))]
    return [npy_bytes(a) for a in arrays]


def fuzz(tmp_path, name, make, load, cases) -> tuple[dict, list]:
    """Runs ``cases`` hostile files through both sniffers and ``load``, and
    reads every tensor in full: ({"loaded": n, "FormatError": n}, any other
    exception, described)."""
    path = tmp_path / name
    outcomes, failures = {"loaded": 0, "FormatError": 0}, []
    start = time.perf_counter()
    for case in range(cases):
        raw = make(case)
        path.write_bytes(raw)
        try:
            npz.sniff_npy(raw[:4096], path)
            npz.sniff_npz(raw[:4096], path)
            for tensor in load(path).values():
                tensor.numpy().sum()
            outcomes["loaded"] += 1
        except FormatError:
            outcomes["FormatError"] += 1
        except Exception as exc:  # noqa: BLE001 - anything else is the bug this test looks for
            failures.append(f"case {case}: {type(exc).__name__}: {exc}")
    print(f"{name} fuzz: {cases} cases in {time.perf_counter() - start:.1f} s: {outcomes}")
    return outcomes, failures


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning", "ignore::DeprecationWarning")
def test_fuzz_npy(tmp_path):
    """Mutated .npy files either load or raise FormatError (seeded: a failing
    case number reproduces)."""
    rng = Rng(20240612)
    bases = npy_bases(rng.gen)
    outcomes, failures = fuzz(tmp_path, "fuzz.npy", lambda case: mutated_npy(rng, bases[case % len(bases)]),
                              npz.load_npy, 5000)
    assert not failures, "\n".join(failures[:10])
    assert outcomes["FormatError"] > 5000 // 3 and outcomes["loaded"] > 5000 // 20, outcomes


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning", "ignore::DeprecationWarning")
def test_fuzz_npz(tmp_path):
    """Mutated .npz files (zip records and npy members) either load or raise FormatError."""
    rng = Rng(20240613)
    members = {f"{name}.npy": raw for name, raw in zip("abcdef", npy_bases(rng.gen))}
    by_numpy = io.BytesIO()
    np.savez(by_numpy, **{name: np.load(io.BytesIO(raw)) for name, raw in members.items()})  # zip64 records
    bases = [zip_bytes(members), zip_bytes(members, zipfile.ZIP_DEFLATED), by_numpy.getvalue()]

    def make(case):
        return mutated_npz(rng, bases[case % len(bases)], members)

    outcomes, failures = fuzz(tmp_path, "fuzz.npz", make, npz.load_npz, 5000)
    assert not failures, "\n".join(failures[:10])
    assert outcomes["FormatError"] > 5000 // 3 and outcomes["loaded"] > 5000 // 20, outcomes
