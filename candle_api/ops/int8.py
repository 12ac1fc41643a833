"""Integer products of quantized models: the ``int8`` rows of the contract.

Activations are quantized to u8 on the fly (:func:`quantize_u8`, ONNX's
DynamicQuantizeLinear), weights are int8 packed once
(:func:`pack_int8_panels`), and :func:`matmul_int8` sums their products
exactly in int32, subtracting zero points, then returns the sums or scales
them to f32 (plus a bias). A device without the kernels runs the
decompositions (the weights unpacked, a float64 matmul, exact for these
sizes).
"""

from __future__ import annotations

from ..dtype import f32, f64, i16, i32, i64, u8
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .core import check_tensor, same_device
from .creation import full
from .dispatch import OpDef, apply, define
from .elementwise import where
from .shape import cat, contiguous

#: columns per panel, and k per group, of the packed weights
PANEL, GROUP = 16, 4


def _dtype(op: str, t: Tensor, *dtypes) -> None:
    if t._dtype not in dtypes:
        raise DTypeError(f"{op} takes {' or '.join(str(d) for d in dtypes)} here, got {t._dtype}")


# ---- dynamic quantization -------------------------------------------------------------------------
def quantize_u8(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(q u8, scale f32 0-d, zero point u8 0-d): ONNX DynamicQuantizeLinear of x (f32)."""
    check_tensor("quantize_u8", x)
    _dtype("quantize_u8", x, f32)
    x = contiguous(x)
    params = apply(QUANTIZE_U8_PARAMS, x)
    q = apply(QUANTIZE_U8, x, params)
    return q, params.narrow(0, 0, 1).reshape(()), params.narrow(0, 1, 1).reshape(()).to_dtype(u8)


def _params_decomposed(x):
    zero = full((), 0.0, f32, x.device)
    lo = x.min_all().minimum(zero) if x.numel() else zero
    hi = x.max_all().maximum(zero) if x.numel() else zero
    scale = where(hi == lo, full((), 1.0, f32, x.device), (hi - lo) / 255.0)
    return cat([scale.reshape(1), (-lo / scale).clamp(0.0, 255.0).round().reshape(1)], 0)


def _quantize_decomposed(x, params):
    scale, zp = params.narrow(0, 0, 1), params.narrow(0, 1, 1)
    return ((x / scale).round() + zp).clamp(0.0, 255.0).to_dtype(u8)


# ---- packing ------------------------------------------------------------------------------------
def pack_int8_panels(w: Tensor) -> Tensor:
    """The packed bytes of int8 weights w (k, n): u8 (stored minus 128) or i16 holding -128..127."""
    check_tensor("pack_int8_panels", w)
    _dtype("pack_int8_panels", w, u8, i16)
    if w.rank != 2:
        raise ShapeError(f"pack_int8_panels: w must be (k, n), got {w.shape}")
    return apply(PACK_INT8_PANELS, w)


def packed_size(k: int, n: int) -> int:
    panels = -(-n // PANEL)
    return panels * -(-k // GROUP) * GROUP * PANEL + panels * PANEL * 4


def _pack_prepare(w):
    return (packed_size(*w.shape),), u8, (w._storage, w._layout)


def _signed(w):
    """int8 weights as i64 values in the stored (signed) domain."""
    return w.to_dtype(i64) - 128 if w._dtype == u8 else w.to_dtype(i64)


def _bytes(v, count: int):
    """Little-endian bytes (u8) of the integers v (i64), ``count`` per value."""
    v = where(v < 0, v + 2 ** (8 * count), v)  # two's complement; then whole divisions of non-negatives
    parts = [(v / 256 ** j) % 256 for j in range(count)]
    return cat([p.unsqueeze(-1) for p in parts], -1).reshape(-1).to_dtype(u8)


def _pack_decomposed(w):
    k, n = w.shape
    v = _signed(w)
    panels, groups = -(-n // PANEL), -(-k // GROUP)
    v = v.pad_with_zeros(0, 0, groups * GROUP - k).pad_with_zeros(1, 0, panels * PANEL - n)
    blocks = v.reshape(groups, GROUP, panels, PANEL).permute(2, 0, 3, 1)        # (panels, groups, 16, 4)
    return cat([_bytes(contiguous(blocks), 1), _bytes(v.sum(0), 4)], 0)


def unpack_int8_panels(bp: Tensor, k: int, n: int) -> Tensor:
    """The (k, n) weights (i64, stored domain) of packed bytes."""
    panels, groups = -(-n // PANEL), -(-k // GROUP)
    raw = bp.narrow(0, 0, panels * groups * GROUP * PANEL).to_dtype(i64)
    v = where(raw > 127, raw - 256, raw).reshape(panels, groups, PANEL, GROUP).permute(1, 3, 0, 2)
    return v.reshape(groups * GROUP, panels * PANEL).narrow(0, 0, k).narrow(1, 0, n)


# ---- the product --------------------------------------------------------------------------------
def matmul_int8(a: Tensor, bp: Tensor, n: int, a_zp=None, b_zp=None, a_scale=None, b_scale=None,
                bias=None) -> Tensor:
    """(a (..., k) u8 - a_zp) @ (B - b_zp) for B packed by pack_int8_panels: i32, or f32 times
    a_scale * b_scale (+ bias) when the scales are given. a_zp: one u8; b_zp: one or n i32 in the
    stored domain (a u8 weight's zero point minus 128); a_scale one f32, b_scale one or n f32."""
    op = "matmul_int8"
    for t, name, dtypes in ((a, "a", (u8,)), (bp, "packed weights", (u8,)), (a_zp, "a_zp", (u8,)),
                            (b_zp, "b_zp", (i32,)), (a_scale, "a_scale", (f32,)), (b_scale, "b_scale", (f32,)),
                            (bias, "bias", (f32,))):
        if t is not None:
            check_tensor(op, t, name)
            same_device(op, a, t)
            _dtype(op, t, *dtypes)
    if a.rank == 0 or packed_size(a.shape[-1], n) != bp.numel() or a.shape[-1] > 65536:
        raise ShapeError(f"{op}: {bp.shape} packed bytes are not weights of depth {a.shape[-1] if a.rank else '?'} "
                         f"and {n} columns (depth at most 65536)")
    if (a_scale is None) != (b_scale is None):
        raise ValueError(f"{op}: give both scales or neither")
    for t, name, sizes in ((a_zp, "a_zp", (1,)), (b_zp, "b_zp", (1, n)), (a_scale, "a_scale", (1,)),
                           (b_scale, "b_scale", (1, n)), (bias, "bias", (n,))):
        if t is not None and t.numel() not in sizes:
            raise ShapeError(f"{op}: {name} must hold {' or '.join(map(str, sizes))} values, got shape {t.shape}")
    if bias is not None and a_scale is None:
        raise ValueError(f"{op}: a bias needs the scales (an f32 output)")
    vals = [contiguous(t) if t is not None else None for t in (a, a_zp, b_zp, a_scale, b_scale, bias)]
    return apply(MATMUL_INT8, vals[0], vals[1], bp, *vals[2:], n=n)


def _matmul_prepare(a, a_zp, bp, b_zp, a_scale, b_scale, bias, n):
    def pair(t):
        return (t._storage, t._layout) if t is not None else (None, None)

    return a.shape[:-1] + (n,), i32 if a_scale is None else f32, (
        a._storage, a._layout, *pair(a_zp), bp._storage, bp._layout, *pair(b_zp), *pair(a_scale), *pair(b_scale),
        *pair(bias), n)


def _matmul_decomposed(a, a_zp, bp, b_zp, a_scale, b_scale, bias, n):
    k = a.shape[-1]
    lhs = a.to_dtype(f64) - (a_zp.to_dtype(f64).reshape(()) if a_zp is not None else 0.0)
    rhs = unpack_int8_panels(bp, k, n).to_dtype(f64)
    if b_zp is not None:
        rhs = rhs - b_zp.to_dtype(f64).reshape(-1)
    acc = lhs @ rhs
    if a_scale is None:
        return acc.to_dtype(i32)
    y = (acc * (a_scale.to_dtype(f64).reshape(()) * b_scale.to_dtype(f64).reshape(-1))).to_dtype(f32)
    return y + bias if bias is not None else y


QUANTIZE_U8_PARAMS = define(OpDef("quantize_u8_params", prepare=lambda x: ((2,), f32, (x._storage, x._layout)),
                                  decompose=_params_decomposed))
QUANTIZE_U8 = define(OpDef("quantize_u8", prepare=lambda x, p: (x.shape, u8, (x._storage, x._layout, p._storage,
                                                                              p._layout)),
                           decompose=_quantize_decomposed))
PACK_INT8_PANELS = define(OpDef("pack_int8_panels", prepare=_pack_prepare, decompose=_pack_decomposed))
MATMUL_INT8 = define(OpDef("matmul_int8", prepare=_matmul_prepare, decompose=_matmul_decomposed))
