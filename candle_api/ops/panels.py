"""Products with weights packed once: the ``panels`` rows of the contract.

A model that multiplies by the same constant weights on every call (an
encoder's projections, a network's convolutions) packs them once with
:func:`pack_panels`: each matrix in panels of 16 rows, so that a product
reads 16 weights per step of its sum in one run. :func:`linear_panels` and
:func:`conv2d_panels` then read the activations in place and apply the bias,
a residual and an activation (:data:`candle_api.contract.ACTIVATIONS`) to
each output tile while it is in cache. A device without the kernels runs
their decompositions: the weights unpacked, then the ordinary ops.

The ONNX evaluator packs a model's weights when it is loaded; nothing else
in candle-api needs to.
"""

from __future__ import annotations

import math

from ..autograd.engine import grad as autograd_grad
from ..autograd.graph import enable_grad
from ..contract.table import ACTIVATIONS
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .conv import conv2d, conv_params
from .core import check_tensor, same_device
from .dispatch import OpDef, apply, define
from .elementwise import param
from .shape import contiguous

#: rows per panel
PANEL = 16


def pack_panels(w: Tensor) -> Tensor:
    """w (rows, depth) or (batch, rows, depth) as (batch, ceil(rows / 16), depth, 16)."""
    check_tensor("pack_panels", w)
    if w.rank == 2:
        w = w.unsqueeze(0)
    if w.rank != 3:
        raise ShapeError(f"pack_panels: w must be (rows, depth) or (batch, rows, depth), got {w.shape}")
    _f32("pack_panels", w)
    return apply(PACK_PANELS, w)


def _pack_prepare(w):
    batch, rows, depth = w.shape
    return (batch, -(-rows // PANEL), depth, PANEL), w._dtype, (w._storage, w._layout)


def _pack_decomposed(w):
    batch, rows, depth = w.shape
    padded = -(-rows // PANEL) * PANEL
    if padded != rows:
        w = w.pad_with_zeros(1, 0, padded - rows)
    return contiguous(w.reshape(batch, padded // PANEL, PANEL, depth).transpose(2, 3))


def unpack_panels(wp: Tensor, rows: int) -> Tensor:
    """The (batch, rows, depth) weights of pack_panels' output (a view and a narrow)."""
    batch, panels, depth, _ = wp.shape
    return wp.transpose(2, 3).reshape(batch, panels * PANEL, depth).narrow(1, 0, rows)


def activate(x: Tensor, act: str, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    """x through one of the panels rows' activations, from ordinary ops."""
    if act == "none":
        return x
    if act == "relu":
        return x.relu()
    if act == "leaky_relu":
        return param("leaky_relu", x, alpha, 0.0)
    if act == "clip":
        return x.clamp(alpha, beta)
    if act == "sigmoid":
        return x.sigmoid()
    if act == "hard_sigmoid":
        return (x * alpha + beta).clamp(0.0, 1.0)
    if act == "hard_swish":
        return x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)
    if act == "tanh":
        return x.tanh()
    if act == "gelu_erf":
        return x.gelu_erf()
    if act == "silu":
        return x.silu()
    raise ValueError(f"unknown activation {act!r} (one of {', '.join(ACTIVATIONS)})")


def _act(op: str, act: str, alpha, beta) -> dict:
    if act not in ACTIVATIONS:
        raise ValueError(f"{op}: unknown activation {act!r} (one of {', '.join(ACTIVATIONS)})")
    return {"act": act, "alpha": float(alpha), "beta": float(beta)}


def _f32(op: str, *tensors) -> None:
    for t in tensors:
        if t is not None and t.dtype != "f32":
            raise DTypeError(f"{op} is defined for f32 tensors, got {t.dtype}")


def _bias(op: str, bias, n: int, like: Tensor):
    if bias is None:
        return None
    check_tensor(op, bias, "bias")
    same_device(op, like, bias)
    if bias.shape != (n,):
        raise ShapeError(f"{op}: the bias must have shape ({n},), got {bias.shape}")
    return contiguous(bias)


# ---- linear -------------------------------------------------------------------------------------
def linear_panels(x: Tensor, wp: Tensor, n: int, bias=None, act: str = "none", alpha: float = 0.0,
                  beta: float = 0.0) -> Tensor:
    """act(x (..., k) @ M^T + bias) -> (..., n), wp = pack_panels(M) for M (n, k)."""
    check_tensor("linear_panels", x)
    check_tensor("linear_panels", wp, "packed weights")
    same_device("linear_panels", x, wp)
    _f32("linear_panels", x, wp, bias)
    if wp.rank != 4 or wp.shape[0] != 1 or wp.shape[3] != PANEL or wp.shape[1] != -(-n // PANEL):
        raise ShapeError(f"linear_panels: {wp.shape} is not the packing of {n} rows (pack_panels of one matrix)")
    if x.rank == 0 or x.shape[-1] != wp.shape[2]:
        raise ShapeError(f"linear_panels: x {x.shape} does not end with the weights' depth {wp.shape[2]}")
    if x.rank > 2 and not _rows_merge(x):
        x = contiguous(x)
    return apply(LINEAR_PANELS, x, wp, _bias("linear_panels", bias, n, x), n=n, **_act("linear_panels", act, alpha,
                                                                                           beta))


def _rows_merge(x: Tensor) -> bool:
    """Whether the leading dims of x are one run of rows (one stride from row to row)."""
    shape, strides = x._layout.shape, x._layout.strides
    return all(shape[d - 1] == 1 or strides[d - 1] == shape[d] * strides[d] for d in range(x.rank - 2, 0, -1))


def _linear_prepare(x, wp, bias, n, act, alpha, beta):
    return x.shape[:-1] + (n,), x._dtype, (x._storage, x._layout, wp._storage, wp._layout,
                                           bias._storage if bias is not None else None,
                                           bias._layout if bias is not None else None, n, act, alpha, beta)


def _linear_decomposed(x, wp, bias, n, act, alpha, beta):
    y = x @ unpack_panels(wp, n)[0].t()
    return activate(y + bias if bias is not None else y, act, alpha, beta)


# ---- conv2d --------------------------------------------------------------------------------------
def conv2d_panels(x: Tensor, wp: Tensor, kernel_shape: tuple, bias=None, residual=None, padding=0, stride=1,
                  dilation=1, groups: int = 1, act: str = "none", alpha: float = 0.0, beta: float = 0.0,
                  scale: float = 1.0, shift: float = 0.0) -> Tensor:
    """act(conv2d(x, w) + bias + residual) * scale + shift for w of kernel_shape (cout, cin / groups,
    kh, kw) and wp = conv_weights(w, groups)."""
    check_tensor("conv2d_panels", wp, "packed weights")
    _f32("conv2d_panels", x, wp, bias, residual)
    x, unbatched, params = conv_params("conv2d_panels", x, tuple(kernel_shape), padding, stride, dilation, groups)
    same_device("conv2d_panels", x, wp)
    cout, cin_g, kh, kw = kernel_shape
    expected = _packed_conv_shape(kernel_shape, groups)
    if wp.shape != expected:
        raise ShapeError(f"conv2d_panels: packed weights {wp.shape}, expected {expected} for {kernel_shape} "
                         f"in {groups} group(s)")
    out_shape = (params[0], cout, params[14], params[15])
    if residual is not None:
        check_tensor("conv2d_panels", residual, "residual")
        same_device("conv2d_panels", x, residual)
        if unbatched and residual.rank == 3:
            residual = residual.unsqueeze(0)
        if residual.shape != out_shape:
            raise ShapeError(f"conv2d_panels: the residual must have the output's shape {out_shape}, got "
                             f"{residual.shape}")
        residual = contiguous(residual)
    out = apply(CONV2D_PANELS, x, wp, _bias("conv2d_panels", bias, cout, x), residual, params=params,
                **_act("conv2d_panels", act, alpha, beta), scale=float(scale), shift=float(shift))
    return out.squeeze(0) if unbatched else out


def _conv_prepare(x, wp, bias, res, params, act, alpha, beta, scale, shift):
    shape = (params[0], params[4], params[14], params[15])
    return shape, x._dtype, (x._storage, x._layout, wp._storage, wp._layout,
                             bias._storage if bias is not None else None, bias._layout if bias is not None else None,
                             res._storage if res is not None else None, res._layout if res is not None else None,
                             params, act, alpha, beta, scale, shift)


def _conv_decomposed(x, wp, bias, res, params, act, alpha, beta, scale, shift):
    b, cin, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups = params[:14]
    rows = cout if _depthwise(cin // groups, cout // groups) else cout // groups
    weights = unpack_panels(wp, rows).reshape(cout, cin // groups, kh, kw)
    y = conv2d(x, weights, (ph, pw), (sh, sw), (dh, dw), groups)
    if bias is not None:
        y = y + bias.reshape(1, cout, 1, 1)
    if res is not None:
        y = y + res
    y = activate(y, act, alpha, beta)
    return y if scale == 1.0 and shift == 0.0 else y * scale + shift


def _depthwise(cin_g: int, cout_g: int) -> bool:
    return cin_g == 1 and cout_g == 1


def _packed_conv_shape(kernel_shape: tuple, groups: int) -> tuple:
    cout, cin_g, kh, kw = kernel_shape
    if _depthwise(cin_g, cout // groups):
        return (1, -(-cout // PANEL), kh * kw, PANEL)
    return (groups, -(-(cout // groups) // PANEL), cin_g * kh * kw, PANEL)


def conv_weights(w: Tensor, groups: int) -> Tensor:
    """A conv kernel (cout, cin / groups, kh, kw) as conv2d_panels takes it: each group's
    (cout / groups, cin / groups * kh * kw) matrix packed, or for a depthwise kernel (one
    input and one output channel per group) the (cout, kh * kw) matrix of all channels, so
    that sixteen channels' taps lie side by side."""
    cout = w.shape[0]
    if _depthwise(w.shape[1], cout // groups):
        return pack_panels(w.reshape(1, cout, math.prod(w.shape[2:])))
    return pack_panels(w.reshape(groups, cout // groups, math.prod(w.shape[1:])))


def _backward(decomposed):
    """Gradients through the decomposition, recomputed from the inputs (the fused
    kernels keep nothing to differentiate)."""

    def backward(inputs, out, g, **params):
        present = [i for i, t in enumerate(inputs) if t is not None]
        with enable_grad():
            leaves = [t.detach().requires_grad_() if t is not None else None for t in inputs]
            y = decomposed(*leaves, **params)
        grads = iter(autograd_grad(y, [leaves[i] for i in present], g))
        return tuple(next(grads) if t is not None else None for t in inputs)

    return backward


PACK_PANELS = define(OpDef("pack_panels", prepare=_pack_prepare, decompose=_pack_decomposed,
                           backward=_backward(_pack_decomposed)))
LINEAR_PANELS = define(OpDef("linear_panels", prepare=_linear_prepare, decompose=_linear_decomposed,
                             backward=_backward(_linear_decomposed)))
CONV2D_PANELS = define(OpDef("conv2d_panels", prepare=_conv_prepare, decompose=_conv_decomposed,
                             backward=_backward(_conv_decomposed)))
