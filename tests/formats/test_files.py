"""What every format plugin does with the file itself, whatever its format:
paths that are not regular files (a FIFO would block forever) or hold a NUL,
files read into memory with ``mmap=False`` that another program then
truncates, file descriptors (none kept by a loaded npz, nor by an exception
kept from one), and the temporary files of writers killed during a save."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import FormatError
from candle_api.io import formats
from candle_api.quantized import QTensor

TORCH = Path(__file__).parent / "fixtures" / "torch"
#: (format, file name) of every reader, sharded indexes included
READERS = [("safetensors", "w.safetensors"), ("safetensors", "model.safetensors.index.json"), ("npy", "w.npy"),
           ("npz", "w.npz"), ("gguf", "w.gguf"), ("ggml", "w.ggml"), ("pytorch", "w.pt"),
           ("pytorch", "pytorch_model.bin.index.json"), ("onnx", "m.onnx")]


def reader(name: str):
    return next(spec.load for spec, _ in formats() if spec.name == name and spec.load is not None)


def outcome_within(fn, fifo: Path, seconds: float = 5):
    """What ``fn()`` raised (None if nothing); fails the test when it blocks,
    after unblocking the FIFO so that no thread is left hanging."""
    result = []

    def run():
        try:
            fn()
            result.append(None)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            result.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    blocked = worker.is_alive()
    for _ in range(100):  # a reader blocked in open() returns once a writer opens the FIFO
        if not worker.is_alive():
            break
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting yet
        worker.join(0.1)
    if blocked:
        pytest.fail(f"loading {fifo.name} blocked on a FIFO")
    return result[0]


# ---- paths that are not regular files --------------------------------------------------------------
@pytest.mark.parametrize("fmt, name", READERS)
def test_a_fifo_is_refused_not_waited_on(tmp_path, fmt, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    for call in (lambda: c.load(fifo), lambda: c.load(fifo, format=fmt), lambda: reader(fmt)(fifo)):
        error = outcome_within(call, fifo)
        assert isinstance(error, FormatError) and "a FIFO, not a regular file" in str(error), error


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(FormatError, match="a directory, not a regular file"):
        c.load(tmp_path)
    with pytest.raises(FormatError, match="a directory, not a regular file"):
        c.load(tmp_path, format="npz")


@pytest.mark.parametrize("fmt, name", READERS)
def test_a_nul_in_the_path_is_a_format_error(tmp_path, fmt, name):
    path = str(tmp_path / name.replace(".", "\0.", 1))
    for call in (lambda: c.load(path), lambda: c.load(path, format=fmt), lambda: reader(fmt)(Path(path))):
        with pytest.raises(FormatError, match="cannot open: embedded null byte"):
            call()


# ---- mmap=False ----------------------------------------------------------------------------------------
def saved(tmp_path: Path, name: str) -> tuple[Path, dict]:
    """A file written by candle-api and the arrays it holds."""
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.arange(5, dtype=np.int64)}
    if name.endswith(".npy"):
        arrays = {"arr_0": arrays["a"]}
    elif name.endswith(".gguf"):
        arrays = {"a": np.arange(64, dtype=np.float32).reshape(2, 32)}
    path = tmp_path / name
    c.save({k: c.from_numpy(v) for k, v in arrays.items()}, path)
    return path, arrays


def torch_fixture(tmp_path: Path, name: str) -> tuple[Path, dict]:
    path = tmp_path / name
    shutil.copy(TORCH / name, path)
    return path, {k: v.numpy().copy() for k, v in c.load(TORCH / name).items()}


FILES = {
    "safetensors": lambda tmp: saved(tmp, "w.safetensors"),
    "npy": lambda tmp: saved(tmp, "w.npy"),
    "npz": lambda tmp: saved(tmp, "w.npz"),
    "gguf": lambda tmp: saved(tmp, "w.gguf"),
    "pytorch zip": lambda tmp: torch_fixture(tmp, "tensors_zip.pt"),
    "pytorch deflated": lambda tmp: torch_fixture(tmp, "renamed_deflated.pt"),
    "pytorch legacy": lambda tmp: torch_fixture(tmp, "tensors_legacy.pt"),
}


def values(t) -> np.ndarray:
    return (t.dequantize() if isinstance(t, QTensor) else t).numpy()


@pytest.mark.parametrize("kind", FILES)
def test_mmap_false_survives_the_file_being_truncated(tmp_path, kind):
    """Another program truncating a mapped file kills the reader with SIGBUS;
    with mmap=False the file is read when loaded and never touched again."""
    path, want = FILES[kind](tmp_path)
    loaded = c.load(path, mmap=False)
    os.truncate(path, 0)
    assert sorted(loaded) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(values(loaded[name]), value, err_msg=name)


def test_mmap_false_reaches_shards(tmp_path):
    shard, want = saved(tmp_path, "s.safetensors")
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"a": "s.safetensors", "b": "s.safetensors"}}')
    loaded = c.load(index, mmap=False)
    loaded["a"]  # the shard is opened, and read whole, on first use
    os.truncate(shard, 0)
    np.testing.assert_array_equal(loaded["b"].numpy(), want["b"])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGBUS is a POSIX signal")
def test_a_truncated_map_is_what_mmap_false_avoids(tmp_path):
    """The hazard itself, in a child process: reading a tensor whose mapped
    pages another program truncated away kills the process with SIGBUS."""
    path = tmp_path / "big.safetensors"
    for options, returncode in (("", -signal.SIGBUS), (", mmap=False", 0)):
        c.save({"w": c.from_numpy(np.ones(1 << 20, np.float32))}, path)
        script = (f"import os, candle_api as c; t = c.load({str(path)!r}{options}); os.truncate({str(path)!r}, 0); "
                  "print(int(t['w'].numpy().sum()))")
        child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, cwd=tmp_path)
        assert child.returncode == returncode, child.stderr
    assert child.stdout.strip() == b"1048576"


# ---- file descriptors -----------------------------------------------------------------------------------
def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_loaded_npz_files_hold_no_descriptor(tmp_path):
    """1,021 loaded .npz files used to exhaust `ulimit -n 1024`: each kept its
    zip open, and so did each exception kept from reading one."""
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, a=np.arange(3.0), b=np.arange(4.0))
    np.savez(bad, a=np.arange(3.0))
    raw = bytearray(bad.read_bytes())
    raw[raw.rindex(b"PK\x01\x02") - 1] ^= 0xFF  # the last data byte: the CRC fails
    bad.write_bytes(raw)
    before = open_descriptors()
    kept, errors = [], []
    for _ in range(300):
        loaded = c.load(good)
        loaded["a"]
        kept.append(loaded)
        try:
            c.load(bad)["a"]
        except FormatError as exc:
            errors.append(exc)
    assert len(errors) == 300 and "CRC" in str(errors[0])
    assert open_descriptors() <= before + 1
    assert [t["b"].numpy().tolist() for t in kept[:2]] == [[0, 1, 2, 3]] * 2


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
@pytest.mark.parametrize("kind", FILES)
def test_mmap_false_holds_no_descriptor(tmp_path, kind):
    """A map holds a descriptor before Python 3.13 (mmap duplicates it); a file read into memory never does."""
    path, _ = FILES[kind](tmp_path)
    before = open_descriptors()
    kept = [c.load(path, mmap=False) for _ in range(50)]
    for loaded in kept:
        [values(t) for t in loaded.values()]
    assert open_descriptors() <= before + 1


# ---- temporary files of killed writers ---------------------------------------------------------------------
def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("name", ["w.safetensors", "w.npz", "w.npy", "w.gguf"])
def test_save_removes_temporaries_of_dead_writers(tmp_path, name):
    """A writer killed during a save leaves its temporary file (the target
    stays whole); the next save of that path removes it, never one of a live
    writer, nor one of another path."""
    pid = dead_pid()
    dead = tmp_path / f".{name}.{pid}.0123abcd.tmp"
    live = tmp_path / f".{name}.{os.getpid()}.89abcdef.tmp"
    other = tmp_path / f".x{name}.{pid}.0123abcd.tmp"
    for tmp in (dead, live, other):
        tmp.write_bytes(b"half a file")
    c.save({"arr_0": c.ones((2, 32))}, tmp_path / name)
    assert not dead.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, live.name, other.name])


def test_a_killed_save_leaves_the_target_whole(tmp_path):
    """SIGKILL in the middle of a save: the old file is intact, and the
    temporary left behind is removed by the next save."""
    path = tmp_path / "w.safetensors"
    c.save({"w": c.zeros(4)}, path)
    script = ("import os, signal, candle_api as c\n"
              "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed once the data is written\n"
              f"c.save({{'w': c.ones(1 << 20)}}, {str(path)!r})\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr
    assert len(list(tmp_path.glob(".w.safetensors.*.tmp"))) == 1
    assert c.load(path)["w"].numpy().tolist() == [0, 0, 0, 0]
    c.save({"w": c.ones(2)}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]


def test_zip_members_changed_since_opening_fail_their_check(tmp_path):
    """npz members are read from the file when accessed: one replaced since
    the file was opened fails its CRC check instead of loading other data."""
    path = tmp_path / "w.npz"
    np.savez(path, a=np.arange(4.0))
    loaded = c.load(path)
    with zipfile.ZipFile(path, "w") as zf:  # same layout, other values
        with zf.open("a.npy", "w") as member:
            np.lib.format.write_array(member, np.arange(4.0) + 1)
    with pytest.raises(FormatError, match="CRC"):
        loaded["a"]
