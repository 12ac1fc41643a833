"""The families of cases. Each module defines ``make(rng, index, tmp) -> Case``:
the case number ``index`` of the family, drawn from ``rng`` (seeded from the
family, the run's seed and the index), with ``tmp`` an empty folder of its own."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..harness import Job


@dataclass(frozen=True)
class Family:
    name: str
    quick: int        # cases in --quick (0: only run when named with --only)
    long: int         # cases in --long
    timeout: float    # seconds a case may take before its worker's process group is killed
    about: str


FAMILIES = {f.name: f for f in [
    Family("formats", 3000, 200_000, 20, "structure-aware mutants of every format, loaded and read in full"),
    Family("pickles", 300, 5_000, 20, "hostile pickles: code execution, algorithmic complexity, huge lengths"),
    Family("readonly", 1000, 50_000, 20, "every in-place writer against read-only memory"),
    Family("tensor_api", 3000, 300_000, 20, "the Tensor API against NumPy on random shapes, dtypes and views"),
    Family("quantized", 600, 60_000, 20, "GGML-quantized tensors on the cpu kernels: hostile blocks, quantize, bad "
                                          "input, against the NumPy codecs"),
    Family("cli", 24, 600, 90, "candle info / embed / generate with hostile arguments"),
    Family("save", 60, 2_000, 60, "faults during save: full disk, SIGKILL, concurrent writers"),
    Family("selftest", 0, 0, 3, "the harness's own check: a crash, a hang and a memory hog among passing cases"),
]}
#: the families a run without --only covers
DEFAULT = [name for name, family in FAMILIES.items() if family.quick]


def module(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def plan(families: list[str], seed: int, mode: str = "quick", count: int | None = None, case: int | None = None,
         timeout_scale: float = 1.0) -> list[Job]:
    """The jobs of a run: ``count`` cases of each family (default: the mode's),
    or the one ``case``; the slowest families first, so that no worker is left
    with a long tail of them at the end."""
    jobs = []
    for name in sorted(families, key=lambda n: -FAMILIES[n].timeout):
        family = FAMILIES[name]
        indices = [case] if case is not None else range(count if count is not None else getattr(family, mode))
        jobs += [Job(name, seed, i, family.timeout * timeout_scale) for i in indices]
    return jobs
