"""The standard benchmark cases, the same for every backend and baseline.

Each :class:`BenchCase` makes its inputs as NumPy arrays from a seeded
generator and says how to run the same computation in each framework:
``candle`` (candle-api on any device: the cpu plugin on each of its code paths,
a kernel plugin such as mkl, the ref device, cuda...), ``numpy`` and
``torch`` (None where the framework has no such op). The pytest-benchmark
module beside the conformance suite (``candle_api.testing.benchmarks``) and
``candle bench`` both run them.

``kernel`` names the kernel a case measures (``op/dtype``, or
``op/dtype@kind`` where a kernel plugin tells shapes apart): ``candle bench``
compares a kernel plugin with the device's own kernels on these cases and
writes which one serves each kernel on this machine
(:mod:`candle_api.kernel_choice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

FRAMEWORKS = ("candle", "numpy", "torch")


@dataclass(frozen=True)
class BenchCase:
    name: str
    group: str
    make: Callable                 # make(rng) -> tuple of numpy arrays (bf16 as ml_dtypes.bfloat16)
    candle: Callable               # candle(*tensors) -> Tensor or QTensor result
    numpy: Callable | None = None  # numpy(*arrays)
    torch: Callable | None = None  # torch(*tensors), given ``torch`` as its first argument
    work: float = 0.0              # floating point operations per call (0: not counted)
    kernel: str = ""               # the kernel it measures, for kernel choices
    quick: bool = False            # part of --quick
    prepare: Callable | None = None  # prepare(device, *tensors) -> tensors: set-up outside the timing


SEED = 20261127


def runner(case: BenchCase, framework: str, device=None):
    """A function of no arguments that runs the case once in ``framework`` on its inputs (made here, from
    :data:`SEED`), or None where the framework has no such op. ``device``: candle's device."""
    run = getattr(case, framework)
    if run is None:
        return None
    arrays = case.make(np.random.default_rng(SEED))
    if framework == "numpy":
        return lambda: run(*arrays)
    if framework == "torch":
        import torch

        tensors = [torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16) if a.dtype.name == "bfloat16"
                   else torch.from_numpy(a) for a in arrays]
        return lambda: run(torch, *tensors)
    from ..device import get_device
    from ..ops.creation import from_array

    device = get_device(device)
    tensors = [from_array(a, None, device) for a in arrays]
    if case.prepare:
        tensors = case.prepare(device, *tensors)
    return lambda: run(*tensors)


def _values(rng, shape, dtype="f32", lo=-1.0, hi=1.0):
    from ..dtype import get_dtype

    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(get_dtype(dtype).np)


def _gemm(n: int, dtype: str = "f32", quick: bool = False) -> BenchCase:
    return BenchCase(f"gemm {dtype} {n}", "gemm", lambda rng: (_values(rng, (n, n), dtype), _values(rng, (n, n), dtype)),
                     candle=lambda a, b: a @ b, numpy=None if dtype == "bf16" else (lambda a, b: a @ b),
                     torch=lambda torch, a, b: a @ b, work=2.0 * n**3, kernel=f"matmul/{dtype}@gemm", quick=quick)


def _gemv(k: int, n: int, dtype: str = "f32", quick: bool = False) -> BenchCase:
    """One decoded token through a (k, n) weight: a row times a matrix, bound by memory bandwidth."""
    return BenchCase(f"decode gemv {dtype} {k}x{n}", "gemv",
                     lambda rng: (_values(rng, (1, k), dtype), _values(rng, (k, n), dtype)),
                     candle=lambda x, w: x @ w, numpy=lambda x, w: x @ w, torch=lambda torch, x, w: x @ w,
                     work=2.0 * k * n, kernel=f"matmul/{dtype}@gemv", quick=quick)


def _attention(batch=8, heads=12, seq=128, dim=64, quick=False) -> list:
    shape = (batch, heads, seq, dim)

    def make(rng):
        return tuple(_values(rng, shape) for _ in range(3))

    def numpy_sdpa(q, k, v):
        s = q @ np.swapaxes(k, -1, -2) * (dim ** -0.5)
        s = np.exp(s - s.max(-1, keepdims=True))
        return (s / s.sum(-1, keepdims=True)) @ v

    def candle_sdpa(q, k, v):
        from .. import functional as F

        return F.scaled_dot_product_attention(q, k, v)

    label = f"{batch}x{heads}x{seq}x{dim}"
    return [
        BenchCase(f"attention scores bmm {label}", "attention", make, candle=lambda q, k, v: q @ k.transpose(-1, -2),
                  numpy=lambda q, k, v: q @ np.swapaxes(k, -1, -2), torch=lambda torch, q, k, v: q @ k.transpose(-1, -2),
                  work=2.0 * batch * heads * seq * seq * dim, kernel="matmul/f32@gemm", quick=quick),
        BenchCase(f"attention sdpa {label}", "attention", make, candle=candle_sdpa, numpy=numpy_sdpa,
                  torch=lambda torch, q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
                  work=4.0 * batch * heads * seq * seq * dim, quick=quick),
    ]


def _rowwise(rows=8192, cols=768, quick=False) -> list:
    def np_softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def np_layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * w + b

    def candle_layer_norm(x, w, b):
        from .. import functional as F

        return F.layer_norm(x, w, b, 1e-5)

    norm_inputs = lambda rng: (_values(rng, (rows, cols)), _values(rng, (cols,), lo=0.5, hi=1.5),  # noqa: E731
                               _values(rng, (cols,)))
    return [
        BenchCase(f"softmax {rows}x{cols}", "rowwise", lambda rng: (_values(rng, (rows, cols), lo=-4, hi=4),),
                  candle=lambda x: x.softmax(-1), numpy=np_softmax, torch=lambda torch, x: torch.softmax(x, -1),
                  quick=quick),
        BenchCase(f"layer_norm {rows}x{cols}", "rowwise", norm_inputs, candle=candle_layer_norm, numpy=np_layer_norm,
                  torch=lambda torch, x, w, b: torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5), quick=quick),
    ]


def _conv2d(batch=8, channels=64, size=56, quick=False) -> BenchCase:
    def candle_conv(x, w):
        from .. import functional as F

        return F.conv2d(x, w, padding=1)

    return BenchCase(f"conv2d 3x3 {batch}x{channels}x{size}x{size}", "conv",
                     lambda rng: (_values(rng, (batch, channels, size, size)), _values(rng, (channels, channels, 3, 3))),
                     candle=candle_conv, torch=lambda torch, x, w: torch.nn.functional.conv2d(x, w, padding=1),
                     work=2.0 * batch * channels * channels * 9 * size * size, quick=quick)


def _qmatmul(rows: int, k: int = 4096, n: int = 4096, qtype: str = "q4_0", quick: bool = False) -> BenchCase:
    """Activations (rows, k) times a (n, k) weight kept in a GGML block type: a decode step (1 row) or a
    prefill (many)."""

    def quantize(device, x, w):
        from ..quantized import QTensor

        return x, QTensor.quantize(w, qtype)

    return BenchCase(f"qmatmul {qtype} {rows}x{k}x{n}", "quantized",
                     lambda rng: (_values(rng, (rows, k)), _values(rng, (n, k))),
                     candle=lambda x, q: q.matmul_t(x), work=2.0 * rows * k * n, prepare=quantize, quick=quick)


def _unary(op: str, dtype: str = "f32", size: int = 1 << 20, lo: float = -4.0, hi: float = 4.0,
           quick: bool = False) -> BenchCase:
    np_op = {"log": np.log, "tanh": np.tanh, "exp": np.exp, "sin": np.sin, "cos": np.cos, "sqrt": np.sqrt}.get(op)
    torch_op = (lambda torch, x: getattr(torch, op)(x))
    return BenchCase(f"{op} {dtype} {size >> 20}M", "vector math", lambda rng: (_values(rng, (size,), dtype, lo, hi),),
                     candle=lambda x: getattr(x, op)(), numpy=np_op, torch=torch_op, kernel=f"{op}/{dtype}",
                     quick=quick)


def _powf(dtype="f32", size=1 << 20) -> BenchCase:
    return BenchCase(f"powf 2.5 {dtype} {size >> 20}M", "vector math",
                     lambda rng: (_values(rng, (size,), dtype, 0.1, 3.0),), candle=lambda x: x.powf(2.5),
                     numpy=lambda x: x ** np.float32(2.5), torch=lambda torch, x: x ** 2.5, kernel=f"powf/{dtype}")


def _sorting(quick=False) -> list:
    """Stable sorts and top-k along the last dim, values and indices, against NumPy's stable argsort (with
    argpartition for top-k) and PyTorch's sort(stable=True) and topk."""

    def np_sort(x):
        idx = np.argsort(x, axis=-1, kind="stable")
        return np.take_along_axis(x, idx, -1), idx

    def np_topk(k):
        def run(x):
            part = np.argpartition(-x, k - 1, axis=-1)[..., :k]
            order = np.take_along_axis(part, np.argsort(-np.take_along_axis(x, part, -1), -1, kind="stable"), -1)
            return np.take_along_axis(x, order, -1), order

        return run

    def make(shape, dtype):
        if dtype == "i64":
            return lambda rng: (rng.integers(-(1 << 62), 1 << 62, shape),)
        return lambda rng: (_values(rng, shape, dtype),)

    def sort_case(rows, n, dtype="f32"):
        return BenchCase(f"sort {dtype} {rows}x{n}", "sorting", make((rows, n), dtype),
                         candle=lambda x: x.sort(-1), numpy=np_sort,
                         torch=lambda torch, x: torch.sort(x, dim=-1, stable=True), kernel=f"sort_last/{dtype}",
                         quick=quick)

    def topk_case(k, rows, n):
        return BenchCase(f"topk {k} f32 {rows}x{n}", "sorting", lambda rng: (_values(rng, (rows, n)),),
                         candle=lambda x: x.topk(k), numpy=np_topk(k), torch=lambda torch, x: torch.topk(x, k),
                         kernel="topk_last/f32", quick=quick)

    return [sort_case(1, 32768), sort_case(1, 1 << 20), sort_case(512, 1024), sort_case(1, 1 << 20, "i64"),
            topk_case(50, 1, 32768), topk_case(50, 64, 32000), topk_case(1000, 1, 1 << 20)]


def _overhead() -> list:
    """The cost of one op on tiny tensors: dispatch, allocation, the call."""
    make = lambda rng: (_values(rng, (4,)), _values(rng, (4,)))  # noqa: E731
    return [
        BenchCase("per-op overhead: add 4 f32", "overhead", make, candle=lambda a, b: a + b, numpy=lambda a, b: a + b,
                  torch=lambda torch, a, b: a + b, quick=True),
        BenchCase("per-op overhead: exp 4 f32", "overhead", make, candle=lambda a, b: a.exp(), numpy=lambda a, b: np.exp(a),
                  torch=lambda torch, a, b: a.exp(), quick=True),
    ]


def standard_cases() -> list[BenchCase]:
    """Every case of ``candle bench``, in report order; ``quick`` marks those of ``--quick``."""
    return [
        _gemm(512, quick=True), _gemm(1024, quick=True), _gemm(2048), _gemm(4096),
        _gemm(1024, "f64"), _gemm(1024, "bf16", quick=True),
        _gemv(4096, 4096, quick=True), _gemv(4096, 4096, "f64"), _gemv(4096, 4096, "bf16"),
        *_attention(quick=True),
        *_rowwise(quick=True),
        _conv2d(quick=True),
        _qmatmul(1, quick=True), _qmatmul(64),
        _unary("exp", quick=True), _unary("exp", "f64"), _unary("log", lo=0.01, hi=4.0), _unary("tanh", quick=True),
        _unary("erf"), _unary("sin"), _unary("cos"), _unary("sqrt", lo=0.0, hi=4.0), _powf(),
        *_sorting(),
        *_overhead(),
    ]
