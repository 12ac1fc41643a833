"""The .pt writer: torch.save's zip format, read back by candle-api's own
reader (PyTorch's torch.load(weights_only=True) is checked by
tests/formats/fixtures/check_pt_writer_with_torch.py, outside the tests)."""

from __future__ import annotations

import pickletools
import zipfile

import numpy as np
import pytest

import candle_api as c
from candle_api.testing.opinfo import values

DTYPES = ["f32", "f64", "f16", "bf16", "i64", "i32", "i16", "u32", "u8", "bool"]
#: every global a torch weights-only unpickler must resolve for our files
ALLOWED = {"torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_tensor_v3", "collections OrderedDict",
           "torch.storage UntypedStorage", "torch uint32"} | {
    f"torch {kind}Storage" for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Byte", "Bool")}


def _tensors(rng) -> dict:
    out = {f"t.{d}": c.tensor(values(rng, d, (3, 4))) for d in DTYPES}
    out["views.transposed"] = out["t.f32"].t()
    out["views.sliced"] = out["t.i64"][:, 1::2]
    out["views.broadcast"] = out["t.f16"][:1].broadcast_as((3, 4))
    out["empty"], out["scalar"], out["ünïcode"] = c.zeros((0, 5)), c.Tensor(1.5), c.Tensor([True])
    return out


def test_every_dtype_and_layout_round_trips(tmp_path):
    tensors = _tensors(np.random.default_rng(0))
    c.save(tensors, tmp_path / "x.pt")
    back = c.load(tmp_path / "x.pt")
    assert sorted(back) == sorted(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape, name
        np.testing.assert_array_equal(back[name].numpy(), t.numpy(), err_msg=name)


def test_the_archive_is_torch_saves(tmp_path):
    c.save(_tensors(np.random.default_rng(1)), tmp_path / "x.pth")
    with open(tmp_path / "x.pth", "rb") as f, zipfile.ZipFile(f) as zf:
        names = [i.filename for i in zf.infolist()]
        assert names[0] == "archive/data.pkl" and zf.read("archive/byteorder") == b"little"
        assert zf.read("archive/version") == b"3\n" and {i.compress_type for i in zf.infolist()} == {0}
        for info in zf.infolist():
            if info.filename.startswith("archive/data/"):
                f.seek(info.header_offset + 26)
                name_len, extra_len = np.frombuffer(f.read(4), "<u2")
                assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0, info.filename
        ops = list(pickletools.genops(zf.read("archive/data.pkl")))
    assert {arg for op, arg, _ in ops if op.name == "GLOBAL"} <= ALLOWED
    assert {op.name for op in (o for o, _, _ in ops)} <= {
        "PROTO", "EMPTY_DICT", "MARK", "BINUNICODE", "GLOBAL", "TUPLE", "BINPERSID", "BININT1", "BININT", "LONG1",
        "NEWFALSE", "EMPTY_TUPLE", "REDUCE", "SETITEMS", "STOP"}


def test_large_dicts_and_ints(tmp_path):
    tensors = {f"layer.{i}": c.Tensor([float(i)]) for i in range(2500)}  # several SETITEMS batches
    tensors["wide"] = c.zeros((1, 70000))  # a stride past BININT1 and BININT2
    c.save(tensors, tmp_path / "x.bin")
    back = c.load(tmp_path / "x.bin")
    assert len(back) == 2501 and back["layer.2499"].values() == [2499.0] and back["wide"].shape == (1, 70000)


def test_refusals_leave_no_file(tmp_path):
    with pytest.raises(ValueError, match="no metadata"):
        c.save({"w": c.zeros(2)}, tmp_path / "x.pt", {"step": "1"})
    with pytest.raises(TypeError, match="not a candle_api.Tensor"):
        c.save({"w": np.zeros(2)}, tmp_path / "x.pt")
    assert not list(tmp_path.iterdir())
