"""Reads the PyTorch reference fixtures (tests/fixtures/torch_*.npz, written by
tests/fixtures/make_torch_nn.py) for the nn, loss and optim tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

import candle_api as c

FIXTURES = Path(__file__).parent / "fixtures"


@functools.lru_cache(maxsize=None)
def cases(name: str) -> dict:
    """{case: {item: array or config, group: {key: array}}} from ``fixtures/{name}.npz``
    ("lstm/state/weight_ih_l0" becomes cases["lstm"]["state"]["weight_ih_l0"])."""
    out: dict = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            parts, value = key.split("/", 2), data[key]
            if len(parts) == 1:
                out[key] = value
                continue
            entry = out.setdefault(parts[0], {})
            if parts[1] == "config":
                entry["config"] = json.loads(str(value))
            elif len(parts) == 2:
                entry[parts[1]] = value
            else:
                entry.setdefault(parts[1], {})[parts[2]] = value
    return out


def ordered(group: dict) -> list:
    """The arrays of a group keyed "0", "1"... in order."""
    return [group[k] for k in sorted(group, key=int)]


def tensor(a: np.ndarray, grad: bool = False) -> c.Tensor:
    t = c.Tensor(np.ascontiguousarray(a))
    return t.requires_grad_() if grad else t


def assert_close(actual, expected, rtol: float = 1e-5, atol: float = 1e-6, what: str = "") -> None:
    np.testing.assert_allclose(np.asarray(actual.numpy() if isinstance(actual, c.Tensor) else actual),
                               expected, rtol=rtol, atol=atol, err_msg=what)


def _flat(out) -> list:
    """A module's outputs as a flat list: LSTM's (y, (h, c)) -> [y, h, c]."""
    if isinstance(out, c.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)]


def check_layer_case(case: dict, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Builds the layer of a torch_layers case with PyTorch's constructor
    arguments, loads the PyTorch state dict, and compares outputs, input and
    parameter gradients and the buffers after the forward pass."""
    cfg = case["config"]
    layer = getattr(c.nn, cfg["cls"])(*cfg["args"], **cfg["kwargs"])
    layer.load_state_dict(case.get("state", {}))
    layer.train(cfg["mode"] == "train")
    inputs = [tensor(a, grad=a.dtype.kind == "f") for a in ordered(case["in"])]
    if cfg["hx"] == "tuple":
        out = layer(inputs[0], tuple(inputs[1:]))
    elif cfg["hx"] == "tensor":
        out = layer(inputs[0], inputs[1])
    else:
        out = layer(inputs[0])
    outs = _flat(out)
    expected = ordered(case["out"])
    assert len(outs) == len(expected)
    for i, (o, e) in enumerate(zip(outs, expected)):
        assert_close(o, e, rtol, atol, f"output {i}")
    sum((o * tensor(g)).sum_all() for o, g in zip(outs, ordered(case["gout"]))).backward()
    for i, g in case.get("gin", {}).items():
        assert_close(inputs[int(i)].grad, g, rtol, atol, f"gradient of input {i}")
    params = dict(layer.named_parameters())
    assert sorted(params) == sorted(case.get("grad", {}))
    for name, g in case.get("grad", {}).items():
        assert_close(params[name].grad, g, rtol, atol, f"gradient of {name}")
    buffers = dict(layer.named_buffers())
    assert sorted(buffers) == sorted(case.get("state_after", {}))
    for name, b in case.get("state_after", {}).items():
        assert_close(buffers[name], b, rtol, atol, f"buffer {name} after the forward pass")
