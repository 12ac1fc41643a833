"""`candle bench` and the per-machine kernel choices it writes."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from candle_api import kernel_choice
from candle_api.bench import Progress, choose, report
from candle_api.bench.runner import discover
from candle_api.testing.bench_cases import FRAMEWORKS, runner, standard_cases


def test_cases_are_unique_and_every_framework_runs_its_quick_cases():
    cases = standard_cases()
    assert len({c.name for c in cases}) == len(cases)
    assert {"gemm", "gemv", "attention", "rowwise", "conv", "quantized", "vector math", "overhead"} <= {
        c.group for c in cases}
    for case in cases:
        if case.quick and case.group in ("overhead", "vector math"):
            for framework in FRAMEWORKS[:2]:
                fn = runner(case, framework, "cpu")
                assert fn is None or fn() is not None


def test_discover_has_a_column_per_cpu_code_path_and_numpy():
    columns, notes = discover()
    names = [c.name for c in columns]
    assert "numpy" in names and any(n.startswith("cpu-") for n in names)
    assert names.index("numpy") > max(i for i, n in enumerate(names) if n.startswith("cpu-"))
    cpu = [c for c in columns if c.name.startswith("cpu-")]
    assert all(c.env["CANDLE_CPU_ISA"] == c.name[4:] for c in cpu)
    for plugin_column in (c for c in columns if c.plugin):
        assert plugin_column.env == {"CANDLE_FORCE_PLUGINS": plugin_column.plugin}
        assert plugin_column.base == cpu[0].name and plugin_column.plugin in cpu[0].env["CANDLE_DISABLE_PLUGINS"]


def test_a_quick_run_writes_the_report(tmp_path):
    env = dict(os.environ, CANDLE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "candle_api.cli", "bench", "--quick", "--columns", "numpy,ref",
                           "--cases", "add 4", "--reps", "2", "--out", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "bench.json").read_text())
    assert [c["name"] for c in data["columns"]] == ["ref", "numpy"]
    assert [c["name"] for c in data["cases"]] == ["per-op overhead: add 4 f32"]
    results = data["cases"][0]["results"]
    assert results["numpy"]["reps"] == results["ref"]["reps"] == 2 and results["ref"]["median"] > 0
    table = (tmp_path / "bench.md").read_text()
    assert "| per-op overhead: add 4 f32 |" in table and "(1.00x)" in table
    assert "candle bench: 100%" in proc.stderr  # the progress, one line per tenth when stderr is not a terminal
    assert not (tmp_path / "cache").exists()   # --quick writes no kernel choice


def _report(times: dict) -> dict:
    cases = [{"name": name, "kernel": kernel, "results": {col: {"median": t} for col, t in cols.items()}}
             for (name, kernel), cols in times.items()]
    return {"cases": cases, "command": "candle bench", "baseline": "base"}


def test_choose_serves_a_kernel_where_the_plugin_is_faster(tmp_path, monkeypatch):
    monkeypatch.setenv("CANDLE_CACHE_DIR", str(tmp_path))
    data = _report({("gemm 512", "matmul/f32@gemm"): {"base": 2.0, "fast": 1.0},
                    ("gemm 1024", "matmul/f32@gemm"): {"base": 2.0, "fast": 4.0},  # geomean of 2 and 0.5: 1, a tie
                    ("exp", "exp/f32"): {"base": 3.0, "fast": 1.0},
                    ("add", ""): {"base": 1.0, "fast": 0.5}})  # no kernel: not a choice
    columns = [SimpleNamespace(name="base", plugin="", base=""),
               SimpleNamespace(name="fast", plugin="fastlib", base="base")]
    choices = choose(data, columns, write=True)
    kernels = choices["fastlib"]["kernels"]
    assert set(kernels) == {"matmul/f32@gemm", "exp/f32"}
    assert kernels["exp/f32"]["serve"] and kernels["exp/f32"]["ratio"] == 3.0
    assert not kernels["matmul/f32@gemm"]["serve"]  # a tie leaves the kernel to the device's own plugin
    verdicts, source = kernel_choice.read("fastlib")
    assert verdicts == {"exp/f32": True, "matmul/f32@gemm": False} and str(tmp_path) in source
    assert "exp/f32: 3.00x -> served by fastlib" in report.markdown({
        **data, "date": "now", "machine": kernel_choice.machine(), "threads": 2, "settings": {"reps": 5},
        "columns": [], "notes": [], "choices": choices})


def test_kernel_choice_refuses_files_it_cannot_trust(tmp_path, monkeypatch):
    monkeypatch.setenv("CANDLE_CACHE_DIR", str(tmp_path))
    assert kernel_choice.read("p")[0] is None and "run `candle bench`" in kernel_choice.read("p")[1]
    path = kernel_choice.write("p", {"exp/f32": {"serve": True}}, "candle bench")
    assert kernel_choice.read("p")[0] == {"exp/f32": True}
    path.write_text("{not json")
    assert kernel_choice.read("p")[0] is None and "unreadable" in kernel_choice.read("p")[1]
    path.write_text(json.dumps({"format": 99}))
    assert "not a kernel choice of format 1" in kernel_choice.read("p")[1]


@pytest.mark.parametrize("value, plugin, want", [("mkl", "mkl", True), ("a, mkl", "mkl", True),
                                                 ("all", "x", True), ("mklx", "mkl", False), ("", "mkl", False)])
def test_forced(monkeypatch, value, plugin, want):
    monkeypatch.setenv(kernel_choice.ENV_FORCE, value)
    assert kernel_choice.forced(plugin) is want


def test_progress_without_a_terminal():
    import io

    stream = io.StringIO()
    p = Progress(stream)
    p.total, p.label = 20, "case"
    for _ in range(20):
        p.tick()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "candle bench: 5% (case)" and lines[-1] == "candle bench: 100% (case)" and len(lines) == 11


def test_unknown_columns_and_cases_are_one_line_errors():
    from candle_api.cli import main

    assert main(["bench", "--columns", "nosuch", "--quick"]) == 1
    assert main(["bench", "--cases", "nosuch", "--quick"]) == 1


def test_a_case_over_budget_skips_the_larger_ones_of_its_series_only(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "candle_api.cli", "bench", "--quick", "--columns", "numpy",
                           "--cases", "gemm,add 4", "--budget", "1e-9", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = {c["name"]: c["results"]["numpy"] for c in json.loads((tmp_path / "bench.json").read_text())["cases"]}
    assert "over the budget of 1e-09 s" in results["gemm f32 512"]["skipped"]
    assert results["gemm f32 1024"]["skipped"] == "a smaller case of its series was over budget"
    assert results["gemm bf16 1024"]["skipped"] == "no gemm op in numpy"
    assert "over the budget" in results["per-op overhead: add 4 f32"]["skipped"]  # its own call, not the series


def test_over_budget_estimates_from_the_smaller_case():
    from candle_api.bench.runner import _over_budget

    seen = {("c", "gemm f32"): (1.0, 2 * 1024**3), ("c", "gemm f64"): "over"}
    assert _over_budget(seen, ("c", "gemm f32"), 2 * 2048**3, 5.0).startswith("about 8 s a call")
    assert _over_budget(seen, ("c", "gemm f32"), 2 * 2048**3, 10.0) == ""
    assert _over_budget(seen, ("c", "gemm f64"), 1.0, 10.0) == "a smaller case of its series was over budget"
    assert _over_budget(seen, ("d", "gemm f32"), 1.0, 10.0) == ""


def test_a_column_slow_on_every_earlier_case_skips_without_a_call():
    from candle_api.bench.runner import _slower_than_budget

    # its best showing was 40x the first column's: a case whose first-column call took 50 ms would take 2 s
    assert _slower_than_budget(40.0, 0.05, 1.0).startswith("about 2 s a call from its speed on the earlier cases")
    assert _slower_than_budget(40.0, 0.02, 1.0) == ""
    assert _slower_than_budget(None, 0.05, 1.0) == ""  # nothing seen of the column yet
    assert _slower_than_budget(40.0, None, 1.0) == ""  # the first column did not run the case


def test_run_case_learns_a_columns_best_ratio_and_skips_by_it(monkeypatch):
    from types import SimpleNamespace

    from candle_api.bench import runner

    first = {"fast": {"a 1": 0.01, "b 1": 0.05}, "slow": {"a 1": 0.4, "b 1": 2.0}}  # slow: 40x fast
    asked = []

    def ask(col, msg):
        if "setup" in msg:
            asked.append((col.name, msg["setup"]))
            return {"inner": 1, "first": first[col.name][msg["setup"]]}
        return {"t": first[col.name][asked[-1][1]]} if "rep" in msg else {}

    monkeypatch.setattr(runner, "_ask", ask)
    cols = [runner.Column("fast", "candle"), runner.Column("slow", "candle")]
    settings, seen = runner.Settings(reps=1, pause=0.0, budget=1.0, threads=1), {}
    assert "median" in runner.run_case(SimpleNamespace(name="a 1", work=0), cols, settings, seen, lambda: None)["slow"]
    assert seen[("slow", "ratio")] == 40.0
    result = runner.run_case(SimpleNamespace(name="b 1", work=0), cols, settings, seen, lambda: None)
    assert result["slow"]["skipped"].startswith("about 2 s a call from its speed on the earlier cases")
    assert ("slow", "b 1") not in asked and "median" in result["fast"]
