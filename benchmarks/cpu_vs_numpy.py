"""candle-api's cpu backend against NumPy (OpenBLAS), same run, 1 and 2 threads.

For every case it prints candle-api's time, NumPy's time and the ratio
(NumPy time / candle-api time: above 1 means candle-api is faster), with the
targets of the "CPU backend at BLAS speed" issue:

- f32 matmul 256..4096 square: >= 1.0x at 512 and above (GFLOP/s also shown;
  the 4096 case as a fraction of the FMA peak measured by benchmarks/peak_fma.c);
- 1x4096 @ 4096x4096 (LLM decode) and 12 x (128x64 @ 64x128) (attention): >= 1.0x;
  decode's GB/s also against a plain parallel read of its matrix timed alongside
  (benchmarks/stream.c), the wall for a product that reads its matrix once;
- softmax / layer_norm / rms_norm / gelu on (64, 512, 768) f32: >= 2x NumPy's
  composite expression, also in GB/s against a parallel copy's, measured here;
- f64 matmul 1024: >= 0.9x.

Also reported, with no target: a short-sequence feed-forward product (64 x 384
@ 384 x 1536, MiniLM's), causal attention, a bf16 matmul against NumPy's f32
one on the same values (NumPy has no bf16 GEMM), and the f32 -> f16 / bf16
casts.

Method (as in shared/reference/perf_scripts): each thread count runs in its own
process with BLAS and candle-api pinned to it; within a repetition the variants
are interleaved, 0.2 s apart so the other library's spinning threads are
parked; each timing is a calibrated batch of back-to-back calls; medians of
11 repetitions (3 with --quick) are reported: this machine's memory bandwidth
drifts by a fifth from minute to minute, more than most margins here.

Each side's instruction set is printed: candle-api's code path, the core
type whose kernels OpenBLAS chose and the best of NumPy's own SIMD loops in
use. `--isa avx2` compares the AVX2 paths on any x86 machine: candle-api with
CANDLE_CPU_ISA=avx2, OpenBLAS with OPENBLAS_CORETYPE=Haswell (its AVX2
kernels) and NumPy's loops without their AVX-512 versions
(NPY_DISABLE_CPU_FEATURES), all set for the measuring process alone.

    python benchmarks/cpu_vs_numpy.py            # both thread counts, the best ISA
    python benchmarks/cpu_vs_numpy.py --isa avx2 --only "matmul f32"
    python benchmarks/cpu_vs_numpy.py --threads 1 --quick
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: --isa: OpenBLAS's core type whose kernels use the same instruction set as candle-api's path
#: (OpenBLAS has no portable-C core type on x86: its oldest, Prescott, is SSE3)
CORETYPES = {"avx512": "SkylakeX", "avx2": "Haswell", "scalar": "Prescott"}
#: --isa: NumPy's own loops (the composite expressions) held to the same instruction set: the
#: dispatch targets NPY_DISABLE_CPU_FEATURES turns off (NumPy 2's names and NumPy 1's; unknown
#: names are ignored; NumPy's baseline, SSE4.2 on x86-64 v2 builds, stays)
_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL"
NUMPY_DISABLED = {"avx512": "", "avx2": _AVX512, "scalar": "X86_V3 AVX AVX2 FMA3 F16C " + _AVX512}


# ---- the cases (built inside the measuring process) ---------------------------------------
def cases(quick: bool, only: str | None = None):
    out = all_cases(quick)
    return [case for case in out if only is None or only in case["name"]]


def all_cases(quick: bool):
    import numpy as np

    import candle_api as c

    rng = np.random.default_rng(0)
    out = []

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    sizes = (256, 512, 1024) if quick else (256, 512, 1024, 2048, 4096)
    for n in sizes:
        a, b = f32(n, n), f32(n, n)
        ta, tb = c.from_numpy(a), c.from_numpy(b)
        out.append(dict(name=f"matmul f32 {n}", flops=2 * n**3, target=1.0 if n >= 512 else None,
                        candle=lambda ta=ta, tb=tb: ta @ tb, numpy=lambda a=a, b=b: a @ b))
    x, w = f32(1, 4096), f32(4096, 4096)
    tx, tw = c.from_numpy(x), c.from_numpy(w)
    # decode reads its 64 MiB matrix once per call: a plain read of it, timed alongside, is the wall
    out.append(dict(name="decode 1x4096 @ 4096x4096", flops=2 * 4096 * 4096, read_bytes=w.nbytes, target=1.0,
                    candle=lambda: tx @ tw, numpy=lambda: x @ w, stream=lambda: stream_read(w)))
    q, k = f32(12, 128, 64), f32(12, 64, 128)
    tq, tk = c.from_numpy(q), c.from_numpy(k)
    out.append(dict(name="attention 12x(128x64 @ 64x128)", flops=2 * 12 * 128 * 128 * 64, target=1.0,
                    candle=lambda: tq @ tk, numpy=lambda: q @ k))
    # few rows and a wide B: the threads split B's columns
    xs, wf = f32(64, 384), f32(384, 1536)
    txs, twf = c.from_numpy(xs), c.from_numpy(wf)
    out.append(dict(name="feed-forward 64x384 @ 384x1536", flops=2 * 64 * 384 * 1536, target=None,
                    candle=lambda: txs @ twf, numpy=lambda: xs @ wf))
    hq, hk, hv = f32(1, 12, 512, 64), f32(1, 12, 512, 64), f32(1, 12, 512, 64)
    thq, thk, thv = c.from_numpy(hq), c.from_numpy(hk), c.from_numpy(hv)
    causal = np.tril(np.ones((512, 512), bool))

    def np_sdpa():
        s = np.where(causal, hq @ hk.swapaxes(-1, -2) * 0.125, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ hv

    out.append(dict(name="causal sdpa 12 heads 512x64", flops=4 * 12 * 512 * 512 * 64, target=None,
                    candle=lambda: c.functional.scaled_dot_product_attention(thq, thk, thv, is_causal=True),
                    numpy=np_sdpa))
    # NumPy has no bf16 GEMM: its baseline is f32 on the same (bf16-rounded) values. candle-api runs
    # bf16 x bf16 (AVX512-BF16 dot products where the CPU has them) and rounds the result to bf16.
    tab, tbb = c.from_numpy(f32(1024, 1024)).to_dtype("bf16"), c.from_numpy(f32(1024, 1024)).to_dtype("bf16")
    ab, bb = tab.to_dtype("f32").numpy(), tbb.to_dtype("f32").numpy()
    out.append(dict(name="matmul bf16 1024 (NumPy: f32)", flops=2 * 1024**3, target=None, tol=1e-2,
                    candle=lambda: tab @ tbb, numpy=lambda: ab @ bb))
    a64, b64 = rng.standard_normal((1024, 1024)), rng.standard_normal((1024, 1024))
    ta64, tb64 = c.from_numpy(a64), c.from_numpy(b64)
    out.append(dict(name="matmul f64 1024", flops=2 * 1024**3, target=0.9, candle=lambda: ta64 @ tb64,
                    numpy=lambda: a64 @ b64))

    act = f32(16 if quick else 64, 512, 768)
    tact = c.from_numpy(act)
    gamma, beta = np.ones(768, np.float32), np.zeros(768, np.float32)
    tg, tbeta = c.from_numpy(gamma), c.from_numpy(beta)
    nbytes = 2 * act.nbytes  # read the input once, write the output once

    def np_softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def np_layer_norm(x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta

    def np_rms_norm(x):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * gamma

    def np_gelu(x):
        return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

    shape = "x".join(map(str, act.shape))
    out += [
        dict(name=f"softmax {shape}", bytes=nbytes, target=2.0, candle=lambda: tact.softmax(-1),
             numpy=lambda: np_softmax(act)),
        dict(name=f"layer_norm {shape}", bytes=nbytes, target=2.0,
             candle=lambda: c.functional.layer_norm(tact, tg, tbeta, 1e-5), numpy=lambda: np_layer_norm(act)),
        dict(name=f"rms_norm {shape}", bytes=nbytes, target=2.0, candle=lambda: c.functional.rms_norm(tact, tg, 1e-6),
             numpy=lambda: np_rms_norm(act)),
        dict(name=f"gelu {shape}", bytes=nbytes, target=2.0, candle=lambda: tact.gelu(), numpy=lambda: np_gelu(act)),
        # casts, reported with no target (NumPy's bf16 is ml_dtypes')
        dict(name=f"cast f32->f16 {shape}", bytes=act.nbytes * 3 // 2, target=None, candle=lambda: tact.to_dtype("f16"),
             numpy=lambda: act.astype(np.float16)),
        dict(name=f"cast f32->bf16 {shape}", bytes=act.nbytes * 3 // 2, target=None,
             candle=lambda: tact.to_dtype("bf16"), numpy=lambda: act.astype(c.bf16.np)),
    ]
    return out


def compiled(name: str, out: str, *flags: str) -> Path:
    """benchmarks/NAME.c built with gcc into $TMPDIR/OUT, unless already newer than its source."""
    exe = Path(os.environ.get("TMPDIR", "/tmp")) / out
    src = HERE / f"{name}.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-mavx2", *flags, str(src), "-o", str(exe)], check=True, capture_output=True)
    return exe


@functools.cache
def stream_lib():
    """benchmarks/stream.c compiled here (cached): plain parallel reads and copies."""
    import ctypes

    lib = ctypes.CDLL(str(compiled("stream", "candle_bench_stream.so", "-fopenmp", "-shared", "-fPIC")))
    lib.stream_read.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.stream_read.restype = ctypes.c_double
    lib.stream_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.stream_copy.restype = None
    return lib


def stream_read(a) -> float:
    """Reads a (contiguous f32) once, in parallel."""
    assert a.flags.c_contiguous and a.dtype == "float32"
    return stream_lib().stream_read(a.ctypes.data, a.size)


def memory_bandwidth() -> float:
    """GB/s of a parallel copy of 256 MiB (read + write counted, the STREAM copy rule)."""
    import time

    import numpy as np

    src = np.random.default_rng(0).random(64 << 20, np.float32)  # no two pages alike
    dst = np.empty_like(src)

    def copy():
        stream_lib().stream_copy(dst.ctypes.data, src.ctypes.data, src.size)

    copy()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        copy()
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


def isas() -> dict:
    """The instruction sets each side runs: candle-api's code path, OpenBLAS's core type and the
    best of NumPy's own loops in use."""
    from candle_backend_cpu import library

    try:
        import threadpoolctl

        cores = [i.get("architecture") for i in threadpoolctl.threadpool_info() if i.get("internal_api") == "openblas"]
        blas = ", ".join(map(str, cores)) or "no OpenBLAS loaded"
    except ImportError:
        blas = "unknown (pip install threadpoolctl)"
    try:
        from numpy._core import _multiarray_umath as umath  # NumPy 2
    except ImportError:
        from numpy.core import _multiarray_umath as umath  # NumPy 1
    on = [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
    loops = on[-1] if on else "baseline " + " ".join(umath.__cpu_baseline__[-1:])
    return {"candle": library.describe(), "openblas": blas, "numpy": loops}


def measure(threads: int, quick: bool, only: str | None) -> dict:
    """Runs in a child process whose thread pools are pinned to `threads`."""
    import time

    import harness

    import candle_api as c

    assert c.utils.get_num_threads() == threads
    results = {"threads": threads, "bandwidth_gbs": memory_bandwidth(), "cases": []}
    # numpy's OpenBLAS loads with the cases: ask for its core type after
    todo = cases(quick, only)
    results["isa"] = isas()
    for case in todo:
        variants = {k: case[k] for k in ("candle", "numpy", "stream") if k in case}
        numbers = {k: harness.calibrate(f, target=0.1) for k, f in variants.items()}
        times = {k: [] for k in variants}
        for _ in range(3 if quick else 11):
            for k, f in variants.items():
                time.sleep(0.2)  # park the other library's spinning threads
                t0 = time.perf_counter()
                for _ in range(numbers[k]):
                    f()
                times[k].append((time.perf_counter() - t0) / numbers[k])
        entry = {key: case.get(key) for key in ("name", "flops", "bytes", "read_bytes", "target")}
        entry.update({k: harness.median(v) for k, v in times.items()})
        entry["spread"] = harness.spread(times["candle"])
        results["cases"].append(entry)
    return results


def peak_gflops(threads: int) -> float | None:
    """The machine's FMA peak, measured by compiling benchmarks/peak_fma.c (None without gcc)."""
    try:
        exe = compiled("peak_fma", "candle_peak_fma", "-mfma", "-pthread")
        out = subprocess.run([str(exe), str(threads)], capture_output=True, text=True, check=True).stdout
        return float(out.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None


def report(res: dict, peak: float | None) -> list[str]:
    t = res["threads"]
    print(f"\n== {t} thread(s): memory bandwidth (parallel copy) {res['bandwidth_gbs']:.1f} GB/s"
          + (f", FMA peak {peak:.0f} GFLOP/s" if peak else ""))
    isa = res["isa"]
    print(f"candle-api {isa['candle']}\nnumpy: OpenBLAS {isa['openblas']} kernels, NumPy's loops up to {isa['numpy']}")
    print(f"{'case':36s} {'candle-api':>12s} {'numpy':>12s} {'ratio':>7s} {'target':>7s}  detail")
    misses = []
    for c in res["cases"]:
        ratio = c["numpy"] / c["candle"]
        detail = []
        if c.get("flops"):
            gf = c["flops"] / c["candle"] / 1e9
            detail.append(f"{gf:.0f} vs {c['flops'] / c['numpy'] / 1e9:.0f} GFLOP/s")
            if peak and "4096" in c["name"] and "matmul" in c["name"]:
                detail.append(f"{100 * gf / peak:.0f}% of peak")
        if c.get("bytes"):
            gbs = c["bytes"] / c["candle"] / 1e9
            detail.append(f"{gbs:.1f} GB/s = {100 * gbs / res['bandwidth_gbs']:.0f}% of copy bandwidth")
        if c.get("read_bytes"):
            gbs = [c["read_bytes"] / c[k] / 1e9 for k in ("candle", "numpy", "stream")]
            detail.append(f"reads {gbs[0]:.1f} vs {gbs[1]:.1f} GB/s = {100 * gbs[0] / gbs[2]:.0f}% vs "
                          f"{100 * gbs[1] / gbs[2]:.0f}% of a plain read's {gbs[2]:.1f}")
        target = c.get("target")
        ok = target is None or ratio >= target
        if not ok:
            misses.append(f"{t}T {c['name']}: {ratio:.2f}x < {target}x")
        print(f"{c['name']:36s} {c['candle'] * 1e3:9.3f} ms {c['numpy'] * 1e3:9.3f} ms {ratio:6.2f}x "
              f"{'' if target is None else f'>={target}':>7s}  {'; '.join(detail)}"
              + ("" if ok else "  MISSES TARGET") + f"  (spread {c['spread']:.0f}%)")
    return misses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, action="append", help="1 and 2 by default")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions (a smoke run)")
    parser.add_argument("--isa", choices=sorted(CORETYPES),
                        help="run candle-api on this code path (CANDLE_CPU_ISA) and OpenBLAS on its kernels for "
                             "the same instruction set (OPENBLAS_CORETYPE); default: each side's best")
    parser.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(HERE))
        print(json.dumps(measure(args.threads[0], args.quick, args.only)))
        return 0
    import harness

    harness.header("candle-api cpu backend vs NumPy" + (f", {args.isa} on both sides" if args.isa else ""))
    misses = []
    for threads in args.threads or [1, 2]:
        env = dict(os.environ, CANDLE_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), BENCH_THREADS=str(threads))
        if args.isa:
            env.update(CANDLE_CPU_ISA=args.isa, OPENBLAS_CORETYPE=CORETYPES[args.isa],
                       NPY_DISABLE_CPU_FEATURES=NUMPY_DISABLED[args.isa])
        cmd = [sys.executable, __file__, "--child", "--threads", str(threads)] + (["--quick"] if args.quick else [])
        cmd += ["--only", args.only] if args.only else []
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return proc.returncode
        misses += report(json.loads(proc.stdout.strip().splitlines()[-1]), peak_gflops(threads))
    print("\nall targets met" if not misses else "\ntargets missed:\n  " + "\n  ".join(misses))
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
