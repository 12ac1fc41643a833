"""Which MKL threading layer the mkl plugin uses: MKL's GEMM next to the cpu
plugin's own thread pool, as in a model (a product, then a row-wise op on
the cpu plugin, then a product...).

Each variant runs in its own process (the layer and the OpenMP runtime's wait
policy are fixed when MKL first runs); variants are interleaved, one process
per variant per repetition. For each it prints the median time of:

- ``gemm``: a 512x512x512 f32 product alone (MKL);
- ``softmax``: a (2048, 768) f32 softmax alone (the cpu plugin's pool);
- ``mixed``: the two alternately, per pair; ``interference`` is mixed minus
  the two alone: the cost of the two pools meeting;
- ``decode``: a (1, 4096) x (4096, 4096) product then a small cpu-plugin op,
  per pair.

Usage::

    python benchmarks/mkl_threading.py                  # every variant, 2 threads, 5 repetitions
    python benchmarks/mkl_threading.py --reps 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "pool (the plugin's)": {"CANDLE_MKL_THREADING": "pool"},
    "sequential": {"CANDLE_MKL_THREADING": "sequential"},
    "gnu": {"CANDLE_MKL_THREADING": "gnu"},
    "gnu, OMP_WAIT_POLICY=passive": {"CANDLE_MKL_THREADING": "gnu", "OMP_WAIT_POLICY": "passive"},
    "intel, KMP_BLOCKTIME=200 (its default)": {"CANDLE_MKL_THREADING": "intel", "KMP_BLOCKTIME": "200"},
    "intel, KMP_BLOCKTIME=0": {"CANDLE_MKL_THREADING": "intel"},
}
MEASURES = ("gemm", "softmax", "mixed", "interference", "decode")

CHILD = r"""
import json, time
import numpy as np
import candle_api as c
from candle_api.info import kernel_providers
from candle_backend_mkl import library

assert kernel_providers("cpu")["matmul"]["f32"] == "mkl"
rng = np.random.default_rng(0)
a = c.Tensor(rng.standard_normal((512, 512)).astype(np.float32))
x = c.Tensor(rng.standard_normal((2048, 768)).astype(np.float32))
row = c.Tensor(rng.standard_normal((1, 4096)).astype(np.float32))
w = c.Tensor(rng.standard_normal((4096, 4096)).astype(np.float32))
small = c.Tensor(rng.standard_normal((1, 4096)).astype(np.float32))

def per_call(fn, seconds=0.4):
    fn(); n = 0; t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn(); n += 1
    return (time.perf_counter() - t0) / n

out = {"gemm": per_call(lambda: a @ a), "softmax": per_call(lambda: x.softmax(-1))}
out["mixed"] = per_call(lambda: (a @ a, x.softmax(-1)))
out["interference"] = out["mixed"] - out["gemm"] - out["softmax"]
out["decode"] = per_call(lambda: ((row @ w) + small).exp())
out["about"] = library.describe()
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME")}
    base.update(CANDLE_NUM_THREADS=str(args.threads), CANDLE_FORCE_PLUGINS="mkl")
    runs = {name: [] for name in VARIANTS}
    for _ in range(args.reps):
        for name, env in VARIANTS.items():
            proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                                  env={**base, **env}, timeout=300)
            if proc.returncode != 0:
                print(f"{name}: failed: {proc.stderr.strip()[-500:]}", file=sys.stderr)
                continue
            runs[name].append(json.loads(proc.stdout))
            time.sleep(0.2)
    print(f"MKL threading layers next to the cpu plugin's pool, {args.threads} threads, medians of {args.reps} "
          "interleaved processes (ms; spread (max - min) / median in brackets)")
    print(f"{'variant':<40}" + "".join(f"{m:>20}" for m in MEASURES))
    for name, results in runs.items():
        if not results:
            continue
        cells = []
        for m in MEASURES:
            xs = [r[m] * 1e3 for r in results]
            med = statistics.median(xs)
            spread = (max(xs) - min(xs)) / abs(med) * 100 if med else 0
            cells.append(f"{med:>11.3f} (±{spread:3.0f}%)")
        print(f"{name:<40}" + "".join(f"{c:>20}" for c in cells))
    for name, results in runs.items():
        if results:
            print(f"{name}: {results[0]['about']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
