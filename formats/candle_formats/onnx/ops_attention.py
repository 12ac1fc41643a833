"""Attention (opset 23+) and RotaryEmbedding.

The masks that depend only on shapes (causal, sliding window, non-padded
key lengths) are built on the host and added as one bias; an attention mask
input is turned into an additive bias on the device (a boolean mask becomes
0 where attending, -inf elsewhere).
"""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

from .dtypes import onnx_type
from .helpers import const, host
from .registry import op


def split_heads(x, heads: int):
    """(B, S, heads * D) -> (B, heads, S, D)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(1, 2)


def merge_heads(x):
    """(B, H, S, D) -> (B, S, H * D)."""
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


def repeat_heads(x, groups: int):
    """Each key/value head shared by ``groups`` query heads (grouped-query attention)."""
    if groups == 1:
        return x
    b, h, s, d = x.shape
    return x.unsqueeze(2).broadcast_as((b, h, groups, s, d)).reshape(b, h * groups, s, d)


def _shape_mask(node, q_len: int, kv_len: int, past: int, nonpad) -> np.ndarray | None:
    """The causal / window / padding part of the mask, on the host: (q, kv) or (B, 1, q, kv) of bools."""
    left, right = node.get("left_window_size", -1), node.get("right_window_size", -1)
    causal = bool(node.get("is_causal", 0))
    if not (causal or left >= 0 or right >= 0 or nonpad is not None):
        return None
    i = np.arange(q_len).reshape(-1, 1)
    j = np.arange(kv_len).reshape(1, -1)
    if nonpad is not None:
        lengths = host(nonpad).reshape(-1, 1, 1).astype(np.int64)
        offset = lengths - q_len
    else:
        lengths, offset = None, past
    diff = (i + offset) - j
    allowed = np.ones(np.shape(diff), dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    if lengths is not None:
        allowed = allowed & (j < lengths)
        allowed = allowed.reshape(-1, 1, q_len, kv_len)
    return allowed


@op("Attention", since=23)
def attention(node, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
    three_d = q.rank == 3
    if three_d:
        q = split_heads(q, node["q_num_heads"])
        k, v = split_heads(k, node["kv_num_heads"]), split_heads(v, node["kv_num_heads"])
    scale = node.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    if past_key is not None:
        k, v = c.cat([past_key, k], 2), c.cat([past_value, v], 2)
    present_key, present_value = k, v
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = None
    if attn_mask is not None:
        if attn_mask.shape[-1] < kv_len:  # a shorter mask leaves the extra keys masked out
            fill = 0 if node.in_type(3, attn_mask).is_bool else -math.inf
            pad_shape = attn_mask.shape[:-1] + (kv_len - attn_mask.shape[-1],)
            attn_mask = c.cat([attn_mask, c.full(pad_shape, fill, dtype=attn_mask.dtype, device=q.device)], -1)
        if node.in_type(3, attn_mask).is_bool:
            blocked = c.full(attn_mask.shape, -math.inf, dtype=q.dtype, device=q.device)
            bias = c.where(attn_mask != 0, 0.0, blocked)
        else:
            bias = attn_mask.to_dtype(q.dtype)
    allowed = _shape_mask(node, q_len, kv_len, past_key.shape[2] if past_key is not None else 0, nonpad_kv_seqlen)
    if allowed is not None:
        extra = const(np.where(allowed, 0.0, -np.inf), q.dtype, q.device)
        bias = extra if bias is None else bias + extra
    k, v = repeat_heads(k, q.shape[1] // k.shape[1]), repeat_heads(v, q.shape[1] // v.shape[1])
    root = math.sqrt(scale)  # both operands scaled by sqrt(scale), as the reference does
    qk = (q * root) @ (k * root).transpose(-1, -2)
    softcap = node.get("softcap", 0.0)
    if softcap and softcap > 0:
        qk = (qk / softcap).tanh() * softcap
    mode = node.get("qk_matmul_output_mode", 0)
    scores = qk if bias is None else qk + bias
    qk_out = scores if mode == 2 else qk
    precision = node.get("softmax_precision")
    if precision:
        scores = scores.to_dtype(onnx_type(precision).storage)
    probs = scores.softmax(-1)
    if bias is not None:  # a row with every key masked attends to nothing
        probs = c.where(bias.amax(-1, True) == -math.inf, 0.0, probs)
    probs = probs.to_dtype(q.dtype)
    if mode == 3:
        qk_out = probs
    y = probs @ v
    if three_d:
        y = merge_heads(y)
    return y, present_key, present_value, qk_out.to_dtype(q.dtype)


@op("RotaryEmbedding", since=23)
def rotary_embedding(node, x, cos_cache, sin_cache, position_ids=None):
    shape = x.shape
    if x.rank == 4:  # (B, H, S, D) -> (B, S, H, D)
        x = x.transpose(1, 2)
    else:
        b, s, hidden = x.shape
        heads = node["num_heads"]
        x = x.reshape(b, s, heads, hidden // heads)
    dim = node.get("rotary_embedding_dim", 0) or x.shape[-1]
    if position_ids is not None:
        cos_cache = cos_cache.index_select(position_ids.reshape(-1).to_dtype(c.i64), 0).reshape(
            position_ids.shape + cos_cache.shape[1:])
        sin_cache = sin_cache.index_select(position_ids.reshape(-1).to_dtype(c.i64), 0).reshape(
            position_ids.shape + sin_cache.shape[1:])
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)   # (B, S, 1, dim / 2)
    rot, rest = x.narrow(-1, 0, dim), x.narrow(-1, dim, x.shape[-1] - dim)
    half = dim // 2
    interleaved = bool(node.get("interleaved", 0))
    if interleaved:
        pairs = rot.reshape(rot.shape[:-1] + (half, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
    else:
        x1, x2 = rot.narrow(-1, 0, half), rot.narrow(-1, half, half)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rotated = c.stack([real, imag], -1).reshape(rot.shape)
    else:
        rotated = c.cat([real, imag], -1)
    out = c.cat([rotated, rest], -1) if rest.shape[-1] else rotated
    return out.transpose(1, 2) if len(shape) == 4 else out.reshape(shape)


def _heads(x, heads: int):
    """(B, T, H * D) -> (B, H, T, D) in f32."""
    b, t, hd = x.shape
    if hd % heads:
        raise ValueError(f"last dim {hd} is not a multiple of {heads} heads")
    return x.to_dtype(c.f32).reshape(b, t, heads, hd // heads).transpose(1, 2)


def _repeat_heads(state, group: int):
    """(B, H, ...) -> (B, H * group, ...), each head repeated group times in a row."""
    b, h, *rest = state.shape
    return state.unsqueeze(2).broadcast_as((b, h, group, *rest)).contiguous().reshape(b, h * group, *rest)


@op("LinearAttention", since=27)
def linear_attention(node, query, key, value, past_state=None, decay=None, beta=None):
    """The recurrent (linear) attention of opset 27: a (d_k, d_v) state per key
    head, decayed (gated), corrected toward each value (delta) and written with
    k v^T at every step, read by the queries; accumulated in f32."""
    rule = node.get("update_rule", "gated_delta")
    hq, hkv = node.get("q_num_heads"), node.get("kv_num_heads")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta") or not hq or not hkv or hq % hkv \
            or gating != (decay is not None) or delta != (beta is not None):
        raise node.fail(f"update_rule {rule!r} with {hq} query and {hkv} key heads, decay given: "
                        f"{decay is not None}, beta given: {beta is not None}")
    b, t, _ = query.shape
    q, k, v = _heads(query, hq), _heads(key, hkv), _heads(value, hkv)
    d_k, d_v = q.shape[-1], v.shape[-1]
    if decay is not None:  # per head (B, T, H) or per key dim (B, T, H * d_k) -> (B, H, T, 1 or d_k)
        decay = _heads(decay, hkv)
    if beta is not None:  # (B, T, H or 1) -> (B, H or 1, T, 1)
        beta = beta.to_dtype(c.f32).reshape(b, t, beta.shape[-1], 1).transpose(1, 2)
    state = (past_state.to_dtype(c.f32) if past_state is not None
             else c.zeros((b, hkv, d_k, d_v), dtype=c.f32, device=query.device))
    scale = node.get("scale", 0.0) or 1.0 / math.sqrt(d_k)
    outputs = []
    for i in range(t):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if gating:
            state = state * decay[:, :, i].exp().unsqueeze(-1)
        if delta:
            retrieved = (state * k_t.unsqueeze(-1)).sum(2)
            v_t = beta[:, :, i] * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = state if hq == hkv else _repeat_heads(state, hq // hkv)
        outputs.append((q[:, :, i].unsqueeze(-1) * read).sum(2) * scale)
    out = c.stack(outputs, 2).transpose(1, 2).reshape(b, t, hq * d_v).to_dtype(query.dtype)
    return out, state.to_dtype(past_state.dtype if past_state is not None else query.dtype)
