"""Counting outcomes and printing failures: each with the command that
reproduces it, grouped by what they have in common (family, kind of input,
the failure with its numbers and names left out), which is usually one root
cause a group."""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter, defaultdict

from .harness import ROOT, Job, Result

#: Examples printed for each group of failures, and slowest cases listed.
EXAMPLES = 2
SLOWEST = 5


def reproduction(job: Job) -> str:
    python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else "python"
    return f"{python} -m tests.fuzz --only {job.family} --seed {job.seed} --case {job.index}"


def signature(result: Result) -> tuple:
    """What a failure shares with others of the same cause: family, kind of input,
    and the failure with its names, paths, numbers and parenthesized details left out."""
    kind = result.what.split(":")[0]
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^)]*\)", "…", result.failure or "")
    text = re.sub(r"/[\w./-]+", "PATH", text)
    text = re.sub(r"\d+", "N", text)
    return result.job.family, kind, text[:160]


class Tally:
    """Outcomes as they come in; failures printed at once and grouped at the end."""

    def __init__(self, total: int, out=sys.stdout):
        self.total, self.out = total, out
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.seconds: Counter = Counter()
        self.failures: list[Result] = []
        self.slowest: list[Result] = []
        self.done = 0
        self.start = self.last_progress = time.monotonic()

    def add(self, result: Result) -> None:
        family = result.job.family
        self.done += 1
        self.seconds[family] += result.seconds
        self.outcomes[family]["FAILED" if result.failure else result.outcome] += 1
        self.slowest = sorted(self.slowest + [result], key=lambda r: -r.seconds)[:SLOWEST]
        if result.failure:
            self.failures.append(result)
            print(f"FAIL {family} case {result.job.index}: {result.what}: {result.failure}", file=self.out,
                  flush=True)
        if time.monotonic() - self.last_progress > 15:
            self.last_progress = time.monotonic()
            print(f"... {self.done}/{self.total} cases, {len(self.failures)} failed, "
                  f"{time.monotonic() - self.start:.0f} s", file=self.out, flush=True)

    def summary(self) -> str:
        lines = [f"{self.done} cases in {time.monotonic() - self.start:.1f} s, {len(self.failures)} failed"]
        for family, counts in self.outcomes.items():
            shown = ", ".join(f"{name} {n}" for name, n in counts.most_common())
            lines.append(f"  {family:<11} {sum(counts.values()):>6} cases, {self.seconds[family]:7.1f} s of work: "
                         f"{shown}")
        lines.append("slowest: " + "; ".join(f"{r.job.family} {r.job.index} ({r.what[:50]}) {r.seconds:.1f} s"
                                             for r in self.slowest))
        return "\n".join(lines)

    def failure_report(self) -> str:
        groups: dict[tuple, list[Result]] = defaultdict(list)
        for result in sorted(self.failures, key=lambda r: (r.job.family, r.job.index)):
            groups[signature(result)].append(result)
        lines = [f"{len(self.failures)} failures in {len(groups)} groups:"]
        for (family, kind, _), results in sorted(groups.items(), key=lambda item: -len(item[1])):
            first = results[0]
            lines.append(f"[{family}/{kind}] {first.failure}  ({len(results)} case{'s' * (len(results) > 1)})")
            for result in results[:EXAMPLES]:
                lines.append(f"    case {result.job.index}: {result.what}")
                lines.append(f"      {reproduction(result.job)}")
            if first.log:
                lines += ["      | " + line for line in first.log.splitlines()]
            if len(results) > EXAMPLES:
                more = ", ".join(str(r.job.index) for r in results[EXAMPLES:EXAMPLES + 20])
                lines.append(f"    (+{len(results) - EXAMPLES} more: cases {more}{' ...' * (len(results) > 22)})")
        return "\n".join(lines)
