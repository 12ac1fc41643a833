"""Scaled-dot-product attention with PyTorch's semantics.

A device with an ``sdpa`` kernel runs it fused (the cpu kernel never holds
more than a block of the score matrix); any other device runs the
decomposition into matmul, softmax and masking on the same device.
"""

from __future__ import annotations

import math

from ..autograd.engine import grad as autograd_grad
from ..autograd.graph import enable_grad
from ..dtype import bool_, u8
from ..errors import DTypeError, ShapeError
from ..layout import Layout
from ..tensor import Tensor
from .core import broadcast_shape, check_tensor, reinterpret, require_float, same_device, same_dtype
from .creation import arange
from .dispatch import OpDef, apply, apply_checked, define
from .elementwise import where
from .nn import softmax


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(query @ key^T * scale + mask) @ value over the last two dims.

    query is (..., L, E), key (..., S, E), value (..., S, Ev); batch dims
    broadcast. ``attn_mask`` broadcasts to (..., L, S): a bool or u8 mask keeps
    the keys where it is nonzero (PyTorch's bool mask), a float mask of the
    query's dtype is added to the scores. ``is_causal`` lets query i see keys
    j <= i (the top-left alignment PyTorch uses). ``scale`` defaults to
    1/sqrt(E). With ``enable_gqa`` the query heads (dim -3) are shared out in
    groups over fewer key/value heads. A row whose keys are all masked gives
    zeros."""
    if attn_mask is None and not enable_gqa and isinstance(query, Tensor) and isinstance(key, Tensor) \
            and isinstance(value, Tensor):  # the common case (a decoding step's), checked in a few steps
        lq, lk, lv = query._layout, key._layout, value._layout
        sq, sk, sv = lq.shape, lk.shape, lv.shape
        if (query._dtype is key._dtype is value._dtype and query._dtype.is_float
                and query._device is key._device is value._device and len(sq) >= 2 and len(sk) == len(sq) == len(sv)
                and sq[:-2] == sk[:-2] == sv[:-2] and sq[-1] == sk[-1] and sk[-2] == sv[-2]):
            if scale is None:
                scale = 1.0 / math.sqrt(sq[-1]) if sq[-1] else 1.0
            causal, scale = bool(is_causal), float(scale)
            return apply_checked(SDPA, query, sq[:-1] + sv[-1:], (query, key, value, None),
                                 (query._storage, lq, key._storage, lk, value._storage, lv, None, None, u8, causal,
                                  scale), {"is_causal": causal, "scale": scale})
    op = "scaled_dot_product_attention"
    for t, name in ((query, "query"), (key, "key"), (value, "value")):
        check_tensor(op, t, name)
        if t.rank < 2:
            raise ShapeError(f"{op}: {name} needs at least 2 dims, got shape {t.shape}")
    require_float(op, query)
    dtype = same_dtype(op, query, key, value)
    same_device(op, query, key, value)
    n_q, e = query.shape[-2:]
    n_k, e_k = key.shape[-2:]
    if e_k != e:
        raise ShapeError(f"{op}: query and key embed dims differ: {query.shape} and {key.shape}")
    if value.shape[-2] != n_k:
        raise ShapeError(f"{op}: key and value lengths differ: {key.shape} and {value.shape}")
    if attn_mask is not None:
        check_tensor(op, attn_mask, "attn_mask")
        same_device(op, query, attn_mask)
        if is_causal:
            raise ValueError(f"{op}: pass attn_mask or is_causal, not both")
        if attn_mask._dtype is bool_:  # a bool mask is u8's bytes: backends see u8
            attn_mask = reinterpret(attn_mask, u8)
        if attn_mask._dtype is not u8 and attn_mask._dtype is not dtype:
            raise DTypeError(f"{op}: attn_mask must be bool or u8 (keep where nonzero) or {dtype} (added), "
                             f"got {attn_mask._dtype}")
    if scale is None:
        scale = 1.0 / math.sqrt(e) if e else 1.0
    if enable_gqa:
        return _grouped(query, key, value, attn_mask, is_causal, scale)

    return apply(SDPA, query, key, value, attn_mask, is_causal=bool(is_causal), scale=float(scale))


def _sdpa_prepare(query, key, value, attn_mask, is_causal, scale):
    op = "scaled_dot_product_attention"
    n_q, e = query.shape[-2:]
    n_k = key.shape[-2]
    batch = broadcast_shape(op, query.shape[:-2], key.shape[:-2], value.shape[:-2],
                            *([attn_mask.shape[:-2]] if attn_mask is not None and attn_mask.rank > 2 else []))
    lq = query._layout.broadcast_as(batch + (n_q, e))
    lk = key._layout.broadcast_as(batch + (n_k, e))
    lv = value._layout.broadcast_as(batch + value.shape[-2:])
    mask_args = (None, None, u8)
    if attn_mask is not None:
        mask_args = (attn_mask._storage, _broadcast_mask(op, attn_mask, batch + (n_q, n_k)), attn_mask._dtype)
    return batch + (n_q, value.shape[-1]), query._dtype, (query._storage, lq, key._storage, lk, value._storage, lv,
                                                           *mask_args, is_causal, scale)


def _sdpa_backward(inputs, out, g, is_causal, scale):
    """Gradients through the decomposition, recomputed from the inputs (the
    fused forward kept no score matrix to differentiate); an additive mask
    gets its gradient too, a u8 mask none."""
    query, key, value, attn_mask = inputs
    additive = attn_mask is not None and attn_mask._dtype is query._dtype
    with enable_grad():
        leaves = [t.detach().requires_grad_() for t in (query, key, value) + ((attn_mask,) if additive else ())]
        mask = leaves[3] if additive else attn_mask
        out = _decomposed(leaves[0], leaves[1], leaves[2], mask, is_causal, scale)
    grads = autograd_grad(out, leaves, g)
    return tuple(grads) + (() if additive else (None,))


def _broadcast_mask(op: str, mask: Tensor, shape: tuple) -> Layout:
    try:
        return mask._layout.broadcast_as(shape)
    except ShapeError:
        raise ShapeError(f"{op}: attn_mask of shape {mask.shape} does not broadcast to {shape}") from None


def _grouped(query, key, value, attn_mask, is_causal, scale) -> Tensor:
    """Grouped-query attention as a view: query heads (..., Hkv * g, L, E)
    become (..., Hkv, g, L, E) against key/value heads (..., Hkv, 1, S, E)."""
    op = "scaled_dot_product_attention"
    if min(query.rank, key.rank, value.rank) < 3:
        raise ShapeError(f"{op}: enable_gqa needs a heads dim (-3) on query, key and value")
    h_q, h_kv = query.shape[-3], key.shape[-3]
    if value.shape[-3] != h_kv or h_kv == 0 or h_q % h_kv:
        raise ShapeError(f"{op}: query heads ({h_q}) must be a multiple of key/value heads "
                         f"({h_kv} and {value.shape[-3]})")
    g = h_q // h_kv
    lead = query.shape[:-3]
    q = query.reshape(lead + (h_kv, g) + query.shape[-2:])
    k, v = key.unsqueeze(-3), value.unsqueeze(-3)
    if attn_mask is not None:
        full = broadcast_shape(op, attn_mask.shape, query.shape[:-1] + (key.shape[-2],))
        attn_mask = attn_mask.broadcast_as(full).reshape(full[:-3] + (h_kv, g) + full[-2:])
    out = scaled_dot_product_attention(q, k, v, attn_mask, is_causal, scale)
    return out.reshape(out.shape[:-4] + (h_q,) + out.shape[-2:])


def _decomposed(query, key, value, attn_mask, is_causal, scale) -> Tensor:
    scores = (query @ key.transpose(-1, -2)) * scale
    n_q, n_k = scores.shape[-2:]
    if n_k == 0:
        return scores @ value  # zeros of the output's shape
    if is_causal:
        rows = arange(0, n_q, dtype="i64", device=query.device).reshape(n_q, 1)
        cols = arange(0, n_k, dtype="i64", device=query.device).reshape(1, n_k)
        attn_mask = (cols <= rows)
    if attn_mask is not None:
        if attn_mask._dtype is u8:
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    probs = softmax(scores, -1)
    # rows with every key masked: zeros, not the NaN of 0/0
    visible = scores.max_keepdim(-1) != float("-inf")
    return where(visible, probs, 0.0) @ value


SDPA = define(OpDef("sdpa", prepare=_sdpa_prepare, backward=_sdpa_backward, decompose=_decomposed))
