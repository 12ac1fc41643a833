"""Faults during save: a full disk (RLIMIT_FSIZE), a writer killed with
SIGKILL in the middle, several writers at once, overwriting the file the
saved tensor is mapped from, and targets that are not files. Afterwards the
target must be the old complete file or a new complete one (it loads and
equals one of the payloads written), never a torn file; a save that fails
must raise a candle error and leave no temporary file behind; a tensor mapped
from the old file must keep its values.

Writers killed or racing run in child processes (a fresh interpreter each);
a payload is rebuilt from its seed, so the case knows every possible content."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np

import candle_api as c
from candle_api.errors import CandleError

from ..case import Case, pick

FORMATS = ["safetensors", "npy", "npz", "gguf"]
WRITER = """
import sys
from tests.fuzz.cases.save import payload
import candle_api as c
path, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = c.from_numpy(payload(seed, n))
print("saving", flush=True)
c.save({"w": t}, path)
"""


def payload(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n, dtype=np.float32)


def read_back(path) -> np.ndarray:
    """The one tensor of a file written by save, as f32 values."""
    t = next(iter(c.load(path).values()))
    return (t.dequantize() if hasattr(t, "dequantize") else t).numpy().copy()


def one_of(path, payloads: dict) -> None:
    """The target is absent (a None payload: there was no file) or equals one of them in full."""
    if not path.exists():
        assert any(p is None for p in payloads.values()), f"{path.name} is gone, and a complete file was there before"
        return
    try:
        got = read_back(path)
    except CandleError as exc:
        raise AssertionError(f"{path.name} is torn: {exc}") from None
    assert any(p is not None and got.shape == p.shape and np.array_equal(got, p) for p in payloads.values()), \
        f"{path.name} holds {got.size} values that are none of the payloads {sorted(k for k in payloads if k)}: torn"


def no_leftovers(folder, target) -> None:
    extra = sorted(p.name for p in folder.iterdir() if p.name != target.name)
    assert not extra, f"temporary files left behind: {extra[:3]}"


def full_disk(rng, folder, target, old):
    """save() under a file-size limit smaller than the new file."""
    new = payload(int(rng.integers(1 << 30)), int(rng.integers(1, 1 << 14)))
    limit = int(rng.integers(0, new.nbytes))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def run():
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            c.save({"w": c.from_numpy(new)}, target)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        raise AssertionError(f"save returned normally though its {new.nbytes} bytes of data exceed a {limit}-byte "
                             "file-size limit")

    def check():
        one_of(target, {"old": old})
        no_leftovers(folder, target)

    return f"{new.nbytes} bytes under a {limit}-byte limit", run, check


def writers(rng, folder, target, old):
    """Two to four writers at once, some killed with SIGKILL right after they start writing."""
    jobs = [(int(rng.integers(1 << 30)), int(rng.integers(1, 4 << 20))) for _ in range(int(rng.integers(1, 5)))]
    kills = [bool(rng.random() < 0.5) for _ in jobs]
    delays = [float(rng.uniform(0, 0.05)) for _ in jobs]

    def run():
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(seed), str(n)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for seed, n in jobs]
        for proc, kill, delay in zip(procs, kills, delays):
            proc.stdout.readline()  # "saving": the write begins
            if kill:
                time.sleep(delay)
                proc.kill()
        for proc, kill in zip(procs, kills):
            proc.wait()
            err = proc.stderr.read().decode(errors="replace")
            proc.stdout.close()
            proc.stderr.close()
            assert kill or proc.returncode == 0, f"a writer failed: {err.strip().splitlines()[-1:]}"
        return "saved"

    def check():
        one_of(target, {"old": old, **{f"writer {i}": payload(s, n) for i, (s, n) in enumerate(jobs)}})

    killed = sum(kills)
    return f"{len(jobs)} writers ({killed} killed) of up to {max(n for _, n in jobs) * 4 >> 10} KiB", run, check


def overwrite_mapped(rng, folder, target, old):
    """Save over the file a tensor is mapped from, maybe saving that very tensor."""
    if old is None:
        c.save({"w": c.from_numpy(payload(1, 1000))}, target)
        old = payload(1, 1000)
    mapped = next(iter(c.load(target).values()))
    mapped = mapped.dequantize() if hasattr(mapped, "dequantize") else mapped
    itself = bool(rng.random() < 0.5)

    def run():
        c.save({"w": mapped if itself else mapped * 2}, target)
        assert np.array_equal(mapped.numpy(), old), "the tensor mapped from the old file changed"
        assert np.array_equal(read_back(target), old if itself else old * 2), "the new file holds other values"
        return "saved"

    def check():
        no_leftovers(folder, target)

    return "the saved tensor itself" if itself else "a tensor computed from it", run, check


def bad_target(rng, folder, target, old):
    """A target that is a folder, a FIFO, or in a folder that does not exist."""
    kind = pick(rng, ["folder", "fifo", "missing folder"])
    if kind == "folder":
        target.unlink(missing_ok=True)
        target.mkdir()
    elif kind == "fifo":
        target.unlink(missing_ok=True)
        os.mkfifo(target)
    else:
        target = folder / "missing" / target.name

    def run():
        c.save({"w": c.from_numpy(payload(2, 100))}, target)
        return "saved"

    def check():
        assert kind == "missing folder" or target.exists(), f"the {kind} at the target is gone"
        if kind == "fifo" and target.is_file():
            assert np.array_equal(read_back(target), payload(2, 100)), "the file written holds other values"

    return kind, run, check


FAULTS = {"full disk": full_disk, "writers": writers, "overwrite mapped": overwrite_mapped, "bad target": bad_target}


def make(rng, index, tmp) -> Case:
    fault = list(FAULTS)[index % len(FAULTS)]
    fmt = pick(rng, FORMATS)
    folder = tmp / "out"
    folder.mkdir()
    target = folder / f"model.{fmt}"
    old = None
    if rng.random() < 0.7:
        old = payload(int(rng.integers(1 << 30)), int(rng.integers(1, 1 << 12)))
        c.save({"w": c.from_numpy(old)}, target)
    what, run, check = FAULTS[fault](rng, folder, target, old)
    return Case(f"{fault}: {fmt}, {what}", run, (CandleError,), check)
