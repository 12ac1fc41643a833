"""Every format's loader on valid files and their structure-aware mutants.

A case writes one file (a valid one 15% of the time), loads it with
``candle_api.load`` and reads every tensor in full. A valid file must give
back what was written (values, dtypes by the documented widening rule,
metadata), and raise nothing; a mutant must load or raise FormatError (a
candle error, where the ONNX evaluator also plans the model). Case ``index`` is of
format ``index % 7``, so every quick run covers each format evenly."""

from __future__ import annotations

import numpy as np

import candle_api as c
from candle_api.errors import FormatError
from candle_api.quantized import QTensor

from ..case import Case
from ..files import Expected, ctranslate2, gguf, numpy, onnx, safetensors, special, torch

BUILDERS = [safetensors, numpy, gguf, torch, onnx, ctranslate2]


def loaded_dtype(dtype) -> np.dtype:
    """The numpy dtype of the tensor a stored dtype loads as (docs: candle_formats.safetensors)."""
    dtype = np.dtype(dtype).newbyteorder("=")
    widened = {np.dtype(np.int8): np.int16, np.dtype(np.uint16): np.uint32, np.dtype(np.uint64): np.int64}
    if dtype in widened:
        return np.dtype(widened[dtype])
    if dtype.itemsize == 1 and dtype.kind in "fV":  # the float8 types
        return np.dtype(c.bf16.np if dtype.name == "float8_e8m0fnu" else np.float16)
    return dtype


def read_all(tf) -> dict:
    """name -> the values of every tensor (QTensors: the raw blocks and the dequantized values)."""
    out = {}
    for name in tf:
        t = tf[name]
        if isinstance(t, QTensor):
            out[name] = (bytes(t.data), t.dequantize().numpy().copy())
        else:
            out[name] = _read(t.numpy())
    return out


#: Largest tensor read as a whole; a bigger one (a file's zero-stride view of a small storage can be
#: billions of elements long) has its distinct elements read, each broadcast dim once.
WHOLE = 1 << 24


def _read(arr: np.ndarray) -> np.ndarray:
    if arr.size <= WHOLE:
        return arr.copy()
    return arr[tuple(slice(0, 1) if s == 0 else slice(None) for s in arr.strides)].copy()


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == loaded_dtype(want.dtype), f"{what}: dtype {got.dtype}, expected {loaded_dtype(want.dtype)}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want.astype(got.dtype)), f"{what}: values differ"
    else:
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True), f"{what}: values differ"


def check_values(tf, got: dict, expected: Expected) -> None:
    assert sorted(got) == sorted(expected.tensors), f"names {sorted(got)[:5]}, expected {sorted(expected.tensors)[:5]}"
    for name, want in expected.tensors.items():
        if not isinstance(got[name], tuple):
            same(got[name], want, repr(name))
            continue
        blocks, values = got[name]  # a GGUF tensor: its blocks untouched, plain types dequantized exactly
        assert blocks == (want if isinstance(want, bytes) else want.tobytes()), f"{name!r}: the blocks differ"
        if not isinstance(want, bytes):
            same(values, want.astype(np.float32), repr(name))
    if expected.metadata is not None:
        assert dict(tf.metadata) == expected.metadata, f"metadata {tf.metadata!r}, expected {expected.metadata!r}"


def make(rng, index, tmp) -> Case:
    if index % (len(BUILDERS) + 1) == len(BUILDERS):
        path, fmt, what = special.make(rng, tmp)

        def run_special():
            read_all(c.load(path, format=fmt))
            return "loaded"

        return Case(what, run_special, (FormatError,))
    builder = BUILDERS[index % (len(BUILDERS) + 1)]
    path, expected, what = builder.make(rng, tmp, mutate=rng.random() < 0.85)
    evaluate = builder is onnx and rng.random() < 0.3  # the evaluator also reads, checks and plans the model

    def run():
        tf = c.load(path)
        got = read_all(tf)
        if expected is not None:
            check_values(tf, got, expected)
        if evaluate:
            from candle_api.onnx import ONNXModel

            ONNXModel(path)
        return "loaded"

    if expected is not None:
        allowed = ()  # a valid file must load
    else:
        allowed = (c.CandleError,) if evaluate else (FormatError,)  # the evaluator also raises NodeError...
    return Case(what + (" (and ONNXModel)" if evaluate else ""), run, allowed)
