"""Recurrent layers: lstm_layer and gru_layer, one layer in one direction over
every time step in one call of cd_rnn (csrc/kernels/rnn.c)."""

from __future__ import annotations

from functools import partial

from ..library import error
from .descriptors import pack

LSTM, GRU = 0, 1


def _at(t, lt, isz):
    """The address of a tensor's first element, or None when it is absent."""
    return None if t is None else t.ptr + lt.offset * isz


def _stride(lt) -> int:
    return 0 if lt is None else lt.strides[0]


def layer(fn, cell, dt):
    """k(out, x, lx, w_ih, lw_ih, w_hh, lw_hh, b_ih, lb_ih, b_hh, lb_hh, h0, lh0, [c0, lc0, peep, lpeep,] lens,
    llens, reverse, onnx_gates, clip, flag): flag is input_forget (LSTM) or linear_before_reset (GRU)."""
    isz = dt.itemsize

    def kernel(out, x, lx, w_ih, lw_ih, w_hh, lw_hh, b_ih, lb_ih, b_hh, lb_hh, h0, lh0, *rest):
        if cell == LSTM:
            c0, lc0, peep, lpeep, lens, llens, reverse, onnx_gates, clip, flag = rest
        else:
            (lens, llens, reverse, onnx_gates, clip, flag), c0, lc0, peep, lpeep = rest, None, None, None, None
        steps, batch, features = lx.shape
        desc = pack([steps, batch, lw_hh.shape[1], features, *lx.strides, *lw_ih.strides, *lw_hh.strides,
                     *lh0.strides, *(lc0.strides if lc0 is not None else (0, 0)), _stride(lb_ih), _stride(lb_hh),
                     _stride(lpeep), int(reverse), onnx_gates, int(flag and cell == LSTM),
                     int(flag and cell == GRU)])
        if fn(dt.code, cell, desc, _at(x, lx, isz), _at(w_ih, lw_ih, isz), _at(w_hh, lw_hh, isz),
              _at(b_ih, lb_ih, isz), _at(b_hh, lb_hh, isz), _at(h0, lh0, isz), _at(c0, lc0, isz),
              _at(peep, lpeep, isz), _at(lens, llens, 8), out.ptr, clip):
            raise error()

    return kernel


def makers(lib) -> dict:
    return {"lstm_layer": partial(layer, lib.cd_rnn, LSTM), "gru_layer": partial(layer, lib.cd_rnn, GRU)}
