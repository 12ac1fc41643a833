"""In-place elementwise ops on 64 MB float32 tensors against PyTorch's in the
same run: ``x.add_(y)`` and ``x.mul_(-1)`` (the values stay finite, as
doubling would not), beside the two-pass form the ops took before their
kernels wrote into the target (``x.copy_(x + y)``: an out-of-place result,
then a copy) and the out-of-place op itself.

Repetitions interleave every variant, with a pause before each block so the
other library's spinning threads are parked. Prints medians with their
spread, the bandwidth (bytes read and written once each), and the ratio to
PyTorch's in-place op (PyTorch's time / this time: above 1.0 is faster).
PyTorch comes from ``pip install torch==2.13.0``; without it, candle-api's
lines only.

    python benchmarks/inplace.py [--reps 9] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c

N = 16 * 1024 * 1024  # 64 MB of float32


def variants(torch, x0: np.ndarray, y0: np.ndarray) -> dict:
    """name: (run, bytes moved per call)."""
    x, y = c.Tensor(x0.copy()), c.Tensor(y0)
    out = {
        "candle x.add_(y)": (lambda: x.add_(y), 3 * x0.nbytes),
        "candle x.copy_(x + y) (two passes)": (lambda: x.copy_(x + y), 5 * x0.nbytes),
        "candle x + y (out of place)": (lambda: x + y, 3 * x0.nbytes),
        "candle x.mul_(-1)": (lambda: x.mul_(-1), 2 * x0.nbytes),
        "candle x.copy_(x * -1) (two passes)": (lambda: x.copy_(x * -1), 4 * x0.nbytes),
    }
    if torch is not None:
        tx, ty = torch.from_numpy(x0.copy()), torch.from_numpy(y0)
        out["torch x.add_(y)"] = (lambda: tx.add_(ty), 3 * x0.nbytes)
        out["torch x.mul_(-1)"] = (lambda: tx.mul_(-1), 2 * x0.nbytes)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=9, help="interleaved repetitions (default 9)")
    parser.add_argument("--threads", type=int, default=int(harness.THREADS), help="threads of both libraries")
    args = parser.parse_args()
    harness.header(f"in-place ops on {N * 4 >> 20} MB float32, {args.threads} thread(s)")
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
        print("PyTorch is not installed: candle-api's times only (pip install torch==2.13.0 to compare)")
    c.utils.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(N).astype(np.float32)
    y0 = rng.standard_normal(N).astype(np.float32)
    runs = variants(torch, x0, y0)
    times = harness.interleaved({k: fn for k, (fn, _) in runs.items()}, reps=args.reps, target=0.2, pause=0.2)
    for name, (_, nbytes) in runs.items():
        t = harness.median(times[name])
        line = f"{name:38s} {1e3 * t:7.2f} ms (±{harness.spread(times[name]):3.0f}%) {nbytes / t / 1e9:5.1f} GB/s"
        baseline = "torch x.add_(y)" if "add" in name or "+" in name else "torch x.mul_(-1)"
        if baseline in times and not name.startswith("torch"):
            line += f"  {harness.median(times[baseline]) / t:.2f}x torch's {baseline[6:]}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
