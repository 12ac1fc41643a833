"""pytest-benchmark support: collects the median of every candle-api / NumPy
pair measured in the session and prints their ratios against the issue
targets at the end (the benchmarks themselves never assert on time)."""

from __future__ import annotations

import pytest

RESULTS = pytest.StashKey[dict]()


@pytest.fixture
def bench_results(request) -> dict:
    """{(case, threads): {"candle": s, "numpy": s, "target": x}} for this session."""
    return request.config.stash.setdefault(RESULTS, {})


def pytest_terminal_summary(terminalreporter, config):
    results = config.stash.get(RESULTS, {})
    pairs = {k: v for k, v in results.items() if "candle" in v and "numpy" in v}
    if not pairs:
        return
    tr = terminalreporter
    tr.section("candle-api vs NumPy (ratio = NumPy time / candle-api time)")
    for (name, threads), r in sorted(pairs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ratio = r["numpy"] / r["candle"]
        target = r.get("target")
        verdict = "" if target is None else ("  ok" if ratio >= target else "  MISSES TARGET") + f" (>= {target}x)"
        tr.write_line(f"{threads}T {name:36s} {r['candle'] * 1e3:9.3f} ms vs {r['numpy'] * 1e3:9.3f} ms  "
                      f"{ratio:5.2f}x{verdict}")
