"""The cases of cpu_vs_numpy.py through pytest-benchmark, with 1 and 2 threads.

    pip install pytest-benchmark threadpoolctl
    pytest benchmarks/test_cpu_vs_numpy.py --benchmark-group-by=group

Each case is measured for candle-api and for NumPy; the session ends with the
ratio of every pair and whether it meets the issue's target (see
benchmarks/conftest.py). BLAS threads are limited with threadpoolctl."""

from __future__ import annotations

import time

import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")

import numpy as np  # noqa: E402

import candle_api as c  # noqa: E402
import cpu_vs_numpy  # noqa: E402

QUICK = False
NAMES = [case["name"] for case in cpu_vs_numpy.cases(QUICK)]


@pytest.fixture(scope="module")
def cases() -> dict:
    return {case["name"]: case for case in cpu_vs_numpy.cases(QUICK)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("impl", ["candle", "numpy"])
@pytest.mark.parametrize("name", NAMES)
def test_case(benchmark, bench_results, cases, name, impl, threads):
    case = cases[name]
    previous = c.utils.get_num_threads()
    c.utils.set_num_threads(threads)
    try:
        with threadpoolctl.threadpool_limits(threads):
            time.sleep(0.2)  # park the other library's spinning threads
            benchmark.group = f"{name} [{threads}T]"
            result = np.asarray(benchmark(case[impl]), dtype=np.float64)
    finally:
        c.utils.set_num_threads(previous)
    entry = bench_results.setdefault((name, threads), {"target": case.get("target")})
    entry[impl] = benchmark.stats.stats.median
    # a speed compared is only worth something if both compute the same thing
    other = np.asarray(case["numpy" if impl == "candle" else "candle"](), dtype=np.float64)
    tol = case.get("tol", 1e-3)  # bf16 results are rounded to 8 bits
    np.testing.assert_allclose(result, other, rtol=tol, atol=tol * float(np.abs(other).max()))
