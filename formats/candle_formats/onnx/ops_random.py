"""Dropout and the random generators, from the device's seeded stream.

None of them is folded at planning time (pure=False). A ``seed`` attribute
reseeds candle-api's stream (``candle_api.manual_seed``) before drawing, so a
run is reproducible, though the values differ from numpy's generator.
"""

from __future__ import annotations

import candle_api as c

from .dtypes import FLOAT, onnx_type
from .registry import op


def _seeded(node) -> None:
    seed = node.get("seed")
    if seed is not None:
        c.manual_seed(int(seed))


def _dtype(node, like=None):
    code = node.get("dtype")
    if code:
        return onnx_type(code).storage
    return like.dtype if like is not None else onnx_type(FLOAT).storage


def _keep_mask(node, x, ratio: float):
    _seeded(node)
    return c.rand(*x.shape, dtype=c.f32, device=x.device) >= ratio


@op("Dropout", pure=False)
def dropout_v1(node, x):
    """Before opset 12: ratio is an attribute, is_test (before 7) turns it off."""
    ratio = node.get("ratio", 0.5)
    if node.opset < 7 and not node.get("is_test", 0) and ratio > 0:
        keep = _keep_mask(node, x, ratio)
        return x * keep.to_dtype(x.dtype) / (1 - ratio), keep
    return x, c.ones(x.shape, dtype=c.u8, device=x.device)


@op("Dropout", since=12, pure=False)
def dropout(node, x, ratio=None, training_mode=None):
    r = float(ratio.numpy().reshape(-1)[0]) if ratio is not None else 0.5
    training = training_mode is not None and bool(training_mode.numpy().reshape(-1)[0])
    if not training or r == 0:
        return x, c.ones(x.shape, dtype=c.u8, device=x.device)
    keep = _keep_mask(node, x, r)
    return x * keep.to_dtype(x.dtype) / (1 - r), keep


@op("RandomUniform", pure=False)
def random_uniform(node):
    _seeded(node)
    return c.rand(*node["shape"], lo=node.get("low", 0.0), up=node.get("high", 1.0), dtype=_dtype(node),
                  device=node.device)


@op("RandomNormal", pure=False)
def random_normal(node):
    _seeded(node)
    return c.randn(*node["shape"], mean=node.get("mean", 0.0), std=node.get("scale", 1.0), dtype=_dtype(node),
                   device=node.device)


@op("RandomUniformLike", pure=False)
def random_uniform_like(node, x):
    _seeded(node)
    return c.rand(*x.shape, lo=node.get("low", 0.0), up=node.get("high", 1.0), dtype=_dtype(node, x),
                  device=x.device)


@op("RandomNormalLike", pure=False)
def random_normal_like(node, x):
    _seeded(node)
    return c.randn(*x.shape, mean=node.get("mean", 0.0), std=node.get("scale", 1.0), dtype=_dtype(node, x),
                   device=x.device)


@op("Bernoulli", since=15, pure=False)
def bernoulli(node, p):
    _seeded(node)
    draw = c.rand(*p.shape, dtype=c.f64, device=p.device) < p.to_dtype(c.f64)
    return draw.to_dtype(_dtype(node, p))
