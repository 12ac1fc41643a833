"""Timing helpers shared by the benchmark scripts.

Variants are interleaved within every repetition (so drift and noise from other
processes hit all of them alike) and the median per call is reported with its
spread. Import this before numpy: it pins the BLAS thread pools to
BENCH_THREADS (default 2) so thread counts can be set later at run time.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

THREADS = os.environ.get("BENCH_THREADS", "2")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, THREADS)


def calibrate(fn, target: float = 0.05) -> int:
    """How many calls make one repetition last about `target` seconds."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= target / 4 or n >= 1 << 24:
            return max(1, int(n * target / max(dt, 1e-9)))
        n *= 4


def interleaved(variants: dict, reps: int = 9, target: float = 0.05, pause: float = 0.0) -> dict:
    """{name: [seconds per call, one per repetition]} with variants interleaved.
    ``pause`` seconds before each block let the previous variant's spinning
    thread pool go to sleep (libraries whose workers spin between calls would
    otherwise take cores from the next one)."""
    numbers = {name: calibrate(fn, target) for name, fn in variants.items()}
    out = {name: [] for name in variants}
    for _ in range(reps):
        for name, fn in variants.items():
            time.sleep(pause)
            n = numbers[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out[name].append((time.perf_counter() - t0) / n)
    return out


def median(xs) -> float:
    return statistics.median(xs)


def spread(xs) -> float:
    """(max - min) / median, in percent: a rough noise indicator."""
    m = statistics.median(xs)
    return 100.0 * (max(xs) - min(xs)) / m if m else 0.0


def header(name: str) -> None:
    print(f"# {name}: python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M:%S')}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
