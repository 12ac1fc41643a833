"""The kernels this plugin can serve for the cpu device, and which of them it
serves on this machine.

A kernel key is ``op/dtype``, or ``matmul/dtype@gemm`` and ``@gemv`` for the
two kinds of product told apart (a matrix-vector product when m or n is 1 in
an unbatched product). ``CANDLE_FORCE_PLUGINS=mkl`` serves them all; otherwise
the verdicts ``candle bench`` wrote for this machine
(:mod:`candle_api.kernel_choice`), and for a key it did not measure,
:func:`defaults`. Each served kernel falls back to the cpu plugin's kernel for
the layouts MKL cannot take.
"""

from __future__ import annotations

from functools import partial

from candle_api.dtype import get_dtype
from candle_api.kernel_choice import forced, machine, read

from . import blas, vml

PLUGIN = "mkl"
MATMUL_KINDS = (blas.GEMM, blas.GEMV)

#: Every key, in a stable order.
KEYS = tuple([f"matmul/{d}@{kind}" for d in ("f32", "f64", "bf16") for kind in MATMUL_KINDS]
             + [f"{op}/{d}" for op in (*vml.UNARY, "powf", "pow") for d in ("f32", "f64")])

#: Served where no benchmark chose (no file, or one from another machine) on an Intel CPU: the f32 and f64
#: BLAS products, the kernels MKL is built around. On other CPUs MKL runs its generic code paths (it loads
#: libmkl_def), so nothing is served there until `candle bench` has measured it faster; vector math and
#: bf16 wait for a measurement everywhere.
INTEL_DEFAULTS = frozenset(f"matmul/{d}@{kind}" for d in ("f32", "f64") for kind in MATMUL_KINDS)


def defaults() -> frozenset:
    return INTEL_DEFAULTS if machine()["vendor"] == "GenuineIntel" else frozenset()


def choose() -> tuple[frozenset, str]:
    """(the keys served, why)."""
    if forced(PLUGIN):
        return frozenset(KEYS), "every kernel, forced by CANDLE_FORCE_PLUGINS"
    verdicts, source = read(PLUGIN)
    if verdicts is None:
        return defaults(), f"the defaults for {machine()['vendor'] or 'this'} CPUs ({source})"
    fallback = defaults()
    return frozenset(k for k in KEYS if verdicts.get(k, k in fallback)), f"chosen by candle bench: {source}"


def build(lib, calls, served: frozenset) -> dict:
    """{(op, dtype): kernel} for the served keys, each over the cpu plugin's kernel as its fallback."""
    from candle_backend_cpu.kernels import build_kernels

    cpu = build_kernels()
    kernels = {}
    for dtype in ("f32", "f64", "bf16"):
        kinds = {kind for kind in MATMUL_KINDS if f"matmul/{dtype}@{kind}" in served}
        if kinds:
            make = blas.bf16_matmul if dtype == "bf16" else blas.float_matmul
            kernels[("matmul", dtype)] = make(calls, cpu[("matmul", dtype)], get_dtype(dtype), kinds)
    makers = {op: partial(vml.unary, name=op) for op in vml.UNARY}
    makers.update(powf=vml.powf, pow=vml.pow_)
    for op, make in makers.items():
        for dtype in ("f32", "f64"):
            if f"{op}/{dtype}" in served:
                kernels[(op, dtype)] = make(lib, calls, cpu[(op, dtype)], get_dtype(dtype))
    return kernels
