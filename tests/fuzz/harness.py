"""The worker pool: hands cases to worker processes, kills a worker's whole
process group when its case overruns its time, starts a new worker after a
crash or a kill, and turns each case's end into a :class:`Result`.

A worker runs in a session of its own (so its group holds every process a
case starts), under an address-space limit; see ``worker.py``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parents[2]
#: How long a new worker may take to import and warm up.
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class Job:
    family: str
    seed: int
    index: int
    timeout: float


@dataclass
class Result:
    job: Job
    what: str
    outcome: str
    failure: str | None = None
    seconds: float = 0.0
    log: str = ""  # the worker's stderr while the case ran, when it crashed or hung


class HarnessError(RuntimeError):
    """The harness itself cannot go on (a worker that cannot even start)."""


class Worker:
    """One worker process and the case it is running."""

    def __init__(self, memory: int, tmp: Path):
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                   HF_HUB_OFFLINE="1")  # no case reaches the network
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker", str(memory), str(tmp)],
                                     cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True)
        self.fd = self.proc.stdout.fileno()
        self.pending = b""
        self.ready = False
        self.job: Job | None = None
        self.what = "(not built yet)"
        self.started = time.monotonic()
        self.log_mark = 0

    @property
    def deadline(self) -> float:
        return self.started + (self.job.timeout if self.job else START_TIMEOUT)

    def send(self, job: Job) -> None:
        self.job, self.what, self.started = job, "(not built yet)", time.monotonic()
        self.log_mark = os.fstat(self.log.fileno()).st_size
        message = {"family": job.family, "seed": job.seed, "index": job.index}
        try:
            os.write(self.proc.stdin.fileno(), (json.dumps(message) + "\n").encode())
        except BrokenPipeError:
            pass  # the worker died: the end of its output reports it

    def messages(self) -> list[dict] | None:
        """The complete messages read so far; None once the worker has exited."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return None
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        return [json.loads(line) for line in lines]

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the worker wrote to stderr during this case (faulthandler's
        list of extension modules left out)."""
        size = os.fstat(self.log.fileno()).st_size
        text = os.pread(self.log.fileno(), size - self.log_mark, self.log_mark).decode(errors="replace")
        kept = [line for line in text.strip().splitlines() if not line.startswith("Extension modules:")]
        return "\n".join(kept[-lines:])

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.log.close()

    def end(self, outcome: str, failure: str | None, log: str = "") -> Result:
        result = Result(self.job, self.what, outcome, failure, time.monotonic() - self.started, log)
        self.job = None
        return result


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"the worker exited with code {code}"


def run(jobs: Iterable[Job], workers: int, memory: int, on_result: Callable[[Result], None]) -> None:
    """Runs every job on ``workers`` processes, calling ``on_result`` as each ends."""
    queue = deque(jobs)
    with tempfile.TemporaryDirectory(prefix="candle-fuzz-") as tmp:
        pool = [Worker(memory, Path(tmp) / f"w{i}") for i in range(workers)]
        try:
            while queue or any(w.job for w in pool):
                for w in pool:
                    if w.job is None and w.ready and queue:
                        w.send(queue.popleft())
                waiting = [w for w in pool if w.job or not w.ready]
                timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
                readable, _, _ = select.select([w.fd for w in waiting], [], [], timeout)
                for i, w in enumerate(pool):
                    replacement = _step(w, w.fd in readable, on_result)
                    if replacement:
                        pool[i] = Worker(memory, Path(tmp) / f"w{i}")
        finally:
            for w in pool:
                w.kill()


def _step(w: Worker, readable: bool, on_result) -> bool:
    """Handles what worker ``w`` said or failed to say; True when it must be replaced."""
    if readable:
        messages = w.messages()
        if messages is None:  # the worker died
            code = w.proc.wait()
            if w.job is None:
                raise HarnessError(f"a worker died while starting ({describe_exit(code)}):\n{w.log_tail()}")
            on_result(w.end("crash", describe_exit(code), w.log_tail()))
            w.kill()
            return True
        for message in messages:
            if "ready" in message:
                w.ready = True
            elif "what" in message:
                w.what = message["what"]
            else:
                on_result(w.end(message["outcome"], message["failure"]))
    if time.monotonic() > w.deadline and (w.job or not w.ready):
        if w.job is None:
            raise HarnessError(f"a worker did not start within {START_TIMEOUT:.0f} s:\n{w.log_tail()}")
        os.kill(w.proc.pid, signal.SIGUSR1)  # the worker prints its stacks: where it hangs
        time.sleep(0.5)
        result = w.end("timeout", f"no outcome after {w.job.timeout:g} s: a hang (its process group was killed)",
                       w.log_tail())
        w.kill()
        on_result(result)
        return True
    return False
