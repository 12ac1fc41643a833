"""One column of ``candle bench``: a process that runs the benchmark cases in
one framework (candle-api on one device, NumPy or PyTorch) with the
environment the runner gave it (threads, CANDLE_CPU_ISA, the plugins on or
off), driven over stdin and stdout, one JSON object a line:

- ``{"setup": case, "budget": s, "target": s}``: makes the inputs, runs the
  case once, and answers ``{"inner": calls per repetition, "first": seconds
  that call took}``, or ``{"skipped": why}`` (no such op in this framework, or
  one call over budget: with "first" too);
- ``{"rep": true}``: one repetition, answered ``{"t": seconds per call}``;
- ``{"drop": true}``: frees the case's inputs.

Anything the libraries print goes to stderr, which the runner keeps in a log.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from ..testing.bench_cases import runner, standard_cases


class Worker:
    """What one column runs the cases with: a framework, and for candle a device (and the kernel plugin the
    column forces on, checked to be serving)."""

    def __init__(self, framework: str, device: str, plugin: str, threads: int):
        self.framework, self.device, self.plugin = framework, device, plugin
        self.fn = None
        self.inner = 1
        if framework == "torch":
            import torch

            torch.set_num_threads(threads)
            self.torch = torch
        elif framework == "candle":
            from ..device import get_device

            self.dev = get_device(device)
            if plugin:
                self._check_plugin()

    def _check_plugin(self) -> None:
        from ..registry import registry

        table = registry().kernel_table(self.dev.type)
        if not any(p == self.plugin for p, _ in table.providers.values()):
            errors = {r.name: r.error for r in registry().records()}
            raise RuntimeError(f"plugin {self.plugin} serves no kernel on {self.dev}: "
                               f"{errors.get(self.plugin) or 'it is not installed'}")

    def about(self) -> str:
        if self.framework == "numpy":
            blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
            return f"numpy {np.__version__} ({blas.get('name', '?')} {blas.get('version', '')})".strip()
        if self.framework == "torch":
            t = self.torch
            return f"torch {t.__version__} ({t.get_num_threads()} threads, MKL {t.backends.mkl.is_available()})"
        from ..registry import registry

        spec, plugin = registry().backends()[self.dev.type]
        parts = [spec.description, spec.details()]
        table = registry().kernel_table(self.dev.type)
        if self.plugin:
            parts.append(table.descriptions.get(self.plugin, ""))
        return "; ".join(p for p in parts if p)

    # ---- one case ---------------------------------------------------------------------
    def setup(self, case, budget: float, target: float) -> dict:
        self.fn = runner(case, self.framework, getattr(self, "dev", None))
        if self.fn is None:
            return {"skipped": f"no {case.group} op in {self.framework}"}
        t0 = time.perf_counter()
        self._call()
        first = time.perf_counter() - t0
        if first > budget:
            self.fn = None
            return {"skipped": f"one call took {first:.1f} s, over the budget of {budget:g} s", "first": first}
        t0 = time.perf_counter()
        self._call()
        once = max(time.perf_counter() - t0, 1e-7)
        self.inner = max(1, min(int(target / once), 1 << 20))
        return {"inner": self.inner, "first": first}

    def _call(self):
        self.fn()
        if self.framework == "candle":
            self.dev.synchronize()

    def rep(self) -> dict:
        t0 = time.perf_counter()
        for _ in range(self.inner):
            self._call()
        return {"t": (time.perf_counter() - t0) / self.inner}


def main() -> int:
    framework, device, plugin = sys.argv[1], sys.argv[2], sys.argv[3]
    reply = sys.stdout
    sys.stdout = sys.stderr  # the protocol owns stdout

    def send(obj):
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    try:
        column = Worker(framework, device, plugin, int(os.environ.get("CANDLE_NUM_THREADS", "1")))
        send({"ready": column.about()})
    except Exception as exc:
        send({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    cases = {c.name: c for c in standard_cases()}
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            if "setup" in msg:
                send(column.setup(cases[msg["setup"]], msg["budget"], msg["target"]))
            elif "rep" in msg:
                send(column.rep())
            else:
                column.fn = None
                send({"dropped": True})
        except Exception as exc:  # a case that fails in one column is reported there, the others go on
            column.fn = None
            send({"skipped": f"failed: {type(exc).__name__}: {str(exc)[:200]}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
