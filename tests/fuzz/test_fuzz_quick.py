"""The fuzz harness in CI: its own behaviour on cases that crash, hang or
exhaust memory, then the quick run (every family, seed 1). A failing case is
listed with the command that reproduces it."""

from pathlib import Path

from .cases import DEFAULT, plan
from .cases.selftest import BAD, BEHAVIOURS, CHILD_SLEEP
from .harness import run
from .report import Tally, reproduction

MEMORY = 4 << 30


def test_a_crash_a_hang_or_a_memory_hog_fails_its_case_and_the_run_goes_on():
    results = []
    jobs = plan(["selftest"], 1, count=2 * len(BEHAVIOURS))
    run(jobs, 2, MEMORY, results.append)
    by_index = {r.job.index: r for r in results}
    assert sorted(by_index) == list(range(len(jobs))), "every case ran, before and after the bad ones"
    for i, result in by_index.items():
        behaviour = list(BEHAVIOURS)[i % len(BEHAVIOURS)]
        assert bool(result.failure) == (behaviour in BAD), (behaviour, result)
    kinds = {list(BEHAVIOURS)[i % len(BEHAVIOURS)]: r for i, r in by_index.items()}
    assert kinds["segfault"].failure == "killed by SIGSEGV" and "string_at" in kinds["segfault"].log
    assert kinds["hang"].outcome == "timeout"
    assert "in _hangs" in kinds["hang"].log, "the hung worker's stack is shown"
    assert kinds["memory hog"].failure.startswith("MemoryError")
    assert kinds["exit"].failure == "the worker exited with code 3"
    segfault = kinds["segfault"].job
    assert reproduction(segfault).endswith(f"--only selftest --seed 1 --case {segfault.index}")
    alive = [p for p in Path("/proc").glob("[0-9]*/cmdline") if CHILD_SLEEP.encode() in _read(p)]
    assert not alive, "a hung case's child outlived its process group"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_quick_fuzz():
    jobs = plan(DEFAULT, 1)
    tally = Tally(len(jobs))
    run(jobs, 2, MEMORY, tally.add)
    print(tally.summary())
    assert not tally.failures, "\n" + tally.failure_report()
