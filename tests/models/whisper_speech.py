"""Speech for the Whisper tests, the fixture script and the benchmark, spoken
by Debian's espeak-ng (``apt-get install espeak-ng``): its American voice at
its native 22,050 Hz, 16-bit mono, so every transcription also resamples.

The same espeak-ng version makes the same samples; the fixtures record the
version and a hash of what it said, and the tests compare with transformers'
text only where their espeak-ng said the same.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

RATE = 22050
VOICE, SPEED = "en-us", "165"
#: One sentence a clip (short-form decoding).
CLIPS = {
    "fox": "The quick brown fox jumps over the lazy dog.",
    "museum": "On the third of May, forty two people visited the museum at half past nine.",
}
#: Clips in other languages, for multilingual models: name -> (espeak-ng voice, text).
FOREIGN = {
    "de": ("de", "Der schnelle braune Fuchs springt über den faulen Hund."),
    "es": ("es", "El perro come pan en la cocina todos los días."),
}
#: Read one after the other with a pause between them: the long recording (past 30 s, so decoded in windows).
STORY = [
    "Whisper is a speech recognition model trained on many hours of audio.",
    "It listens to thirty seconds of sound at a time.",
    "The encoder turns the sound into features, and the decoder writes the words.",
    "Longer recordings are read in windows, one after another.",
    "Each window starts where the last complete sentence ended.",
    "The weather today is sunny, with a light breeze from the west.",
    "Please remember to water the plants on the balcony before you leave.",
    "The train to the airport leaves every fifteen minutes from platform four.",
    "We will meet again next week to talk about the results.",
    "Thank you for listening, and have a good evening.",
]
PAUSE_SECONDS = 0.7


def espeak_version() -> str | None:
    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    return subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.split("  ")[0]


def say(text: str, voice: str = VOICE) -> np.ndarray:
    """espeak-ng's int16 samples of ``text`` (at RATE)."""
    out = subprocess.run(["espeak-ng", "-v", voice, "-s", SPEED, "--stdout", text], capture_output=True,
                         check=True).stdout
    if out[:4] != b"RIFF" or out[36:40] != b"data":
        raise RuntimeError("espeak-ng wrote no plain 44-byte WAV header")
    return np.frombuffer(out[44:], dtype="<i2").copy()


def story() -> np.ndarray:
    """STORY read with pauses: about 45 s."""
    pause = np.zeros(int(PAUSE_SECONDS * RATE), dtype=np.int16)
    return np.concatenate([part for sentence in STORY for part in (say(sentence), pause)])


def write_wav(path: Path, samples: np.ndarray, rate: int = RATE) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    return path


def digest(samples: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(samples, dtype="<i2").tobytes()).hexdigest()[:16]


def as_float(samples: np.ndarray) -> np.ndarray:
    return samples.astype(np.float32) / 32768.0
