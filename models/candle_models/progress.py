"""A one-line progress bar on stderr for loading and long work: drawn only on
a terminal (unless forced) and only once the work has lasted a moment, so
that quick work and logs stay free of it."""

from __future__ import annotations

import sys
import time

#: Seconds of work before the bar appears, and between two redraws.
DELAY, REDRAW = 0.5, 0.1


class Progress:
    def __init__(self, total: int, label: str, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.label, self.done = total, label, 0
        self.start = time.perf_counter()
        self.next_draw, self.drawn = self.start + DELAY, False

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        finished = self.drawn and self.done >= self.total  # a bar once drawn is drawn full
        if not self.enabled or (now < self.next_draw and not finished):
            return
        self.next_draw, self.drawn = now + REDRAW, True
        width, frac = 30, self.done / max(self.total, 1)
        bar = "#" * int(width * frac) + "." * (width - int(width * frac))
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {now - self.start:.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
