"""LLM decode (1x4096 @ 4096x4096 f32) against NumPy/OpenBLAS over many
interleaved pairs, for a margin smaller than the machine's drift.

Both libraries stream the 64 MiB matrix at close to the memory's rate, so the
ratio of one short run moves with the bandwidth of the moment. Here every
repetition times a batch of candle-api calls and then a batch of NumPy calls
(0.2 s apart, so the other library's spinning threads are parked), and the
distribution of the per-pair ratios (NumPy time / candle-api time) is printed.

    python benchmarks/decode_pairs.py                 # 2 threads, 150 pairs
    python benchmarks/decode_pairs.py --threads 1 --pairs 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=150)
    args = parser.parse_args()
    # before numpy and candle_api are imported: pins BLAS and the backend to the thread count
    os.environ["BENCH_THREADS"] = os.environ["CANDLE_NUM_THREADS"] = str(args.threads)
    import harness
    import numpy as np

    import candle_api as c

    assert c.utils.get_num_threads() == args.threads
    harness.header(f"decode pairs, {args.threads} thread(s)")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4096)).astype(np.float32)
    w = rng.standard_normal((4096, 4096)).astype(np.float32)
    tx, tw = c.from_numpy(x), c.from_numpy(w)
    np.testing.assert_allclose((tx @ tw).numpy(), x @ w, rtol=1e-3, atol=1e-3 * float(np.abs(x @ w).max()))
    times = harness.interleaved({"candle": lambda: tx @ tw, "numpy": lambda: x @ w}, reps=args.pairs,
                                target=0.05, pause=0.2)
    ratios = sorted(n / m for n, m in zip(times["numpy"], times["candle"]))

    def q(f):
        return ratios[min(len(ratios) - 1, int(f * len(ratios)))]

    print(f"candle-api {statistics.median(times['candle']) * 1e3:.3f} ms, "
          f"numpy {statistics.median(times['numpy']) * 1e3:.3f} ms (medians)")
    print(f"ratio over {len(ratios)} pairs: median {statistics.median(ratios):.3f}x, "
          f"quartiles {q(0.25):.3f}-{q(0.75):.3f}x, {100 * sum(r < 1 for r in ratios) / len(ratios):.0f}% below 1.0")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
