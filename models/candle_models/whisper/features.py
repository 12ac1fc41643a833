"""Whisper's log-mel front end, in NumPy (float64, cast to float32 at the end).

25 ms Hann windows (n_fft 400, periodic, as ``torch.hann_window``) every
10 ms (hop 160) over the audio reflect-padded by half a window each side;
power spectrum; 80 or 128 mel bands of librosa's Slaney filter bank (what
Whisper's ``mel_filters.npz`` holds); log10 clamped at 1e-10, at most 8
below its maximum, then (x + 4) / 4. The last frame is dropped, so 30 s
(480,000 samples) give 3000 frames.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from candle_api.errors import ArgumentError

from .audio import SAMPLE_RATE

N_FFT, HOP_LENGTH = 400, 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480,000 samples: one window of the encoder
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames
#: Seconds per mel frame, and per audio position of the encoder (two frames).
FRAME_SECONDS = HOP_LENGTH / SAMPLE_RATE


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    linear = f / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(f, 1000.0) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, linear)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))


@lru_cache(maxsize=4)
def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) float32: triangular filters evenly spaced on the Slaney mel scale from 0
    to the Nyquist frequency, each scaled to unit area (librosa's ``norm="slaney"``)."""
    if n_mels < 1:
        raise ArgumentError(f"n_mels must be >= 1, got {n_mels}")
    fft_freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """(n_mels, len(audio) // 160) float32 log-mel frames of 16 kHz mono ``audio``."""
    audio = np.asarray(audio, dtype=np.float64)
    if audio.ndim != 1:
        raise ArgumentError(f"audio must be 1-d (mono samples), got shape {audio.shape}")
    if len(audio) <= N_FFT // 2:
        raise ArgumentError(f"audio of {len(audio)} samples is too short: the front end needs more than "
                            f"{N_FFT // 2} (12.5 ms)")
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    n_frames = 1 + (len(padded) - N_FFT) // HOP_LENGTH
    frames = np.lib.stride_tricks.as_strided(padded, (n_frames, N_FFT), (padded.strides[0] * HOP_LENGTH,
                                                                         padded.strides[0]))
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    spectrum = np.fft.rfft(frames[:-1] * window, axis=1)
    power = spectrum.real ** 2 + spectrum.imag ** 2
    mel = mel_filters(n_mels).astype(np.float64) @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def pad_or_trim(audio: np.ndarray, length: int = N_SAMPLES) -> np.ndarray:
    """``audio`` cut or zero-padded to ``length`` samples."""
    audio = np.asarray(audio, dtype=np.float32)
    if len(audio) >= length:
        return audio[:length]
    return np.pad(audio, (0, length - len(audio)))


def window_features(mel: np.ndarray, start: int, frames: int = N_FRAMES) -> np.ndarray:
    """Frames ``start`` .. ``start + frames`` of ``mel``, zero-padded to ``frames`` past its end (the window
    a long recording's decoding reads at ``start``)."""
    part = mel[:, start:start + frames]
    if part.shape[1] < frames:
        part = np.pad(part, ((0, 0), (0, frames - part.shape[1])))
    return np.ascontiguousarray(part)
