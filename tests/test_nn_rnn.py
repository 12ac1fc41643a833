"""LSTM and GRU against PyTorch (outputs, final states, input, state and
parameter gradients; multi-layer, bidirectional, batch_first, unbatched,
given initial states), their parameter names, and their errors."""

import numpy as np
import pytest

import candle_api as c
from candle_api import nn
from candle_api.errors import ShapeError
from torch_reference import cases, check_layer_case

RNN_CASES = {k: v for k, v in cases("torch_layers").items() if v["config"]["cls"] in ("LSTM", "GRU")}


@pytest.mark.parametrize("name", sorted(RNN_CASES))
def test_rnns_match_pytorch(name):
    check_layer_case(RNN_CASES[name])


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
