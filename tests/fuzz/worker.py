"""A worker process: runs the cases it is sent, one at a time, and says how
each ended. Started by the harness in a session of its own, with a memory
limit; a case that crashes or hangs takes only this process (and its
children) down, and the harness starts another.

Protocol (one JSON object a line): the worker says ``{"ready"}`` once warmed
up; the harness writes ``{"family", "seed", "index"}`` on stdin; the worker
answers ``{"what"}`` once the case is built, then ``{"outcome", "failure"}``.
Everything else a case prints goes to stderr, which the harness keeps to show
next to a crash or a hang.

    python -m tests.fuzz.worker MEMORY_BYTES TMP_FOLDER
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import resource
import shutil
import signal
import sys
import traceback
from pathlib import Path

import candle_api as c

from .case import Case, Skip, case_rng
from .cases import module

ROOT = Path(__file__).resolve().parents[2]


def limit_resources(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash is reported, not dumped


def warm_up() -> None:
    """Opens what every later case shares (plugins, the cpu library, the thread
    pool), so that a file descriptor still open after a case is the case's."""
    c.io.formats()
    (c.ones(4, 4) @ c.ones(4, 4)).sum_all().numpy()


def open_fds() -> set:
    return set(os.listdir("/proc/self/fd"))


def fd_targets(fds: set) -> list[str]:
    """What the descriptors ``fds`` point at (those still open)."""
    targets = []
    for fd in fds:
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile
    return sorted(targets)


def where(exc: BaseException) -> str:
    """file:line of the innermost frame in the project's code (else the innermost
    frame): where a wrong exception came from, which groups failures by cause."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    ours = [f for f in frames if Path(f.filename).is_relative_to(ROOT) and ".venv" not in Path(f.filename).parts]
    frame = (ours or frames)[-1]
    path = Path(frame.filename)
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{frame.lineno}"


def brief(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def execute(case: Case) -> tuple[str, str | None]:
    """(outcome, failure or None) of one case."""
    failure = None
    try:
        outcome = case.run() or "ok"
    except Skip as exc:
        return f"skipped ({exc})", None
    except case.allowed as exc:
        outcome = type(exc).__name__
        if not str(exc).strip():
            failure = f"{outcome} with an empty message"
    except AssertionError as exc:
        outcome, failure = "wrong", f"wrong result: {brief(exc)} [{where(exc)}]"
    except MemoryError as exc:
        outcome, failure = "MemoryError", f"MemoryError the input does not justify: {brief(exc)} [{where(exc)}]"
    except BaseException as exc:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        outcome = type(exc).__name__
        failure = f"{outcome} (not an allowed outcome): {brief(exc)} [{where(exc)}]"
    if case.check is not None:
        try:
            case.check()
        except AssertionError as exc:
            note = brief(exc)
        except BaseException as exc:  # noqa: BLE001 - a check that cannot run is a failure too
            note = f"the check raised {type(exc).__name__}: {brief(exc)} [{where(exc)}]"
        else:
            note = None
        if note:
            failure = f"{failure}; {note}" if failure else note
    return outcome, failure


def run_one(family: str, seed: int, index: int, tmp: Path, say) -> None:
    """Builds and runs one case in an empty ``tmp``; ``say`` sends a message to the harness."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    fds = open_fds()
    try:
        case = module(family).make(case_rng(family, seed, index), index, tmp)
    except Skip as exc:
        say({"what": f"skipped: {exc}"})
        say({"outcome": "skipped", "failure": None})
        return
    except BaseException as exc:  # noqa: BLE001 - a case that cannot be built is reported like any other
        say({"what": "(building the case)"})
        say({"outcome": type(exc).__name__,
             "failure": f"building the case raised {type(exc).__name__}: {brief(exc)} [{where(exc)}]"})
        return
    say({"what": case.what})
    c.manual_seed(index)  # the library's own random numbers are part of the case
    outcome, failure = execute(case)
    del case
    if open_fds() - fds:
        gc.collect()  # a reference cycle may still hold a file
        leaked = fd_targets(open_fds() - fds)
        if leaked:
            note = f"left {len(leaked)} file descriptor(s) open: {', '.join(leaked)[:200]}"
            failure = f"{failure}; {note}" if failure else note
    say({"outcome": outcome, "failure": failure})


def main(argv: list[str]) -> None:
    memory, tmp = int(argv[0]), Path(argv[1])
    limit_resources(memory)
    faulthandler.enable()  # a crash prints the Python stack into the log the harness shows
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # so does a hang, before the harness kills it
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what cases print must not mix with the protocol

    def say(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")

    warm_up()
    say({"ready": True})
    for line in sys.stdin:
        job = json.loads(line)
        run_one(job["family"], job["seed"], job["index"], tmp, say)


if __name__ == "__main__":
    main(sys.argv[1:])
