"""ONNX's LSTM and GRU beyond the node suite's cases: clip, input_forget,
peepholes and sequence_lens with reverse and bidirectional layers, layout=1,
linear_before_reset 0 and 1, float64, and activations other than the
defaults (which run the layer ops' decompositions); against the NumPy
references of the conformance suite. The default activations run one fused
kernel call per direction on the cpu device."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

import candle_api as c  # noqa: E402
from candle_api.testing import reference as R  # noqa: E402
from candle_api.testing.opinfo_rnn import gru_reference, lstm_reference  # noqa: E402
from test_ops import run  # noqa: E402

RNG = np.random.default_rng(11)
T, B, I, H = 5, 3, 4, 6


def randn(*shape, scale=1.0, dtype=np.float32):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def onnx_layer(op: str, gates: int, directions: int, dtype=np.float32, layout=0, lens=None, states=1, peep=False,
               **attrs):
    """Runs one LSTM or GRU node; returns (outputs, the feeds in (T, B, ...) order)."""
    x = randn(T, B, I, dtype=dtype)
    feeds = {"x": x.transpose(1, 0, 2).copy() if layout else x,
             "w": randn(directions, gates * H, I, scale=0.5, dtype=dtype),
             "r": randn(directions, gates * H, H, scale=0.5, dtype=dtype),
             "b": randn(directions, 2 * gates * H, scale=0.5, dtype=dtype)}
    names = ["x", "w", "r", "b", "lens" if lens is not None else ""]
    if lens is not None:
        feeds["lens"] = np.asarray(lens, dtype=np.int32)
    for k in ("h0", "c0")[:states]:
        s = randn(directions, B, H, dtype=dtype)
        feeds[k] = s.transpose(1, 0, 2).copy() if layout else s
        names.append(k)
    if peep:
        feeds["p"] = randn(directions, 3 * H, scale=0.5, dtype=dtype)
        names.append("p")
    outs = ["y", "y_h", "y_c"][:1 + states]
    direction = {1: attrs.pop("direction", "forward"), 2: "bidirectional"}[directions]
    node = helper.make_node(op, names, outs, hidden_size=H, direction=direction, layout=layout, **attrs)
    got = run([node], feeds, outs)
    if layout:  # back to (T, dirs, B, H) and (dirs, B, H)
        got = [got[0].transpose(1, 2, 0, 3)] + [g.transpose(1, 0, 2) for g in got[1:]]
    expected = feeds | {"x": x}
    for k in ("h0", "c0"):
        if layout and k in feeds:
            expected[k] = feeds[k].transpose(1, 0, 2)
    return got, expected, direction


def expected_outputs(reference, f: dict, direction: str, states: int, **kw):
    """Y, Y_h (and Y_c) from the reference, direction by direction."""
    outs = []
    for d in range(2 if direction == "bidirectional" else 1):
        x = f["x"].astype(np.float64)
        wb, rb = np.split(f["b"][d].astype(np.float64), 2)
        args = [x, f["w"][d].astype(np.float64), f["r"][d].astype(np.float64)]
        args += [f[k][d].astype(np.float64) for k in ("h0", "c0")[:states]]
        extra = {"peepholes": f["p"][d].astype(np.float64)} if "p" in f else {}
        outs.append(reference(*args, wb, rb, f.get("lens"), reverse=direction == "reverse" or d == 1, **extra, **kw))
    return [np.stack([o[:T] for o in outs], 1)] + [np.stack([o[T + k] for o in outs]) for k in range(states)]


def check(got, expected, rtol=2e-5, atol=2e-6):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_options_run_fused(layout):
    with c.trace() as t:
        got, f, direction = onnx_layer("LSTM", 4, 2, layout=layout, lens=[5, 2, 0], states=2, peep=True, clip=1.2,
                                       input_forget=1)
    check(got, expected_outputs(lstm_reference, f, direction, 2, gates="iofc", clip=1.2, input_forget=True))
    assert sum(n for k, n in t.kernels.items() if k[1] == "lstm_layer") == 2  # one call per direction
    assert not t.decompositions


@pytest.mark.parametrize("before_reset", [0, 1])
def test_gru_options_run_fused(before_reset):
    with c.trace() as t:
        got, f, direction = onnx_layer("GRU", 3, 2, lens=[3, 5, 1], clip=2.0, linear_before_reset=before_reset)
    check(got, expected_outputs(gru_reference, f, direction, 1, gates="zrh", clip=2.0,
                                linear_before_reset=bool(before_reset)))
    assert sum(n for k, n in t.kernels.items() if k[1] == "gru_layer") == 2


def test_reverse_layers_with_lengths_in_float64():
    got, f, direction = onnx_layer("LSTM", 4, 1, dtype=np.float64, lens=[1, 5, 3], states=2, direction="reverse")
    check(got, expected_outputs(lstm_reference, f, direction, 2, gates="iofc"), rtol=1e-12, atol=1e-12)
    got, f, direction = onnx_layer("GRU", 3, 1, dtype=np.float64, lens=[4, 0, 5], direction="reverse")
    check(got, expected_outputs(gru_reference, f, direction, 1, gates="zrh", linear_before_reset=False),
          rtol=1e-12, atol=1e-12)


def hard_sigmoid(alpha, beta):
    return lambda v: np.clip(alpha * v + beta, 0, 1)


def leaky_relu(alpha):
    return lambda v: np.where(v < 0, alpha * v, v)


def test_other_activations_run_the_decomposition():
    with c.trace() as t:
        got, f, direction = onnx_layer("LSTM", 4, 1, states=2, activations=["HardSigmoid", "LeakyRelu", "Tanh"],
                                       activation_alpha=[0.3, 0.1], activation_beta=[0.4])
    acts = (hard_sigmoid(0.3, 0.4), leaky_relu(0.1), np.tanh)
    check(got, expected_outputs(lstm_reference, f, direction, 2, gates="iofc", activations=acts))
    assert not any(k[1] == "lstm_layer" for k in t.kernels)
    got, f, direction = onnx_layer("GRU", 3, 2, activations=["Sigmoid", "Softsign", "relu", "tanh"],
                                   linear_before_reset=1)
    for d, acts in enumerate([(R.sigmoid, lambda v: v / (1 + np.abs(v))), (lambda v: np.maximum(v, 0), np.tanh)]):
        # each direction has its own pair of activations
        one = {k: v[d:d + 1] for k, v in f.items() if k in ("w", "r", "b", "h0")} | {"x": f["x"]}
        ref = expected_outputs(gru_reference, one, "reverse" if d else "forward", 1, gates="zrh",
                               activations=acts)
        check([got[0][:, d:d + 1], got[1][d:d + 1]], ref)
