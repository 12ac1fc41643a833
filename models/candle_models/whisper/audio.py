"""Audio in: WAV files and resampling to Whisper's 16 kHz.

:func:`read_wav` parses RIFF/WAVE itself (the stdlib ``wave`` module reads no
float samples): integer PCM of 8, 16, 24 or 32 bits, IEEE float of 32 or 64
bits, plain or WAVE_FORMAT_EXTENSIBLE, any number of channels (averaged to
mono, as ffmpeg's ``-ac 1`` that Whisper reads through). Every chunk size and
format field is checked against the file; a malformed file raises
:class:`candle_api.errors.FormatError` naming the offset. A data chunk whose
size is a placeholder (0, 0xFFFFFFFF, or from 0x7FFF0000 on, as streaming
writers such as ``espeak-ng --stdout`` leave it) runs to the end of the file.

:func:`resample` is a polyphase windowed-sinc filter (scipy's
``resample_poly`` design: a Kaiser-windowed (beta 5) low-pass cutting at the
lower Nyquist frequency, 10 zero crossings each side of the longer period),
so tones above 8 kHz are removed, not folded back into the speech band.
"""

from __future__ import annotations

import math
import numbers
import struct
from pathlib import Path

import numpy as np

from candle_api.errors import ArgumentError, FormatError
from candle_api.io import open_regular

SAMPLE_RATE = 16000
#: The highest sample rate read (studio audio's highest): bounds the resampling filter's length, which
#: grows with the rate over its greatest common divisor with 16 kHz.
MAX_RATE = 768_000
#: Largest WAV read (a day of 16 kHz mono f32 is 5.5 GB): bounds what a file can make us allocate.
MAX_BYTES = 4 << 30
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_PLACEHOLDER_SIZES = (0, 0xFFFFFFFF)


def _chunks(raw: bytes, path):
    """(id, data offset, size) of each chunk after the RIFF/WAVE header."""
    if len(raw) < 12 or raw[:4] not in (b"RIFF", b"RIFX") or raw[8:12] != b"WAVE":
        raise FormatError(path, 0, "not a WAV file (no RIFF/WAVE header)")
    if raw[:4] == b"RIFX":
        raise FormatError(path, 0, "big-endian WAV (RIFX) is not supported")
    at = 12
    while at + 8 <= len(raw):
        chunk, size = raw[at:at + 4], struct.unpack_from("<I", raw, at + 4)[0]
        yield chunk, at + 8, size
        at += 8 + size + (size & 1)  # chunks are padded to even sizes


def _format(raw: bytes, at: int, size: int, path) -> tuple[int, int, int, int]:
    """(format tag, channels, sample rate, bits per sample) of the fmt chunk."""
    if size < 16 or at + size > len(raw):
        raise FormatError(path, at, f"fmt chunk of {size} bytes is too short or runs past the end of the file")
    tag, channels, rate, _, block, bits = struct.unpack_from("<HHIIHH", raw, at)
    if tag == _EXTENSIBLE:
        if size < 40:
            raise FormatError(path, at, f"WAVE_FORMAT_EXTENSIBLE fmt chunk of {size} bytes (needs 40)")
        tag = struct.unpack_from("<H", raw, at + 24)[0]  # the sub-format GUID's first two bytes
    if tag not in (_PCM, _FLOAT):
        raise FormatError(path, at, f"WAV format tag {tag:#x} is not PCM or IEEE float (compressed WAV is not read)")
    if (tag == _PCM and bits not in (8, 16, 24, 32)) or (tag == _FLOAT and bits not in (32, 64)):
        raise FormatError(path, at, f"{bits}-bit {'PCM' if tag == _PCM else 'float'} samples are not supported")
    if channels == 0 or not 0 < rate <= MAX_RATE:
        raise FormatError(path, at, f"{channels} channels at {rate} Hz (rates up to {MAX_RATE} Hz are read)")
    if block != channels * bits // 8:
        raise FormatError(path, at, f"block align {block} is not {channels} channels x {bits // 8} bytes")
    return tag, channels, rate, bits


def _samples(data: bytes, tag: int, bits: int) -> np.ndarray:
    """Interleaved samples as float32 in [-1, 1)."""
    if tag == _FLOAT:
        return np.frombuffer(data, "<f4" if bits == 32 else "<f8").astype(np.float32)
    if bits == 8:  # unsigned, centred on 128
        return (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    if bits == 24:
        b = np.frombuffer(data, np.uint8).reshape(-1, 3).astype(np.int32)
        ints = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8  # sign-extend
        return ints.astype(np.float32) / float(1 << 23)
    ints = np.frombuffer(data, "<i2" if bits == 16 else "<i4")
    return (ints / float(1 << (bits - 1))).astype(np.float32)


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a WAV file."""
    with open_regular(path) as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise FormatError(path, None, f"the file is larger than the {MAX_BYTES}-byte limit")
    fmt = None
    for chunk, at, size in _chunks(raw, path):
        if chunk == b"fmt ":
            fmt = _format(raw, at, size, path)
        elif chunk == b"data":
            if fmt is None:
                raise FormatError(path, at - 8, "the data chunk comes before any fmt chunk")
            tag, channels, rate, bits = fmt
            if size in _PLACEHOLDER_SIZES or size >= 0x7FFF0000:
                size = len(raw) - at
            elif at + size > len(raw):
                raise FormatError(path, at - 8, f"data chunk of {size} bytes runs past the end of the file "
                                                f"({len(raw) - at} bytes left): truncated")
            frame = channels * bits // 8
            data = raw[at:at + size - size % frame]
            samples = _samples(data, tag, bits).reshape(-1, channels)
            return samples.mean(axis=1, dtype=np.float32) if channels > 1 else samples[:, 0].copy(), rate
    raise FormatError(path, None, "no data chunk" if fmt is not None else "no fmt chunk")


def _kaiser_lowpass(up: int, down: int) -> tuple[np.ndarray, int]:
    """(taps, half length): the anti-aliasing filter for resampling by up/down, gain ``up`` at DC."""
    ratio = max(up, down)
    half = 10 * ratio
    n = np.arange(-half, half + 1, dtype=np.float64)
    taps = np.sinc(n / ratio) / ratio * np.kaiser(2 * half + 1, 5.0)
    return taps * (up / taps.sum()), half


def resample(audio: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """``audio`` (1-d) from ``rate`` Hz to ``target`` Hz, as float32; ceil(len * target / rate) samples."""
    if isinstance(rate, bool) or not (isinstance(rate, numbers.Integral) and 0 < rate <= MAX_RATE):
        raise ArgumentError(f"sample rate must be an integer from 1 to {MAX_RATE} Hz, got {rate!r}")
    rate = int(rate)
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ArgumentError(f"audio must be 1-d (mono samples), got shape {audio.shape}")
    if rate == target:
        return audio
    g = math.gcd(rate, target)
    up, down = target // g, rate // g
    taps, half = _kaiser_lowpass(up, down)
    # Output n is the filtered, up-sampled signal at n * down + half: taps[r + up * i] meet x[base - i].
    n_out = -(-len(audio) * up // down)
    n_per_phase = -(-len(taps) // up)
    phases = np.zeros((up, n_per_phase), dtype=np.float32)
    for r in range(up):
        row = taps[r::up]
        phases[r, :len(row)] = row
    padded = np.concatenate([np.zeros(n_per_phase, np.float32), audio, np.zeros(n_per_phase, np.float32)])
    out = np.empty(n_out, dtype=np.float32)
    step = 1 << 16  # outputs per block: bounds the gathered window matrix
    offsets = np.arange(n_per_phase)
    for start in range(0, n_out, step):
        m = np.arange(start, min(start + step, n_out), dtype=np.int64) * down + half
        base = m // up + n_per_phase  # index of x[m // up] in padded
        windows = padded[base[:, None] - offsets[None, :]]
        out[start:start + len(m)] = np.einsum("ij,ij->i", windows, phases[m % up])
    return out


def load_audio(path: str | Path) -> np.ndarray:
    """A WAV file as 16 kHz mono float32 samples."""
    audio, rate = read_wav(path)
    return resample(audio, rate)
