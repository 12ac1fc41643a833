"""Cases that misbehave on purpose, to check the harness: each bad one must
fail alone, with its reproduction, and the cases after it must still run.
Case ``index`` is the entry ``index % len(BEHAVIOURS)``."""

from __future__ import annotations

import ctypes
import os
import subprocess
import time

import numpy as np

from candle_api.errors import ShapeError

from ..case import Case


def _passes():
    return "ok"


def _segfault():
    ctypes.string_at(0)


def _hangs():
    time.sleep(3600)


#: the argument of the child's sleep, which the harness's test looks for after the run
CHILD_SLEEP = "3599.25"


def _hangs_with_a_child():
    """The child must die with the worker's process group."""
    subprocess.Popen(["sleep", CHILD_SLEEP])
    time.sleep(3600)


def _allocates_too_much():
    np.ones(8 << 30, np.uint8)  # twice the default memory limit


def _wrong_exception():
    raise KeyError("not a candle error")


def _allowed_exception():
    raise ShapeError("a documented error")


def _exits():
    os._exit(3)


BEHAVIOURS = {
    "passes": _passes, "segfault": _segfault, "hang": _hangs, "memory hog": _allocates_too_much,
    "wrong exception": _wrong_exception, "allowed exception": _allowed_exception, "exit": _exits,
    "hang with a child": _hangs_with_a_child,
}
#: the behaviours the harness must report as failures
BAD = {"segfault", "hang", "memory hog", "wrong exception", "exit", "hang with a child"}


def make(rng, index, tmp) -> Case:
    name = list(BEHAVIOURS)[index % len(BEHAVIOURS)]
    return Case(f"selftest: {name}", BEHAVIOURS[name])
