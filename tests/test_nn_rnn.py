"""LSTM, GRU and their cells against PyTorch (outputs, final states, input,
state and parameter gradients; multi-layer, bidirectional, batch_first,
unbatched, given initial states, proj_size), their parameter names, and
their errors; the fused layer ops (lstm_layer, gru_layer) against NumPy on
strided inputs, on any thread count, on the ref device (their
decomposition), with gradients against finite differences, and their
errors."""

import numpy as np
import pytest

import candle_api as c
from candle_api import nn
from candle_api.errors import ArgumentError, CandleError, DTypeError, ShapeError
from candle_api.ops.rnn import gru_layer, lstm_layer
from candle_api.testing.opinfo_rnn import gru_reference, lstm_reference
from candle_api.utils import get_num_threads, set_num_threads
from torch_reference import cases, check_layer_case

RNN_CASES = {k: v for k, v in cases("torch_layers").items() if v["config"]["cls"] in ("LSTM", "GRU")}
MORE_CASES = cases("torch_rnn")  # tests/fixtures/make_torch_rnn.py


@pytest.mark.parametrize("name", sorted(RNN_CASES))
def test_rnns_match_pytorch(name):
    check_layer_case(RNN_CASES[name])


@pytest.mark.parametrize("name", sorted(MORE_CASES))
def test_projections_cells_and_wide_layers_match_pytorch(name):
    check_layer_case(MORE_CASES[name])


def test_parameter_names_and_shapes_follow_pytorch():
    lstm = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    shapes = {k: v.shape for k, v in lstm.state_dict().items()}
    assert list(shapes)[:4] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert shapes["weight_ih_l0_reverse"] == (20, 3) and shapes["weight_ih_l1"] == (20, 10)
    assert shapes["bias_hh_l1_reverse"] == (20,) and len(shapes) == 16
    gru = nn.GRU(3, 5, bias=False)
    assert list(gru.state_dict()) == ["weight_ih_l0", "weight_hh_l0"] and gru.weight_hh_l0.shape == (15, 5)
    bound = 1 / np.sqrt(5)  # every weight starts in U(-1/sqrt(hidden), 1/sqrt(hidden))
    assert all(np.abs(p.numpy()).max() <= bound for p in lstm.parameters())
    assert repr(lstm) == "LSTM(3, 5, num_layers=2, bidirectional=True)"
    assert repr(nn.GRU(2, 4, batch_first=True, dropout=0.1, bias=False)) == (
        "GRU(2, 4, bias=False, batch_first=True, dropout=0.1)")


def test_shapes_states_and_dropout():
    lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.5)
    x = c.randn((2, 7, 3))
    out, (h, cell) = lstm(x)
    assert out.shape == (2, 7, 4) and h.shape == cell.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[:, -1].numpy(), h[-1].numpy())  # the last layer's last step
    lstm.eval()
    a, _ = lstm(x)
    zeros = c.zeros((2, 2, 4))
    b, _ = lstm(x, (zeros, zeros))
    np.testing.assert_array_equal(a.numpy(), b.numpy())  # no hx means zeros; no dropout in eval
    lstm.train()
    c.manual_seed(0)
    assert not np.allclose(lstm(x)[0].numpy(), a.numpy())  # dropout between layers in training
    gru = nn.GRU(3, 4, bidirectional=True)
    out, h = gru(c.randn((5, 2, 3)))
    assert out.shape == (5, 2, 8) and h.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[0, :, 4:].numpy(), h[1].numpy())  # the reverse direction ends at step 0


def test_rnn_errors():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ShapeError, match="3 features in the last dim, got shape"):
        lstm(c.randn((5, 2, 4)))
    with pytest.raises(ShapeError, match="2-d or 3-d"):
        lstm(c.randn((1, 5, 2, 3)))
    with pytest.raises(ShapeError, match=r"initial state of shape \(1, 2, 4\), expected \(2, 2, 4\)"):
        lstm(c.randn((5, 2, 3)), (c.zeros((1, 2, 4)), c.zeros((1, 2, 4))))
    with pytest.raises(ShapeError, match="hx must hold 2 tensors"):
        lstm(c.randn((5, 2, 3)), (c.zeros((2, 2, 4)),))
    with pytest.raises(ValueError, match="dropout"):
        nn.GRU(3, 4, dropout=2.0)
    with pytest.raises(ValueError, match="positive"):
        nn.GRU(3, 4, num_layers=0)


# ---- the fused layer ops -----------------------------------------------------------------------------
RNG = np.random.default_rng(5)


def operands(gates: int, steps=6, batch=5, hidden=70, features=9, dtype="f64"):
    """A layer's operands as NumPy arrays and as tensors: x is a batch-first input viewed step-major and w_ih,
    w_hh transposed views (all strided); 70 hidden units are three blocks of the native kernel."""
    arrays = {"x": RNG.uniform(-2, 2, (steps, batch, features)),
              "w_ih": RNG.uniform(-0.5, 0.5, (gates * hidden, features)),
              "w": RNG.uniform(-0.3, 0.3, (gates * hidden, hidden)),
              "h0": RNG.uniform(-1, 1, (batch, hidden)), "c0": RNG.uniform(-1, 1, (batch, hidden)),
              "b_ih": RNG.uniform(-0.5, 0.5, gates * hidden), "b_hh": RNG.uniform(-0.5, 0.5, gates * hidden)}
    tensors = {k: c.Tensor(v).to_dtype(dtype) for k, v in arrays.items()}
    tensors["x"] = c.Tensor(np.ascontiguousarray(arrays["x"].transpose(1, 0, 2))).to_dtype(dtype).transpose(0, 1)
    for k in ("w_ih", "w"):
        tensors[k] = c.Tensor(np.ascontiguousarray(arrays[k].T)).to_dtype(dtype).t()
    return arrays, tensors


def run_lstm(t, **kw):
    return lstm_layer(t["x"], t["w_ih"], t["w"], t["h0"], t["c0"], t["b_ih"], t["b_hh"], **kw)


def run_gru(t, **kw):
    return gru_layer(t["x"], t["w_ih"], t["w"], t["h0"], t["b_ih"], t["b_hh"], **kw)


@pytest.mark.parametrize("dtype, tol", [("f32", 2e-5), ("f64", 1e-12)])
@pytest.mark.parametrize("reverse", [False, True])
def test_fused_layers_match_numpy_on_strided_inputs(dtype, tol, reverse):
    assert not c.Tensor(np.zeros((2, 3))).t().is_contiguous()
    a, t = operands(4, dtype=dtype)
    lens = np.array([6, 0, 3, 6, 1])
    got = run_lstm(t, reverse=reverse, lengths=c.Tensor(lens.astype(np.int32), dtype="i32"))
    want = lstm_reference(a["x"], a["w_ih"], a["w"], a["h0"], a["c0"], a["b_ih"], a["b_hh"], lens, reverse=reverse)
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)
    a, t = operands(3, dtype=dtype)
    for before in (False, True):
        got = run_gru(t, reverse=reverse, linear_before_reset=before, gates="zrh")
        want = gru_reference(a["x"], a["w_ih"], a["w"], a["h0"], a["b_ih"], a["b_hh"], reverse=reverse,
                             linear_before_reset=before, gates="zrh")
        np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, tol", [("f32", 2e-5), ("f64", 1e-12)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("options", [{}, {"gates": "iofc", "clip": 1.5, "input_forget": True}, {"peepholes": True}])
def test_lstm_without_lengths_matches_numpy_over_several_chunks(dtype, tol, reverse, options):
    """No sequence lengths: the inputs packed from x in place, 150 steps in several chunks (68 in f32, 34 in
    f64; the last one partial), f32's cells in one vector pass; a NaN input reaches the outputs it feeds as NaN."""
    a, t = operands(4, steps=150, dtype=dtype)
    x = np.ascontiguousarray(a["x"])
    x[40, 2, 3] = np.nan
    kw = dict(options)
    if kw.pop("peepholes", False):
        a["peepholes"] = RNG.uniform(-0.5, 0.5, 3 * 70)
        kw["peepholes"] = c.Tensor(a["peepholes"]).to_dtype(dtype)
    got = run_lstm({**t, "x": c.Tensor(x).to_dtype(dtype)}, reverse=reverse, **kw).numpy()
    want = lstm_reference(x, a["w_ih"], a["w"], a["h0"], a["c0"], a["b_ih"], a["b_hh"], reverse=reverse,
                          **{**kw, "peepholes": a.get("peepholes")})
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any() and not np.isnan(got[:, 0]).any()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_on_a_batch_first_view_of_one_sequence(reverse):
    """Batch 1 viewed step-major from batch-first storage (rows one step apart): packed from x in place."""
    a, t = operands(4, steps=150, batch=1, dtype="f32")
    x = c.Tensor(np.ascontiguousarray(a["x"].transpose(1, 0, 2))).to_dtype("f32").transpose(0, 1)
    got = run_lstm({**t, "x": x}, reverse=reverse).numpy()
    want = lstm_reference(a["x"], a["w_ih"], a["w"], a["h0"], a["c0"], a["b_ih"], a["b_hh"], reverse=reverse)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_results_do_not_depend_on_the_thread_count():
    _, t4 = operands(4, dtype="f32", batch=17)
    _, t3 = operands(3, dtype="f32", batch=17)
    saved = get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3):
            set_num_threads(threads)
            results.append([run_lstm(t4).numpy(), run_gru(t3).numpy(), run_gru(t3, linear_before_reset=False).numpy()])
    finally:
        set_num_threads(saved)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_concurrent_callers_get_the_same_results():
    """A second Python thread calling while the pool is busy runs the kernel's threads one after another: the
    first takes every item the others have not started."""
    from concurrent.futures import ThreadPoolExecutor

    _, t = operands(4, dtype="f32", batch=9)
    want = run_lstm(t).numpy()
    saved = get_num_threads()
    try:
        set_num_threads(2)
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: run_lstm(t).numpy(), range(16)))
    finally:
        set_num_threads(saved)
    for got in results:
        np.testing.assert_array_equal(got, want)


def test_modules_on_the_ref_device_match_cpu():
    for cls in (nn.LSTM, nn.GRU):
        cpu = cls(3, 40, num_layers=2, bidirectional=True, dtype="f64")
        ref = cls(3, 40, num_layers=2, bidirectional=True, dtype="f64", device="ref")
        ref.load_state_dict({k: v.to_device("ref") for k, v in cpu.state_dict().items()})
        x = c.Tensor(RNG.standard_normal((4, 2, 3)))
        with c.trace() as trace:
            got_ref = ref(x.to_device("ref"))
        assert any(op == f"{cls.__name__.lower()}_layer" for _, op, _ in trace.decompositions)
        got_cpu = cpu(x)
        for a, b in zip(nn_outputs(got_cpu), nn_outputs(got_ref)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def nn_outputs(out) -> list:
    return [t for o in out for t in (o if isinstance(o, tuple) else (o,))]


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_gradients_through_fused_layers_match_finite_differences(cls):
    layer = cls(2, 3, num_layers=2, bidirectional=True, dtype="f64")
    w = layer.weight_hh_l1_reverse
    arrays = [RNG.standard_normal((3, 2, 2)), w.numpy().copy()]
    cot = c.Tensor(RNG.standard_normal((3, 2, 6)))

    def loss(x_values, w_values):
        w.set(c.Tensor(w_values))
        return (layer(c.Tensor(x_values))[0] * cot).sum_all().item()

    x = c.Tensor(arrays[0]).requires_grad_()
    w.set(c.Tensor(arrays[1]))
    (layer(x)[0] * cot).sum_all().backward()
    for k, grad in enumerate((x.grad.numpy(), w.grad.numpy())):
        numeric = np.zeros_like(arrays[k])
        for i in np.ndindex(arrays[k].shape):
            values = [a.copy() for a in arrays]
            values[k][i] += 1e-6
            up = loss(*values)
            values[k][i] -= 2e-6
            numeric[i] = (up - loss(*values)) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_layer_op_errors():
    _, t = operands(4, steps=3, batch=2, hidden=4, features=5)
    x, w_ih, w, h0, c0 = (t[k] for k in ("x", "w_ih", "w", "h0", "c0"))
    with pytest.raises(ShapeError, match=r"x must be \(steps, batch, features\), got shape \(2, 5\)"):
        lstm_layer(x[0], w_ih, w, h0, c0)
    with pytest.raises(ShapeError, match=r"w_hh must be \(4 \* hidden, hidden\)"):
        lstm_layer(x, w_ih, w.t(), h0, c0)
    with pytest.raises(ShapeError, match=r"w_ih must be \(4 \* hidden, features\) = \(16, 5\) .* got shape \(16, 4\)"):
        lstm_layer(x, w_ih.narrow(1, 0, 4), w, h0, c0)
    with pytest.raises(ShapeError, match=r"w_ih must be \(3 \* hidden, features\) = \(12, 5\)"):
        gru_layer(x, w_ih, w.narrow(0, 0, 12), h0)
    with pytest.raises(ShapeError, match=r"c0 must be \(batch, hidden\) = \(2, 4\), got shape \(4,\)"):
        lstm_layer(x, w_ih, w, h0, c0[0])
    with pytest.raises(ShapeError, match=r"b_hh must have shape \(16,\), got \(15,\)"):
        lstm_layer(x, w_ih, w, h0, c0, t["b_ih"], t["b_hh"].narrow(0, 0, 15))
    with pytest.raises(ShapeError, match=r"peepholes must have shape \(12,\)"):
        lstm_layer(x, w_ih, w, h0, c0, peepholes=t["b_ih"])
    with pytest.raises(DTypeError, match="dtypes differ"):
        lstm_layer(x, w_ih, w.to_dtype("f32"), h0, c0)
    with pytest.raises(DTypeError, match="needs a float tensor"):
        lstm_layer(*(v.to_dtype("i64") for v in (x, w_ih, w)), h0, c0)
    with pytest.raises(ShapeError, match=r"lengths must be integers of shape \(2,\), got f32"):
        lstm_layer(x, w_ih, w, h0, c0, lengths=c.Tensor([1.0, 2.0]))
    with pytest.raises(ArgumentError, match="gates must be one of"):
        gru_layer(x, w_ih.narrow(0, 0, 12), w.narrow(0, 0, 12), h0, gates="ifgo")
    with pytest.raises(ArgumentError, match="clip must be a positive number"):
        lstm_layer(x, w_ih, w, h0, c0, clip=-1.0)
    for device in ("cpu", "ref"):  # the kernel and the decomposition both refuse a length past the steps
        args = [v.to_device(device) for v in (x, w_ih, w, h0, c0)]
        with pytest.raises(CandleError, match=r"sequence length 4 of batch entry 1 is out of range \[0, 3\]"):
            lstm_layer(*args, lengths=c.Tensor([3, 4], dtype="i64", device=device))
