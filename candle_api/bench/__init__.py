"""``candle bench``: the standard benchmark cases (candle_api.testing.bench_cases)
on every available device and kernel provider, NumPy and PyTorch, in one run.

It prints a progress bar, writes ``bench.json``, ``bench.md`` and
``bench.png`` (the ratio of each case per column) to ``--out``, and, unless
``--quick`` or ``--no-choice``, writes for each kernel plugin (mkl) which of its
kernels beat the device's own ones on this machine: the choice the plugin
reads (candle_api.kernel_choice). docs/benchmarks.md has a run's chart.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

from .. import kernel_choice
from ..errors import ArgumentError
from ..testing.bench_cases import standard_cases
from . import report, runner


class Progress:
    """A one-line bar on stderr (a line every 10% when stderr is not a terminal)."""

    def __init__(self, stream=sys.stderr):
        self.stream, self.total, self.done, self.label, self._shown = stream, 1, 0, "", -1
        self.tty = stream.isatty()

    def tick(self) -> None:
        self.done += 1
        frac = min(self.done / max(self.total, 1), 1.0)
        if self.tty:
            bar = "#" * int(30 * frac)
            self.stream.write(f"\r[{bar:<30}] {100 * frac:3.0f}% {self.label[:40]:<40}")
            self.stream.flush()
        elif int(10 * frac) != self._shown:
            self._shown = int(10 * frac)
            print(f"candle bench: {100 * frac:.0f}% ({self.label})", file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def choose(report_: dict, columns, write: bool) -> dict:
    """For each kernel plugin column: per kernel, the geometric mean over its cases of the device's own
    time / the plugin's time; the plugin serves the kernel where that is above 1. Written when ``write``."""
    choices = {}
    for col in columns:
        if not col.plugin or not col.base:
            continue
        by_kernel: dict = {}
        for case in report_["cases"]:
            base, mine = (case["results"].get(c, {}).get("median") for c in (col.base, col.name))
            if case["kernel"] and base and mine:
                by_kernel.setdefault(case["kernel"], []).append((case["name"], base / mine))
        verdicts = {key: {"serve": report.geomean([r for _, r in rs]) > 1.0,
                          "ratio": round(report.geomean([r for _, r in rs]), 4),
                          "cases": {name: round(r, 4) for name, r in rs}} for key, rs in by_kernel.items()}
        if verdicts:
            path = kernel_choice.write(col.plugin, verdicts, report_["command"]) if write else "(not written)"
            choices[col.plugin] = {"base": col.base, "path": str(path), "kernels": verdicts}
    return choices


def main(args) -> int:
    cases = [c for c in standard_cases() if c.quick or not args.quick]
    if args.cases:
        cases = [c for c in cases if any(word in c.name for word in args.cases.split(","))]
    only = {c.strip() for c in args.columns.split(",") if c.strip()} if args.columns else None
    columns, notes = runner.discover(only)
    if not columns or not cases:
        every = ", ".join(c.name for c in runner.discover()[0])
        raise ArgumentError(f"no column matches --columns {args.columns!r} (columns here: {every})" if not columns
                            else f"no case matches --cases {args.cases!r}")
    # the pause lets the previous column's threads park: OpenBLAS's spin for about 0.1 s after a call
    settings = runner.Settings(reps=args.reps or (3 if args.quick else 5), target=0.02 if args.quick else 0.05,
                               budget=args.budget or (1.0 if args.quick else 5.0), threads=args.threads or 0,
                               pause=0.1 if args.quick else 0.2)
    progress = Progress()
    load_before = os.getloadavg()[0]
    try:
        results = runner.run(cases, columns, settings, progress)
    finally:
        progress.close()
    # other processes' load, which the interleaving spreads over every column but cannot remove
    notes.append(f"load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
                 f"on {os.cpu_count()} logical cores")
    notes += [f"{c.name}: failed to start: {c.error}" for c in columns if c.error]
    live = [c for c in columns if not c.error]
    baseline = next((c.name for c in live if c.name == args.baseline), None) or next(
        (c.name for c in live if c.name.startswith(args.baseline + "-")), live[0].name if live else "")
    out = {"command": "candle bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "candle bench",
           "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": kernel_choice.machine(),
           "threads": settings.threads, "settings": vars(settings), "baseline": baseline, "notes": notes,
           "columns": [{"name": c.name, "about": c.about, "env": c.env} for c in live],
           "cases": [{"name": c.name, "group": c.group, "kernel": c.kernel, "work": c.work,
                      "results": results[c.name]} for c in cases]}
    out["choices"] = choose(out, live, write=not (args.quick or args.no_choice))
    written = report.write(out, Path(args.out))
    print(report.markdown(out))
    print("written: " + ", ".join(written))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark every device, kernel plugin, NumPy and PyTorch on the standard cases")
    p.add_argument("--quick", action="store_true", help="the small cases, 3 repetitions (a minute or two); "
                   "writes no kernel choice")
    p.add_argument("--out", default="bench-results", help="folder for bench.json, bench.md, bench.png "
                   "(default: ./bench-results)")
    p.add_argument("--baseline", default="cpu", help="the column the ratios are relative to (default: cpu, the "
                   "cpu plugin on its default instruction set; a device name means its default code path)")
    p.add_argument("--columns", default="", help="comma-separated column names or frameworks to run (default: all)")
    p.add_argument("--cases", default="", help="comma-separated words: only the cases whose name contains one")
    p.add_argument("--threads", type=int, default=0, help="threads in every column (default: the cores)")
    p.add_argument("--reps", type=int, default=0, help="interleaved repetitions per case (default 5, quick 3)")
    p.add_argument("--budget", type=float, default=0.0,
                   help="seconds one call may take before a column skips the case and the larger ones of its series "
                        "(default 5, quick 1)")
    p.add_argument("--no-choice", action="store_true", help="do not write the kernel plugins' choices")
    p.set_defaults(func=main)
