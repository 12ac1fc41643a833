"""The fuzz harness's command line (run from the repository root):

    python -m tests.fuzz --quick                      # CI: a few thousand cases, a few minutes
    python -m tests.fuzz --long --seed 7              # by hand: hundreds of thousands of cases
    python -m tests.fuzz --only formats --seed 1 --case 17            # reproduce one case
    python -m tests.fuzz --only formats --seed 1 --case 17 --inline   # ... in this process, with its traceback

Exits 1 when a case failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from pathlib import Path

from .case import case_rng
from .cases import DEFAULT, FAMILIES, module, plan
from .harness import Job, run
from .report import Tally

GIB = 1 << 30


def run_inline(job: Job) -> int:
    """One case in this process, exceptions and all (for a debugger)."""
    with tempfile.TemporaryDirectory(prefix="candle-fuzz-") as tmp:
        case = module(job.family).make(case_rng(job.family, job.seed, job.index), job.index, Path(tmp))
        print(f"{job.family} case {job.index}: {case.what}")
        try:
            print("outcome:", case.run() or "ok")
        except case.allowed as exc:
            print(f"outcome: {type(exc).__name__}: {exc}")
        except BaseException:  # noqa: BLE001 - shown in full
            traceback.print_exc()
            return 1
        finally:
            if case.check is not None:
                case.check()
    return 0


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="CI's run (the default)")
    mode.add_argument("--long", dest="mode", action="store_const", const="long", help="many more cases, by hand")
    parser.add_argument("--seed", type=int, default=1, help="the run's seed (default 1)")
    parser.add_argument("--only", help="comma-separated families (default: all but selftest)")
    parser.add_argument("--case", type=int, help="run only this case number (with one family in --only)")
    parser.add_argument("--count", type=int, help="cases per family instead of the mode's")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="worker processes (default: the cores)")
    parser.add_argument("--memory-gib", type=float, default=4.0, help="address-space limit of a worker (default 4)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiplies every per-case timeout")
    parser.add_argument("--inline", action="store_true", help="with --case: run it in this process, no worker")
    parser.add_argument("--list", action="store_true", help="list the families and exit")
    args = parser.parse_args(argv)
    args.mode = args.mode or "quick"
    args.families = args.only.split(",") if args.only else DEFAULT
    unknown = [n for n in args.families if n not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    if (args.case is not None or args.inline) and (len(args.families) != 1 or args.case is None):
        parser.error("--case and --inline need --only with one family, and --inline needs --case")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.list:
        for f in FAMILIES.values():
            print(f"{f.name:<11} quick {f.quick:>5}, long {f.long:>7}, {f.timeout:g} s a case: {f.about}")
        return 0
    jobs = plan(args.families, args.seed, args.mode, args.count, args.case, args.timeout_scale)
    if args.inline:
        return run_inline(jobs[0])
    print(f"fuzz: seed {args.seed}, {args.mode}, {len(jobs)} cases of {', '.join(args.families)} on {args.jobs} "
          f"workers ({args.memory_gib:g} GiB each)", flush=True)
    tally = Tally(len(jobs))
    run(jobs, args.jobs, int(args.memory_gib * GIB), tally.add)
    print(tally.summary())
    if tally.failures:
        print(tally.failure_report())
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
