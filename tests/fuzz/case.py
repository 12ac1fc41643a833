"""What a fuzz case is, and the seeded generator every case is made from."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from candle_api.errors import CandleError


@dataclass
class Case:
    """One input and what may come of it.

    ``run`` does the work and checks the result against the reference, raising
    AssertionError on a wrong one; it may return a label for the statistics
    ("loaded"...). An exception in ``allowed`` is a correct outcome; anything
    else fails the case. ``check`` runs afterwards whatever the outcome (memory
    unchanged, no sentinel file...)."""

    what: str
    run: Callable[[], str | None]
    allowed: tuple = (CandleError,)
    check: Callable[[], None] | None = None


class Skip(Exception):
    """The case cannot run here (a model package is not installed...)."""


def case_rng(family: str, seed: int, index: int) -> np.random.Generator:
    """Everything a case does derives from this: the same triple, the same case."""
    return np.random.default_rng([zlib.crc32(family.encode()), seed, index])


def pick(rng: np.random.Generator, seq):
    """One element of a sequence (rng.choice would turn a list of tuples into an array)."""
    return seq[int(rng.integers(len(seq)))]


#: Integers that break size and offset arithmetic.
INTERESTING = [0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 255, 256, 2**15, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
               2**48, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -1, -2, -(2**31), -(2**63)]


def interesting_int(rng: np.random.Generator, near: int | None = None) -> int:
    """An integer from INTERESTING, or one off ``near``."""
    if near is not None and rng.random() < 0.3:
        return near + int(pick(rng, [-1, 1, -8, 8, near]))
    return pick(rng, INTERESTING)
