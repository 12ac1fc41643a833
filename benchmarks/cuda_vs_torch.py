"""The cuda device against PyTorch on the same GPU, same run: the issue's bar
(docs/cuda.md) in one table.

- copy: a device-to-device copy (bytes read + written per second), the
  ceiling the memory-bound ops are held to;
- element-wise ops, softmax and layer_norm: GB/s, and the share of the
  measured copy bandwidth (the bar: 80%);
- bf16 GEMM 4096 and 8192: TFLOP/s against torch's (the bar: 0.9x);
- SDPA (causal, bf16, head dim 128): against torch's flash SDPA (the bar: 0.8x);
- decode: a 1-row product with a 4096x4096 weight, bf16 against torch, and
  Q4_0 (the GEMV on quantized blocks) against torch's bf16.

The bar's model rows (MiniLM embeddings, SmolLM2 decoding against
transformers) are benchmarks/cuda_models.py.

Method: each repetition times every case on both sides, interleaved; a
timing is a calibrated batch ended by a synchronize; medians and (min-max)
spreads of 5 repetitions (3 with --quick). Ratio > 1: candle is faster.

    python benchmarks/cuda_vs_torch.py [--quick] [--device cuda:0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import candle_api as c
import candle_api.functional as CF
from candle_api.quantized import QTensor

DEVICE = None  # the candle device under test (main)


def timed(fn, sync, min_time: float) -> float:
    fn()
    sync()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or n >= 1 << 14:
            return elapsed / n
        n *= 2


def cases(torch, tdev, quick: bool, tiny: bool):
    """(name, unit, work per call, candle fn, torch fn). tiny: small shapes (a smoke run of this script)."""
    import torch.nn.functional as F

    g = torch.Generator(device=tdev).manual_seed(0)

    def pair(*shape, dtype="f32"):
        t = torch.randn(*shape, generator=g, device=tdev, dtype=getattr(torch, {"f32": "float32", "bf16": "bfloat16",
                                                                                  "f16": "float16"}[dtype]))
        return c.Tensor(t.float().cpu().numpy(), device=DEVICE).to_dtype(dtype), t

    out = []
    n = 1 << (12 if tiny else 26 if quick else 28)
    x, tx = pair(n)
    y, ty = pair(n)
    out.append(("copy f32", "GB/s", 8 * n, lambda: x.copy(), lambda: tx.clone()))
    out.append(("add f32", "GB/s", 12 * n, lambda: x + y, lambda: tx + ty))
    out.append(("exp f32", "GB/s", 8 * n, lambda: x.exp(), lambda: tx.exp()))
    h, th = pair(n, dtype="bf16")
    out.append(("gelu bf16", "GB/s", 4 * n, lambda: h.gelu(), lambda: F.gelu(th, approximate="tanh")))
    d = 64 if tiny else 4096
    m, tm = pair(16 if tiny else 4096 if quick else 16384, d)
    out.append((f"softmax {d}", "GB/s", 8 * m.numel(), lambda: m.softmax(-1), lambda: tm.softmax(-1)))
    w, tw = pair(d)
    b, tb = pair(d)
    out.append((f"layer_norm {d}", "GB/s", 8 * m.numel(), lambda: CF.layer_norm(m, w, b),
                lambda: F.layer_norm(tm, (d,), tw, tb)))
    for size in (64,) if tiny else (4096,) if quick else (4096, 8192):
        a, ta = pair(size, size, dtype="bf16")
        bb, tbb = pair(size, size, dtype="bf16")
        out.append((f"gemm bf16 {size}", "TFLOP/s", 2 * size**3, lambda a=a, bb=bb: a @ bb,
                    lambda ta=ta, tbb=tbb: ta @ tbb))
    b_, h_, s_ = (1, 2, 64) if tiny else (4, 32, 2048)
    q, tq = pair(b_, h_, s_, 128, dtype="bf16")
    k, tk = pair(b_, h_, s_, 128, dtype="bf16")
    v, tv = pair(b_, h_, s_, 128, dtype="bf16")
    flops = 4 * b_ * h_ * s_ * s_ * 128 / 2  # causal: half the score matrix
    out.append(("sdpa causal bf16", "TFLOP/s", flops,
                lambda: CF.scaled_dot_product_attention(q, k, v, is_causal=True),
                lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)))
    k_ = 256 if tiny else 4096
    xd, txd = pair(1, k_, dtype="bf16")
    wd, twd = pair(k_, k_, dtype="bf16")
    out.append((f"decode bf16 1x{k_} @ W^T", "GB/s", 2 * k_ * k_, lambda: xd @ wd.t(), lambda: txd @ twd.t()))
    qw = QTensor.quantize(wd.to_dtype("f32"), "q4_0")
    xf = xd.to_dtype("f32")
    out.append(("decode q4_0 vs torch bf16", "GB/s", 2 * k_ * k_, lambda: qw.matmul_t(xf), lambda: txd @ twd.t()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--tiny", action="store_true", help="small shapes, torch on its cpu: a smoke run of the script")
    args = parser.parse_args()
    import torch

    global DEVICE
    dev = DEVICE = c.get_device(args.device)
    tdev = torch.device("cpu") if args.tiny else torch.device("cuda", dev.index)
    sync = (lambda: None) if args.tiny else (lambda: torch.cuda.synchronize(tdev))
    name = "cpu" if args.tiny else torch.cuda.get_device_name(tdev)
    print(f"device: {dev.backend.gpu.describe()}; torch {torch.__version__} ({name})")
    reps = 1 if args.tiny else 3 if args.quick else 5
    prepared = cases(torch, tdev, args.quick, args.tiny)
    times = {name: ([], []) for name, *_ in prepared}
    failed = {}
    for _ in range(reps):
        for name, _unit, _work, ours, theirs in prepared:
            if name in failed:
                continue
            try:
                times[name][0].append(timed(ours, dev.synchronize, 0.0 if args.tiny else 0.2))
            except Exception as e:  # noqa: BLE001 (a case that fails is reported, and the others still run)
                failed[name] = f"{type(e).__name__}: {e}"
                continue
            times[name][1].append(timed(theirs, sync, 0.0 if args.tiny else 0.2))
    copy_work = next(work for name, _unit, work, *_ in prepared if name == "copy f32")
    copy_bw = copy_work / statistics.median(times["copy f32"][1]) / 1e9
    print(f"\n{'case':28} {'candle':>22} {'torch':>22} {'ratio':>7}  note")
    for name, unit, work, *_ in prepared:
        if name in failed:
            print(f"{name:28} FAILED: {failed[name]}")
            continue
        ours, theirs = times[name]
        scale = 1e12 if unit == "TFLOP/s" else 1e9
        rate = lambda ts: f"{work / statistics.median(ts) / scale:8.1f} ({work / max(ts) / scale:.0f}-{work / min(ts) / scale:.0f})"
        ratio = statistics.median(theirs) / statistics.median(ours)
        note = f"{work / statistics.median(ours) / 1e9 / copy_bw:.0%} of torch's copy" if unit == "GB/s" else ""
        print(f"{name:28} {rate(ours):>22} {rate(theirs):>22} {ratio:7.2f}  {note}")
    print(f"(copy bandwidth, torch: {copy_bw:.0f} GB/s read + written)")
    if failed:
        raise SystemExit(f"{len(failed)} case(s) failed")


if __name__ == "__main__":
    main()
