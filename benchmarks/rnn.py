"""nn.LSTM and nn.GRU inference against PyTorch CPU in the same run: 2 layers,
bidirectional, input 512, hidden 256, 100 steps, batch 1 and 16, float32,
on 1 and 2 threads (PyTorch from ``pip install torch==2.13.0``; without it,
candle-api's times only).

Both libraries run the same weights and input (the outputs are compared as a
check); repetitions interleave the two, with a pause before each block so
the other library's spinning threads are parked. Prints the medians with
their spread and the speed ratio (PyTorch's time / candle-api's: above 1.0
candle-api is faster). The bar is 1.0 for the LSTM at both batch sizes and
both thread counts; the GRU is reported.

    python benchmarks/rnn.py [--reps 7]
"""

from __future__ import annotations

import argparse
import sys

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c
from candle_api import nn
from candle_api.autograd import no_grad

INPUT, HIDDEN, LAYERS, STEPS = 512, 256, 2, 100
BATCHES, THREADS = (1, 16), (1, 2)
BAR = 1.0


def candle_runner(cls: str, state: dict, x: np.ndarray):
    model = getattr(nn, cls)(INPUT, HIDDEN, num_layers=LAYERS, bidirectional=True).eval()
    model.load_state_dict({k: c.Tensor(v) for k, v in state.items()})
    tx = c.Tensor(x)

    def run():
        with no_grad():
            return model(tx)[0].numpy()

    return run


def torch_runner(torch, cls: str, state: dict, x: np.ndarray):
    model = getattr(torch.nn, cls)(INPUT, HIDDEN, num_layers=LAYERS, bidirectional=True).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    tx = torch.from_numpy(x)

    def run():
        with torch.inference_mode():
            return model(tx)[0].numpy()

    return run


def weights(cls: str, rng) -> dict:
    """PyTorch's initialization, U(-1/sqrt(hidden), 1/sqrt(hidden)), from the shapes nn.LSTM / nn.GRU register."""
    bound = 1 / np.sqrt(HIDDEN)
    shapes = {k: v.shape for k, v in getattr(nn, cls)(INPUT, HIDDEN, num_layers=LAYERS,
                                                        bidirectional=True).state_dict().items()}
    return {k: rng.uniform(-bound, bound, s).astype(np.float32) for k, s in shapes.items()}


def measure(cls: str, batch: int, threads: int, torch, reps: int, rng) -> float | None:
    """Prints one line; returns the speed ratio (None without PyTorch)."""
    state = weights(cls, rng)
    x = rng.standard_normal((STEPS, batch, INPUT)).astype(np.float32)
    variants = {"candle-api": candle_runner(cls, state, x)}
    if torch is not None:
        variants["pytorch"] = torch_runner(torch, cls, state, x)
        diff = float(np.abs(variants["candle-api"]() - variants["pytorch"]()).max())
    times = harness.interleaved(variants, reps=reps, target=0.2, pause=0.2)
    ms = {name: 1e3 * harness.median(t) for name, t in times.items()}
    line = (f"{cls} batch {batch:2d}, {threads} thread(s): candle-api {ms['candle-api']:7.2f} ms "
            f"(±{harness.spread(times['candle-api']):.0f}%)")
    if torch is None:
        print(line, flush=True)
        return None
    ratio = ms["pytorch"] / ms["candle-api"]
    print(f"{line}, pytorch {ms['pytorch']:7.2f} ms (±{harness.spread(times['pytorch']):.0f}%): "
          f"{ratio:.2f}x PyTorch's speed (max |difference| {diff:.1e})", flush=True)
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (default 7)")
    args = parser.parse_args()
    harness.header(f"nn.LSTM / nn.GRU inference, {LAYERS} layers, bidirectional, input {INPUT}, hidden {HIDDEN}, "
                   f"{STEPS} steps, float32")
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch is not installed: candle-api's times only (pip install torch==2.13.0 to compare)")
    rng = np.random.default_rng(0)
    misses = []
    for threads in THREADS:
        c.utils.set_num_threads(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        for cls in ("LSTM", "GRU"):
            for batch in BATCHES:
                ratio = measure(cls, batch, threads, torch, args.reps, rng)
                if cls == "LSTM" and ratio is not None and ratio < BAR:
                    misses.append(f"LSTM batch {batch}, {threads} thread(s): {ratio:.2f}x")
    if torch is not None:
        verdict = "met" if not misses else "missed: " + ", ".join(misses)
        print(f"bar (LSTM at least {BAR}x PyTorch's speed): {verdict}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
