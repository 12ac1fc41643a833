"""Neural-network ops with fused kernels: softmax, log_softmax, layer_norm
(and skip_layer_norm, of x + a residual), rms_norm, rotary embeddings and
bias_gelu. A device without the fused kernel runs the
decomposition into primitive ops instead, on the same device."""

from __future__ import annotations

from ..errors import ShapeError
from ..layout import normalize_dim
from ..tensor import Tensor
from .core import check_tensor, require_float, same_device, same_dtype
from .dispatch import OpDef, apply, apply_checked, apply_unary, define
from .elementwise import _gelu_erf_grad, _gelu_tanh_grad
from .shape import cat, contiguous, stack


def _on_last_dim(fn, x: Tensor, dim: int) -> Tensor:
    """Applies a last-dim function along dim by viewing dim as the last one."""
    dim = normalize_dim(dim, x.rank)
    last = x.rank - 1
    if dim == last:
        return fn(x)
    return fn(x.transpose(dim, last)).transpose(dim, last)


def softmax_decomposed(x: Tensor, dim: int) -> Tensor:
    e = (x - x.max_keepdim(dim)).exp()
    return e / e.sum_keepdim(dim)


def log_softmax_decomposed(x: Tensor, dim: int) -> Tensor:
    shifted = x - x.max_keepdim(dim)
    return shifted - shifted.exp().sum_keepdim(dim).log()


def _softmax_like(op: OpDef, x: Tensor, dim: int) -> Tensor:
    if x.__class__ is not Tensor or not x._dtype.is_float:
        check_tensor(op.name, x)
        require_float(op.name, x)
    shape = x._layout.shape
    if not shape:
        raise ShapeError(f"{op.name.removesuffix('_last')} needs at least one dim")
    if dim == -1 or dim == len(shape) - 1:  # the common case, without the transposes
        return apply_unary(op, x)
    return _on_last_dim(lambda v: apply_unary(op, v), x, dim)


def _rows_prepare(x):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return _softmax_like(SOFTMAX_LAST, x, dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return _softmax_like(LOG_SOFTMAX_LAST, x, dim)


def _norm_params(op: str, x: Tensor, weight: Tensor, bias):
    """Checks weight/bias against x's trailing dims; returns x viewed with those dims
    merged into one, and 1-d contiguous weight and bias."""
    check_tensor(op, x)
    check_tensor(op, weight, "weight")
    require_float(op, x)
    params = [weight] + ([bias] if bias is not None else [])
    same_dtype(op, x, *params)
    same_device(op, x, *params)
    k = weight.rank
    if k == 0 or x.shape[x.rank - k :] != weight.shape or (bias is not None and bias.shape != weight.shape):
        raise ShapeError(
            f"{op}: weight {weight.shape}{'' if bias is None else f' and bias {bias.shape}'} "
            f"must match the trailing dims of the input {x.shape}"
        )
    if k > 1:
        x = x.flatten_from(x.rank - k)
        weight = weight.flatten_all()
        bias = bias.flatten_all() if bias is not None else None
    return x, contiguous(weight), contiguous(bias) if bias is not None else None


def layer_norm(x: Tensor, weight: Tensor, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalizes over the trailing dims that weight covers: (x - mean) / sqrt(var + eps) * w + b."""
    x2, w, b = _norm_params("layer_norm", x, weight, bias)
    out = apply(LAYER_NORM, x2, w, b, eps=float(eps))
    return out if x2 is x else out.reshape(x.shape)


def skip_layer_norm(x: Tensor, residual: Tensor, weight: Tensor, bias=None, eps: float = 1e-5) -> Tensor:
    """layer_norm(x + residual) in one pass over the rows (residual of x's shape)."""
    x2, w, b = _norm_params("skip_layer_norm", x, weight, bias)
    check_tensor("skip_layer_norm", residual, "residual")
    same_dtype("skip_layer_norm", x, residual)
    same_device("skip_layer_norm", x, residual)
    if residual.shape != x.shape:
        raise ShapeError(f"skip_layer_norm: the residual {residual.shape} must have the input's shape {x.shape}")
    r2 = contiguous(residual).reshape(x2.shape)
    out = apply(SKIP_LAYER_NORM, x2, r2, w, b, eps=float(eps))
    return out if x2 is x else out.reshape(x.shape)


def _skip_layer_norm_prepare(x, r, w, b, eps):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay, r._storage, r._layout, w._storage, w._layout,
                                 b._storage if b is not None else None, b._layout if b is not None else None, eps)


def _skip_layer_norm_backward(inputs, out, g, eps):
    """layer_norm's gradients at x + r; x and r get the same one."""
    x, r, w, b = inputs
    gx, gw, gb = _layer_norm_backward((x + r, w, b), out, g, eps)
    return gx, gx, gw, gb


def _layer_norm_prepare(x, w, b, eps):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay, w._storage, w._layout, b._storage if b is not None else None,
                                 b._layout if b is not None else None, eps)


def _layer_norm_decomposed(x, w, b, eps):
    centered = x - x.mean_keepdim(-1)
    out = centered * (centered.sqr().mean_keepdim(-1) + eps).rsqrt() * w
    return out + b if b is not None else out


def _layer_norm_backward(inputs, out, g, eps):
    """With xh = (x - mean) * rstd: dx = rstd * (gh - mean(gh) - xh * mean(gh * xh)), gh = g * w."""
    x, w, b = inputs
    centered = x - x.mean_keepdim(-1)
    rstd = (centered.sqr().mean_keepdim(-1) + eps).rsqrt()
    xh = centered * rstd
    gh = g * w
    gx = rstd * (gh - gh.mean_keepdim(-1) - xh * (gh * xh).mean_keepdim(-1))
    rows = tuple(range(x.rank - 1))
    return gx, (g * xh).sum(rows), g.sum(rows) if b is not None else None


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x ** 2) + eps) * w over the trailing dims that weight covers."""
    if isinstance(x, Tensor) and isinstance(weight, Tensor):  # the common case, checked in a few steps
        lx, lw = x._layout, weight._layout
        if (x._dtype is weight._dtype and x._dtype.is_float and x._device is weight._device and len(lw.shape) == 1
                and lw.contiguous and lx.shape[-1:] == lw.shape):
            eps = float(eps)
            return apply_checked(RMS_NORM, x, lx.shape, (x, weight), (x._storage, lx, weight._storage, lw, eps),
                                 {"eps": eps})
    x2, w, _ = _norm_params("rms_norm", x, weight, None)
    out = apply(RMS_NORM, x2, w, eps=float(eps))
    return out if x2 is x else out.reshape(x.shape)


def _rms_norm_prepare(x, w, eps):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay, w._storage, w._layout, eps)


def _rms_norm_backward(inputs, out, g, eps):
    """With r = rsqrt(mean(x^2) + eps): dx = r * (gh - x * r^2 * mean(gh * x)), gh = g * w."""
    x, w = inputs
    r = (x.sqr().mean_keepdim(-1) + eps).rsqrt()
    gh = g * w
    gx = r * (gh - x * (r * r) * (gh * x).mean_keepdim(-1))
    return gx, (g * x * r).sum(tuple(range(x.rank - 1)))


def silu_mul(x: Tensor) -> Tensor:
    """silu(x[..., :f]) * x[..., f:] for x (..., 2f): SwiGLU's gate on one product of gate and up."""
    if isinstance(x, Tensor) and x._dtype.is_float and x._layout.contiguous and x._layout.shape:
        lx = x._layout
        if lx.shape[-1] % 2 == 0:
            return apply_checked(SILU_MUL, x, lx.shape[:-1] + (lx.shape[-1] // 2,), (x,), (x._storage, lx), {})
    check_tensor("silu_mul", x)
    require_float("silu_mul", x)
    if x.rank == 0 or x.shape[-1] % 2:
        raise ShapeError(f"silu_mul: the last dim must hold two halves, got shape {x.shape}")
    return apply(SILU_MUL, contiguous(x))


def _silu_mul_halves(x: Tensor) -> tuple[Tensor, Tensor]:
    f = x.shape[-1] // 2
    return x.narrow(-1, 0, f), x.narrow(-1, f, f)


def _silu_mul_decomposed(x: Tensor) -> Tensor:
    gate, up = _silu_mul_halves(x)
    return gate.silu() * up


def _silu_mul_backward(inputs, out, g):
    """d/dgate = g * up * s * (1 + gate * (1 - s)) with s = sigmoid(gate); d/dup = g * silu(gate)."""
    gate, up = _silu_mul_halves(inputs[0])
    s = gate.sigmoid()
    return (cat([g * up * s * (gate * (1 - s) + 1), g * gate * s], -1),)


def bias_gelu(x: Tensor, bias: Tensor, approximate: bool = False) -> Tensor:
    """gelu(x + bias) for bias of x's last dim, in one pass over each row: the erf form, or the tanh
    approximation when approximate (onnxruntime's BiasGelu and FastGelu)."""
    check_tensor("bias_gelu", x)
    check_tensor("bias_gelu", bias, "bias")
    require_float("bias_gelu", x)
    same_dtype("bias_gelu", x, bias)
    same_device("bias_gelu", x, bias)
    if x.rank == 0 or bias.shape != (x.shape[-1],):
        raise ShapeError(f"bias_gelu: the bias must be ({x.shape[-1] if x.rank else '?'},): one value per entry of "
                         f"the input's last dim, got {bias.shape} for {x.shape}")
    return apply(BIAS_GELU, contiguous(x), contiguous(bias), approximate=bool(approximate))


def _bias_gelu_decomposed(x, b, approximate):
    return (x + b).gelu() if approximate else (x + b).gelu_erf()


def _bias_gelu_backward(inputs, out, g, approximate):
    """The gelu's gradient at x + b; b's is its sum over the rows."""
    x, b = inputs
    gx = (_gelu_tanh_grad if approximate else _gelu_erf_grad)(x + b, None, g)
    return gx, gx.sum(tuple(range(x.rank - 1))) if x.rank > 1 else gx


def _rope_args(op: str, x: Tensor, cos: Tensor, sin: Tensor):
    for t, name in ((x, "input"), (cos, "cos"), (sin, "sin")):
        check_tensor(op, t, name)
    require_float(op, x)
    same_dtype(op, x, cos, sin)
    same_device(op, x, cos, sin)
    if x.rank != 4:
        raise ShapeError(f"{op}: the input must be (batch, heads, seq, head_dim), got {x.shape}")
    b, _, t, d = x.shape
    if d % 2:
        raise ShapeError(f"{op}: head_dim must be even, got {d}")
    if cos.shape != sin.shape or cos.shape not in ((t, d // 2), (b, t, d // 2)):
        raise ShapeError(f"{op}: cos/sin must be ({t}, {d // 2}) or ({b}, {t}, {d // 2}), got {cos.shape} and {sin.shape}")
    return contiguous(cos), contiguous(sin)


def _rope_decomposed(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    b, h, t, d = x.shape
    if cos.rank == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if interleaved:
        pairs = x.reshape(b, h, t, d // 2, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
        return stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(b, h, t, d)
    x1, x2 = x.narrow(-1, 0, d // 2), x.narrow(-1, d // 2, d // 2)
    return cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _rope(op: OpDef, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    if isinstance(x, Tensor) and isinstance(cos, Tensor) and isinstance(sin, Tensor):  # the common case
        lx, lc, ls = x._layout, cos._layout, sin._layout
        shape, half = lx.shape, lx.shape[-1] // 2 if lx.shape else 0
        if (x._dtype is cos._dtype is sin._dtype and x._dtype.is_float and x._device is cos._device is sin._device
                and len(shape) == 4 and shape[3] % 2 == 0 and lc.contiguous and ls.contiguous and lc.shape == ls.shape
                and (lc.shape == (shape[2], half) or lc.shape == (shape[0], shape[2], half))):
            return apply_checked(op, x, shape, (x, cos, sin), (x._storage, lx, cos._storage, lc, sin._storage, ls), {})
    cos, sin = _rope_args(op.name, x, cos, sin)
    return apply(op, x, cos, sin)


def _rope_prepare(x, cos, sin):
    lay = x._layout
    return lay.shape, x._dtype, (x._storage, lay, cos._storage, cos._layout, sin._storage, sin._layout)


def _rope_backward(interleaved: bool):
    return lambda inputs, out, g: _rope_grads(*inputs, g, interleaved)


def _rope_grads(x, cos, sin, g, interleaved):
    """The rotation's inverse (sin negated) for x; for cos and sin, the
    products of each pair with its gradient, summed over heads (and batch
    when they are shared across it)."""
    gx = _rope(ROPE_I if interleaved else ROPE, g, cos, -sin) if x._node is not None else None
    if cos._node is None and sin._node is None:
        return gx, None, None
    half = x.shape[-1] // 2
    if interleaved:
        x1, x2, g1, g2 = x[..., 0::2], x[..., 1::2], g[..., 0::2], g[..., 1::2]
    else:
        x1, x2, g1, g2 = x[..., :half], x[..., half:], g[..., :half], g[..., half:]
    dims = (1,) if cos.rank == 3 else (0, 1)
    gcos = (g1 * x1 + g2 * x2).sum(dims)
    gsin = (g2 * x1 - g1 * x2).sum(dims)
    return gx, gcos, gsin


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding rotating the two halves of head_dim; x is (b, h, t, d)."""
    return _rope(ROPE, x, cos, sin)


def rope_i(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding rotating interleaved pairs (x[2i], x[2i+1]); x is (b, h, t, d)."""
    return _rope(ROPE_I, x, cos, sin)


def rope_thd(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """rope for x laid out (b, t, h, d)."""
    return rope(x.transpose(1, 2), cos, sin).transpose(1, 2)


# dy = y * (g - sum(g * y)) for softmax, g - softmax * sum(g) for log_softmax
SOFTMAX_LAST = define(OpDef("softmax_last", prepare=_rows_prepare,
                            backward=lambda inputs, y, g: (y * (g - (g * y).sum_keepdim(-1)),),
                            decompose=lambda x: softmax_decomposed(x, -1)))
LOG_SOFTMAX_LAST = define(OpDef("log_softmax_last", prepare=_rows_prepare,
                                backward=lambda inputs, y, g: (g - y.exp() * g.sum_keepdim(-1),),
                                decompose=lambda x: log_softmax_decomposed(x, -1)))
LAYER_NORM = define(OpDef("layer_norm", prepare=_layer_norm_prepare, backward=_layer_norm_backward,
                          decompose=_layer_norm_decomposed))
SKIP_LAYER_NORM = define(OpDef("skip_layer_norm", prepare=_skip_layer_norm_prepare,
                               backward=_skip_layer_norm_backward,
                               decompose=lambda x, r, w, b, eps: _layer_norm_decomposed(x + r, w, b, eps)))
RMS_NORM = define(OpDef("rms_norm", prepare=_rms_norm_prepare, backward=_rms_norm_backward,
                        decompose=lambda x, w, eps: x * (x.sqr().mean_keepdim(-1) + eps).rsqrt() * w))
ROPE = define(OpDef("rope", prepare=_rope_prepare, backward=_rope_backward(False),
                    decompose=lambda x, cos, sin: _rope_decomposed(x, cos, sin, False)))
ROPE_I = define(OpDef("rope_i", prepare=_rope_prepare, backward=_rope_backward(True),
                      decompose=lambda x, cos, sin: _rope_decomposed(x, cos, sin, True)))
BIAS_GELU = define(OpDef("bias_gelu", prepare=lambda x, b, approximate: (x.shape, x._dtype, (
    x._storage, x._layout, b._storage, b._layout, approximate)), backward=_bias_gelu_backward,
    decompose=_bias_gelu_decomposed))
SILU_MUL = define(OpDef("silu_mul", prepare=lambda x: (x.shape[:-1] + (x.shape[-1] // 2,), x._dtype,
                                                       (x._storage, x._layout)),
                        backward=_silu_mul_backward, decompose=_silu_mul_decomposed))
