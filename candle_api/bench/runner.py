"""``candle bench``'s runner: which columns there are, and timing every case
in all of them with the repetitions interleaved.

A column is a worker process (:mod:`.worker`) with its own environment: each
code path of each available device (the cpu plugin's instruction sets through
CANDLE_CPU_ISA, the kernel plugins turned off), each kernel plugin forced on
(mkl over cpu), the other devices (ref, cuda:0...), NumPy and PyTorch when
installed. Every column gets the same thread count. For each case the runner
asks every column for one repetition in turn, a different column first each
time, with a pause between columns so the previous one's spinning threads
park: drift and other processes hit all columns alike.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

THREAD_VARIABLES = ("CANDLE_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class Column:
    name: str
    framework: str                  # candle, numpy or torch
    device: str = ""
    plugin: str = ""                # the kernel plugin this column forces on
    env: dict = field(default_factory=dict)
    base: str = ""                  # for a kernel plugin's column: the column of the device's own kernels
    about: str = ""
    error: str = ""
    proc: object = None


def discover(only: set | None = None) -> tuple[list[Column], list[str]]:
    """(the columns of this machine, notes on what is unavailable and why)."""
    from ..registry import ENV_DISABLE, registry

    columns, notes = [], []
    reg = registry()
    for dev_type, (spec, backend_plugin) in sorted(reg.backends().items()):
        try:
            ok, reason = spec.availability()
        except Exception as exc:
            ok, reason = False, f"{type(exc).__name__}: {exc}"
        if not ok:
            notes.append(f"device {dev_type}: unavailable: {reason}")
            continue
        device = dev_type if dev_type == "cpu" else f"{dev_type}:0"
        table = reg.kernel_table(dev_type)
        kernel_plugins = sorted(({p for p, _ in table.providers.values()} | set(table.descriptions))
                                - {backend_plugin})
        off = {ENV_DISABLE: ",".join(kernel_plugins)} if kernel_plugins else {}
        variants = spec.variants() or {"": {}}
        names = [f"{dev_type}-{v}" if v else dev_type for v in variants]
        for name, env in zip(names, variants.values()):
            columns.append(Column(name, "candle", device, env={**off, **env}))
        for plugin in kernel_plugins:
            columns.append(Column(plugin, "candle", device, plugin, {"CANDLE_FORCE_PLUGINS": plugin}, base=names[0]))
    for record in reg.records():
        if record.error:
            notes.append(f"plugin {record.name}: {record.error}")
    columns.append(Column("numpy", "numpy"))
    if importlib.util.find_spec("torch") is not None:
        columns.append(Column("torch", "torch"))
    else:
        notes.append("torch: not installed (pip install torch for a PyTorch column)")
    if only:
        columns = [c for c in columns if c.name in only or c.framework in only]
    return columns, notes


def start(columns: list[Column], threads: int, log) -> list[Column]:
    """Starts a worker per column; those that fail to start get an error and are dropped."""
    for col in columns:
        env = {**os.environ, **{v: str(threads) for v in THREAD_VARIABLES}, **col.env}
        if col.plugin:  # a forced plugin must not also be disabled by the caller's environment
            env.pop("CANDLE_DISABLE_PLUGINS", None)
        col.proc = subprocess.Popen([sys.executable, "-m", "candle_api.bench.worker", col.framework,
                                     col.device or "-", col.plugin or ""], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    ready = []
    for col in columns:
        answer = _read(col)
        if "ready" in answer:
            col.about = answer["ready"]
            ready.append(col)
        else:
            col.error = answer.get("error", "the worker exited")
            stop([col])
    return ready


def stop(columns: list[Column]) -> None:
    for col in columns:
        if col.proc is not None:
            try:
                col.proc.stdin.close()
            except OSError:
                pass
            try:
                col.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                col.proc.kill()
            col.proc = None


def _ask(col: Column, msg: dict) -> dict:
    try:
        col.proc.stdin.write(json.dumps(msg) + "\n")
        col.proc.stdin.flush()
    except OSError:
        return {"skipped": "the worker exited (see the log)"}
    return _read(col)


def _read(col: Column) -> dict:
    line = col.proc.stdout.readline()
    return json.loads(line) if line else {"skipped": "the worker exited (see the log)", "error": "it exited"}


@dataclass
class Settings:
    reps: int = 5
    target: float = 0.05   # seconds per repetition
    budget: float = 5.0    # seconds one call may take before a column skips the case and the larger ones of its series
    pause: float = 0.2     # seconds between columns
    threads: int = 0       # every column's threads (0: the cores this process may use)

    def __post_init__(self):
        if not self.threads:
            self.threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _over_budget(seen: dict, key: tuple, work: float, budget: float) -> str:
    """Why a column skips a case without calling it ("" when it does not): a smaller case of the series was
    over budget, or its time scaled by the work says this one would be."""
    prev = seen.get(key)
    if prev is None:
        return ""
    if prev == "over":
        return "a smaller case of its series was over budget"
    seconds, prev_work = prev
    estimate = seconds * work / prev_work if work and prev_work else 0.0
    return f"about {estimate:.0f} s a call from the smaller case, over the budget of {budget:g} s" \
        if estimate > budget else ""


def _slower_than_budget(ratio: float | None, first: float | None, budget: float) -> str:
    """Why a column skips a case it was never timed on ("" when it does not): its first call on the earlier
    cases was at best ``ratio`` times the first column's, and the first column's call on this one took
    ``first`` s. The best ratio, so a column is skipped only where even its fastest showing predicts a call
    over budget (a software Vulkan adapter's conv2d: 48 s a call where the cpu's took 0.06 s)."""
    if ratio is None or first is None or ratio * first <= budget:
        return ""
    return f"about {ratio * first:.2g} s a call from its speed on the earlier cases, over the budget of {budget:g} s"


def run_case(case, columns: list[Column], settings: Settings, seen: dict, tick) -> dict:
    """{column: {"median", "spread", "reps"} or {"skipped"}} for one case. ``seen`` keeps, per (column,
    series), the last case's time and work, or "over" (a series: "gemm f32" of "gemm f32 1024", in growing
    sizes); and per (column, "ratio") the least ratio of its first call's time to the first column's."""
    result, active = {}, []
    series = case.name.rsplit(" ", 1)[0]
    base = None  # the first column's first call on this case, in seconds
    for col in columns:
        why = _over_budget(seen, (col.name, series), case.work, settings.budget) or \
            _slower_than_budget(seen.get((col.name, "ratio")), base, settings.budget)
        if not why:
            answer = _ask(col, {"setup": case.name, "budget": settings.budget, "target": settings.target})
            why = "" if "inner" in answer else answer.get("skipped", "?")
            first = answer.get("first")
            if col is columns[0]:
                base = first
            elif first and base:
                seen[(col.name, "ratio")] = min(first / base, seen.get((col.name, "ratio"), float("inf")))
        if why:
            result[col.name] = {"skipped": why}
            if "budget" in why:
                seen[(col.name, series)] = "over"
        else:
            active.append(col)
        tick()
    times = {col.name: [] for col in active}
    for rep in range(settings.reps):
        shift = rep % max(len(active), 1)
        for col in active[shift:] + active[:shift]:
            time.sleep(settings.pause)
            answer = _ask(col, {"rep": True}) if col.name not in result else {}
            if "t" in answer:
                times[col.name].append(answer["t"])
            elif answer:
                result[col.name] = {"skipped": answer.get("skipped", "?")}
            tick()
    for col in active:
        _ask(col, {"drop": True})
        ts = times[col.name]
        if col.name not in result and ts:
            med = statistics.median(ts)
            result[col.name] = {"median": med, "spread": (max(ts) - min(ts)) / med if med else 0.0, "reps": len(ts)}
            seen[(col.name, series)] = (med, case.work)
    return result


def run(cases, columns: list[Column], settings: Settings, progress) -> dict:
    """{case name: {column: result}}, the columns started and stopped here."""
    log = tempfile.TemporaryFile("w+")
    try:
        live = start(columns, settings.threads, log)
        progress.total = len(cases) * len(live) * (1 + settings.reps)
        seen: dict = {}
        results = {}
        for case in cases:
            progress.label = case.name
            results[case.name] = run_case(case, live, settings, seen, progress.tick)
        return results
    finally:
        stop(columns)
        log.seek(0)
        text = log.read()
        log.close()
        if any(c.error for c in columns) and text.strip():
            print(text[-4000:], file=sys.stderr)

