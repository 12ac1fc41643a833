"""The standard benchmark cases (candle_api.testing.bench_cases) under
pytest-benchmark, beside the conformance suite and driven the same way: on
every available device, or those of ``--candle-device``, with NumPy (and
PyTorch, when installed) as baseline rows in each case's group::

    pytest --pyargs candle_api.testing.benchmarks --candle-device cpu                 # the --quick cases
    pytest --pyargs candle_api.testing.benchmarks --candle-bench-all --benchmark-only  # every case

With ``--benchmark-disable`` each case runs once, as a test that it runs.
``candle bench`` runs the same cases in a process per backend, interleaved,
for the report with every column.
"""

import importlib.util

import numpy as np
import pytest

from candle_api.testing.bench_cases import runner, standard_cases

pytest.importorskip("pytest_benchmark")

CASES = standard_cases()
BASELINES = ["numpy"] + (["torch"] if importlib.util.find_spec("torch") is not None else [])


def _selected(config):
    return [c for c in CASES if c.quick or config.getoption("candle_bench_all", default=False)]


def pytest_generate_tests(metafunc):
    if "bench_case" in metafunc.fixturenames:
        cases = _selected(metafunc.config)
        metafunc.parametrize("bench_case", cases, ids=[c.name for c in cases])


def _run(benchmark, case, fn):
    if fn is None:
        pytest.skip(f"no {case.group} op there")
    benchmark.group = case.name
    if case.work:
        benchmark.extra_info["gflop"] = case.work / 1e9
    return benchmark(fn)


def _first(out):
    """The result, or the first of several (sort's and topk's values)."""
    return out[0] if isinstance(out, tuple) else out


def _shapes(case, out):
    """(the shape of what a run returned, the shape of NumPy's result for the case, or None where NumPy
    has no such op)."""
    numpy_run = runner(case, "numpy")
    return tuple(_first(out).shape), None if numpy_run is None else np.shape(_first(numpy_run()))


def test_candle(benchmark, candle_device, bench_case):
    got, want = _shapes(bench_case, _run(benchmark, bench_case, runner(bench_case, "candle", candle_device)))
    assert want is None or got == want, f"{bench_case.name}: shape {got}, NumPy's {want}"


@pytest.mark.parametrize("framework", BASELINES)
def test_baseline(benchmark, framework, bench_case):
    got, want = _shapes(bench_case, _run(benchmark, bench_case, runner(bench_case, framework)))
    assert want is None or got == want, f"{bench_case.name}: shape {got}, NumPy's {want}"
