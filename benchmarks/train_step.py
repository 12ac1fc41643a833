"""One training step of an MLP (batch 128, 784-512-512-10, cross-entropy,
AdamW): candle-api against PyTorch CPU in the same run, when PyTorch is
installed (``pip install torch==2.13.0``), with 1 and 2 threads.

Prints each library's time per step and the ratio (candle-api time /
PyTorch time; the target is at most 1.5x). The two models start from the same
weights and data, so their losses are printed side by side as a check.

    python benchmarks/train_step.py
"""

from __future__ import annotations

import sys
import time

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c
from candle_api import nn, optim

TARGET = 1.5
BATCH, SIZES = 128, (784, 512, 512, 10)


def weights(rng):
    """PyTorch's Linear initialization, as numpy arrays: [(w (out, in), b (out,))...]."""
    out = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:]):
        bound = 1 / np.sqrt(fan_in)
        out.append((rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                    rng.uniform(-bound, bound, fan_out).astype(np.float32)))
    return out


def candle_step(params, x, y):
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    for layer, (w, b) in zip([m for m in model if isinstance(m, nn.Linear)], params):
        layer.weight.set(c.Tensor(w))
        layer.bias.set(c.Tensor(b))
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    tx, ty = c.Tensor(x), c.Tensor(y)

    def step():
        loss = nn.loss.cross_entropy(model(tx), ty)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.item())

    return step


def torch_step(torch, params, x, y):
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    with torch.no_grad():
        for layer, (w, b) in zip([m for m in model if isinstance(m, torch.nn.Linear)], params):
            layer.weight.copy_(torch.from_numpy(w))
            layer.bias.copy_(torch.from_numpy(b))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.item())

    return step


def main() -> int:
    harness.header("MLP training step (batch 128, 784-512-512-10, AdamW)")
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch is not installed: candle-api's times only (pip install torch==2.13.0 to compare)")
    rng = np.random.default_rng(0)
    params = weights(rng)
    x = rng.standard_normal((BATCH, 784)).astype(np.float32)
    y = rng.integers(0, 10, BATCH).astype(np.int64)
    misses = []
    for threads in (1, 2):
        c.utils.set_num_threads(threads)
        variants = {"candle-api": candle_step(params, x, y)}
        if torch is not None:
            torch.set_num_threads(threads)
            variants["pytorch"] = torch_step(torch, params, x, y)
        first = {name: step() for name, step in variants.items()}  # same weights: same first loss
        times = {name: [] for name in variants}
        for _ in range(7):
            for name, step in variants.items():
                time.sleep(0.1)  # park the other library's spinning threads
                t0 = time.perf_counter()
                for _ in range(10):
                    step()
                times[name].append((time.perf_counter() - t0) / 10)
        ms = {name: 1e3 * harness.median(t) for name, t in times.items()}
        line = f"{threads} thread(s): candle-api {ms['candle-api']:.2f} ms/step (first loss {first['candle-api']:.5f})"
        if torch is not None:
            ratio = ms["candle-api"] / ms["pytorch"]
            line += (f", pytorch {ms['pytorch']:.2f} ms/step (first loss {first['pytorch']:.5f}): "
                     f"{ratio:.2f}x PyTorch's time, target <= {TARGET}x")
            if ratio > TARGET:
                misses.append(f"{threads} thread(s): {ratio:.2f}x")
        print(line)
    print("target met" if not misses else "target missed: " + ", ".join(misses))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
