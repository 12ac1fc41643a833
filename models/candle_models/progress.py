"""A one-line progress bar on stderr for loading and long work (silent when
stderr is not a terminal, unless forced)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.label, self.done = total, label, 0
        self.start = self.shown = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if not self.enabled or (now - self.shown < 0.1 and self.done < self.total):
            return
        self.shown = now
        width, frac = 30, self.done / max(self.total, 1)
        bar = "#" * int(width * frac) + "." * (width - int(width * frac))
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {now - self.start:.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
