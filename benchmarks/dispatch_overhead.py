"""Per-op overhead of candle-api on tiny tensors, against NumPy and PyTorch
eager (when installed) in the same run, interleaved, medians of 15 rounds.

Target: every op at most 2x PyTorch eager's time per call (without PyTorch,
the NumPy column is printed and nothing is judged). ``--save FILE`` writes
the medians as JSON; ``--compare FILE`` adds a column against a saved run
(another checkout, say: the script uses only the public API).

    python benchmarks/dispatch_overhead.py [--save now.json] [--compare main.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c

TARGET = 2.0


def cases():
    """{name: (candle-api, numpy, torch or None)} on 4-element (or 2x2) f32 tensors."""
    a, b = c.Tensor([1.0, 2.0, 3.0, 4.0]), c.Tensor([0.5, 1.5, 2.5, 3.5])
    m = c.Tensor([[1.0, 2.0], [3.0, 4.0]])
    na, nb, nm = a.numpy().copy(), b.numpy().copy(), m.numpy().copy()
    try:
        import torch

        torch.set_num_threads(1)
        ta, tb, tm = torch.from_numpy(na), torch.from_numpy(nb), torch.from_numpy(nm)
    except ImportError:
        torch = None
    return {
        "a + b": (lambda: a + b, lambda: na + nb, torch and (lambda: ta + tb)),
        "a * 2": (lambda: a * 2.0, lambda: na * 2.0, torch and (lambda: ta * 2.0)),
        "a > b": (lambda: a > b, lambda: na > nb, torch and (lambda: ta > tb)),
        "a.exp()": (lambda: a.exp(), lambda: np.exp(na), torch and (lambda: ta.exp())),
        "a.sum_all()": (lambda: a.sum_all(), lambda: na.sum(), torch and (lambda: ta.sum())),
        "m.sum(-1)": (lambda: m.sum(-1), lambda: nm.sum(-1), torch and (lambda: tm.sum(-1))),
        "m.max_keepdim(-1)": (lambda: m.max_keepdim(-1), lambda: nm.max(-1, keepdims=True),
                              torch and (lambda: tm.amax(-1, keepdim=True))),
        "m @ m": (lambda: m @ m, lambda: nm @ nm, torch and (lambda: tm @ tm)),
        "m.softmax(-1)": (lambda: m.softmax(-1), lambda: _np_softmax(nm), torch and (lambda: tm.softmax(-1))),
        "a.to_dtype(f64)": (lambda: a.to_dtype(c.f64), lambda: na.astype(np.float64),
                            torch and (lambda: ta.double())),
        "a[1:3]": (lambda: a[1:3], lambda: na[1:3], torch and (lambda: ta[1:3])),
        "m.t()": (lambda: m.t(), lambda: nm.T, torch and (lambda: tm.t())),
    }


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--save", help="write {op: median seconds} of candle-api to this JSON file")
    parser.add_argument("--compare", help="a JSON file from --save to compare against")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    harness.header("dispatch overhead, 4-element f32 tensors")
    table = cases()
    variants = {}
    for name, fns in table.items():
        for lib, fn in zip(("candle-api", "numpy", "torch"), fns):
            if fn is not None:
                variants[(lib, name)] = fn
    res = harness.interleaved(variants, reps=args.reps)
    base = json.load(open(args.compare)) if args.compare else {}
    has_torch = any(lib == "torch" for lib, _ in res)
    print(f"{'op':20s} {'candle-api':>11s} {'numpy':>9s}" + (f" {'torch':>9s} {'vs torch':>8s}" if has_torch else "")
          + (f" {'vs saved':>8s}" if base else "") + "  spread")
    ours = {}
    worst = 0.0
    for name in table:
        t = ours[name] = harness.median(res[("candle-api", name)])
        line = f"{name:20s} {t * 1e6:8.3f} us {harness.median(res[('numpy', name)]) * 1e6:6.3f} us"
        if has_torch:
            ratio = t / harness.median(res[("torch", name)])
            worst = max(worst, ratio)
            line += f" {harness.median(res[('torch', name)]) * 1e6:6.3f} us {ratio:7.2f}x"
        if name in base:
            line += f" {t / base[name]:7.2f}x"
        print(line + f"  {harness.spread(res[('candle-api', name)]):4.0f}%")
    if args.save:
        with open(args.save, "w") as f:
            json.dump(ours, f, indent=1)
    if not has_torch:
        print("PyTorch is not installed: nothing judged (pip install torch==2.13.0)")
        return 0
    verdict = "meets" if worst <= TARGET else "MISSES"
    print(f"worst ratio to PyTorch eager {worst:.2f}x: {verdict} the {TARGET:.0f}x target")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
