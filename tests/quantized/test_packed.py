"""The packed layout's reference (candle_api.quantized.packed) and QTensor.pack on a file map."""

import mmap
from pathlib import Path

import numpy as np
import pytest

from candle_api.errors import DTypeError, ShapeError
from candle_api.ops.creation import from_numpy
from candle_api.quantized import QTensor, quantize_array
from candle_api.quantized.packed import FIELD_KINDS, GROUP, pack_array, unpack_array


def _blocks(name: str, rows: int, seed: int = 0) -> tuple[np.ndarray, tuple]:
    cols = 256 * 2 if name in ("q4k", "iq4_xs") else 32 * 3
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return quantize_array(x, name), (rows, cols)


@pytest.mark.parametrize("rows", [0, 3, 16, 37])
@pytest.mark.parametrize("name", sorted(FIELD_KINDS))
def test_pack_moves_every_byte_and_unpack_restores_them(name, rows):
    blocks, shape = _blocks(name, rows)
    packed = pack_array(blocks, name, shape)
    assert packed.dtype == np.uint8 and packed.size == blocks.size
    np.testing.assert_array_equal(np.sort(packed), np.sort(blocks)) if FIELD_KINDS[name].get("qh") != "bits" else None
    np.testing.assert_array_equal(unpack_array(packed, name, shape), blocks)
    tail = rows % GROUP  # rows past the last whole group keep their layout, at the end
    row_bytes = blocks.size // max(rows, 1)
    if tail:
        np.testing.assert_array_equal(packed[-tail * row_bytes:], blocks[-tail * row_bytes:])


def test_q4_0_tile_layout():
    """The first tile: the 16 rows' scales, then 4-byte runs of their quants, run j of row r at 64 j + 4 r."""
    blocks, shape = _blocks("q4_0", 16)
    rows = blocks.reshape(16, 3, 18)
    tile = pack_array(blocks, "q4_0", shape)[:16 * 18]
    np.testing.assert_array_equal(tile[:32].reshape(16, 2), rows[:, 0, :2])
    for j in range(4):
        for r in (0, 7, 15):
            np.testing.assert_array_equal(tile[32 + 64 * j + 4 * r:32 + 64 * j + 4 * r + 4], rows[r, 0, 2 + 4 * j:6 + 4 * j])


def test_q5_fifth_bits_are_masks_per_run():
    blocks, shape = _blocks("q5_0", 16, seed=3)
    rows = blocks.reshape(16, 3, 22)
    masks = pack_array(blocks, "q5_0", shape)[32:96].view("<u8")
    qh = rows[:, 0, 2:6].copy().view("<u4")[:, 0]
    for j in range(4):
        for h in range(2):
            for r in (0, 5, 15):
                for i in range(4):
                    assert (int(masks[2 * j + h]) >> (4 * r + i)) & 1 == (int(qh[r]) >> (16 * h + 4 * j + i)) & 1


def test_types_without_a_layout_and_other_shapes_are_refused():
    blocks, _ = _blocks("q4_0", 4)
    with pytest.raises(DTypeError, match="no packed layout"):
        pack_array(quantize_array(np.zeros((1, 256), np.float32), "q6k"), "q6k", (1, 256))
    with pytest.raises(ShapeError, match="2-d"):
        pack_array(blocks, "q4_0", (2, 2, 96))
    with pytest.raises(ShapeError, match="takes"):
        unpack_array(blocks[:-1], "q4_0", (4, 96))


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's maps of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
def test_pack_gives_a_file_maps_pages_back(tmp_path):
    """A weight viewed from a file map packs into memory of its own; the file's pages leave this process's
    resident set (llama.cpp's repacked weights would otherwise cost their size twice), and read again."""
    x = np.random.default_rng(1).standard_normal((4096, 1024)).astype(np.float32)
    blocks = quantize_array(x, "q4_0")
    path = tmp_path / "weights.bin"
    path.write_bytes(blocks.tobytes())
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(buf, np.uint8)
    q = QTensor(view, x.shape, "q4_0")
    assert int(q.data.sum(dtype=np.uint64)) == int(blocks.sum(dtype=np.uint64))  # every page read
    before = _mapped_rss_kb(path)
    assert before >= blocks.nbytes // 1024 - 8
    lhs = from_numpy(x[:2])
    want = q.matmul_t(lhs).numpy()
    if not q.pack():
        pytest.skip("the cpu device has no qpack kernel")
    assert _mapped_rss_kb(path) < 16  # at most the partial pages at the ends
    np.testing.assert_allclose(q.matmul_t(lhs).numpy(), want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(q.data, blocks)  # read from the file again
