"""Unary rows, powf and pow through MKL's vector math (VM), on contiguous
inputs; any other layout goes back to the cpu plugin's kernel.

Accuracy: every function runs in MKL's HA mode (high accuracy: under 1 ulp) in
f32, and in LA mode (low accuracy: under 4 ulp, i.e. ~1e-15 relative) in f64,
each with VM's error handling off (an argument outside the domain gives the
IEEE result, NaN or an infinity, and nothing is printed). Both sit inside the
contract's tolerances (``candle_api.contract.TOLERANCES``) and the ulp bounds
of the conformance suite's vector-math sweeps; EP mode (about half the bits)
would not, so it is never used. The mode goes with each call (the vm?
functions), so MKL's global mode (vmlSetMode), which other users of MKL in the
process may set, is neither read nor changed.
"""

from __future__ import annotations

from .calls import VM_POW, VM_POWX, VM_UNARY
from .library import VML_ERRMODE_IGNORE, VML_HA, VML_LA

#: The accuracy mode of each dtype, as stated above.
MODES = {"f32": VML_HA | VML_ERRMODE_IGNORE, "f64": VML_LA | VML_ERRMODE_IGNORE}
MODE_NAMES = {"f32": "HA", "f64": "LA"}

#: contract row -> MKL VM function (without its vms/vmd prefix)
UNARY = {"exp": "Exp", "expm1": "Expm1", "log": "Ln", "log1p": "Log1p", "sin": "Sin", "cos": "Cos", "tan": "Tan",
         "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh", "tanh": "Tanh",
         "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh", "erf": "Erf", "sqrt": "Sqrt", "recip": "Inv",
         "rsqrt": "InvSqrt"}


def _fn(lib, dt, name):
    return getattr(lib, f"vm{'s' if dt.name == 'f32' else 'd'}{name}_64")


def unary(lib, calls, fallback, dt, name):
    """k(out, x, lx)."""
    fn, mode, isz = _fn(lib, dt, UNARY[name]), MODES[dt.name], dt.itemsize

    def kernel(out, x, lx):
        if not lx.contiguous:
            return fallback(out, x, lx)
        calls.vm(VM_UNARY, fn, isz, lx.numel, x.ptr + lx.offset * isz, None, 0.0, out.ptr, mode)

    return kernel


def powf(lib, calls, fallback, dt):
    """k(out, x, lx, p0, p1): x ** p0."""
    fn, mode, isz = _fn(lib, dt, "Powx"), MODES[dt.name], dt.itemsize

    def kernel(out, x, lx, p0, p1):
        if not lx.contiguous:
            return fallback(out, x, lx, p0, p1)
        calls.vm(VM_POWX, fn, isz, lx.numel, x.ptr + lx.offset * isz, None, p0, out.ptr, mode)

    return kernel


def pow_(lib, calls, fallback, dt):
    """k(out, a, la, b, lb): a ** b elementwise, both contiguous (broadcasts arrive with zero strides and go
    back to the cpu kernel)."""
    fn, mode, isz = _fn(lib, dt, "Pow"), MODES[dt.name], dt.itemsize

    def kernel(out, a, la, b, lb):
        if not (la.contiguous and lb.contiguous):
            return fallback(out, a, la, b, lb)
        calls.vm(VM_POW, fn, isz, la.numel, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, 0.0, out.ptr, mode)

    return kernel
