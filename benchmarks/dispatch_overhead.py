"""Per-op overhead of candle-api on tiny tensors, against NumPy in the same run.

Prints, for a 4-element f32 ``a + b``, ``a.exp()``, ``a.sum_all()`` and
``a[1:3]``, the time per call of candle-api and of NumPy and their ratio
(target: at most 8x NumPy). PyTorch eager is listed too when it is installed.

    python benchmarks/dispatch_overhead.py
"""

from __future__ import annotations

import sys

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c

TARGET = 8.0


def main() -> int:
    harness.header("dispatch overhead, 4-element f32 tensors")
    a, b = c.Tensor([1.0, 2.0, 3.0, 4.0]), c.Tensor([0.5, 1.5, 2.5, 3.5])
    na, nb = a.numpy().copy(), b.numpy().copy()
    cases = {
        "a + b": (lambda: a + b, lambda: na + nb),
        "a.exp()": (lambda: a.exp(), lambda: np.exp(na)),
        "a.sum_all()": (lambda: a.sum_all(), lambda: na.sum()),
        "a[1:3]": (lambda: a[1:3], lambda: na[1:3]),
    }
    variants = {}
    for name, (ours, theirs) in cases.items():
        variants[("candle-api", name)] = ours
        variants[("numpy", name)] = theirs
    try:
        import torch

        torch.set_num_threads(1)
        ta, tb = torch.from_numpy(na), torch.from_numpy(nb)
        torch_cases = {"a + b": lambda: ta + tb, "a.exp()": lambda: ta.exp(), "a.sum_all()": lambda: ta.sum(),
                       "a[1:3]": lambda: ta[1:3]}
        for name, fn in torch_cases.items():
            variants[("torch", name)] = fn
    except ImportError:
        pass
    res = harness.interleaved(variants)
    worst = 0.0
    print(f"{'op':12s} {'candle-api':>12s} {'numpy':>10s} {'ratio':>7s}" + (f" {'torch':>10s}" if any(
        k[0] == "torch" for k in res) else ""))
    for name in cases:
        ours, theirs = harness.median(res[("candle-api", name)]), harness.median(res[("numpy", name)])
        ratio = ours / theirs
        worst = max(worst, ratio)
        line = f"{name:12s} {ours * 1e6:9.3f} us {theirs * 1e6:7.3f} us {ratio:6.2f}x"
        if ("torch", name) in res:
            line += f" {harness.median(res[('torch', name)]) * 1e6:7.3f} us"
        print(line + f"  (spread {harness.spread(res[('candle-api', name)]):.0f}%)")
    verdict = "meets" if worst <= TARGET else "MISSES"
    print(f"worst ratio {worst:.2f}x: {verdict} the {TARGET:.0f}x target")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
