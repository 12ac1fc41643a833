"""Whisper's audio input without a model: WAV files of every sample format
(written here by hand), malformed ones (FormatError with an offset), and the
resampler's band limit (tones kept, tones above 8 kHz removed); the
CTranslate2 name mapping's dequantization; the decoding rules on made-up scores."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError, FormatError
from candle_models.whisper import read_wav, resample
from candle_models.whisper.ct2 import _dequantized
from candle_models.whisper.decoding import DecodingOptions, LogitRules

RNG = np.random.default_rng(0)


def wav_bytes(data: bytes, tag: int, channels: int, rate: int, bits: int, extensible: bool = False,
              data_size: int | None = None) -> bytes:
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * block, block, bits)
    if extensible:  # cbSize, valid bits, channel mask, then the sub-format GUID (its first two bytes: the tag)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + bytes(14)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"LIST" + struct.pack("<I", 3) + b"abc\0"  # an odd-sized chunk to skip, padded
    chunks += b"data" + struct.pack("<I", len(data) if data_size is None else data_size) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def samples(channels: int) -> np.ndarray:
    return RNG.uniform(-0.9, 0.9, (100, channels))


ENCODINGS = {  # name -> (tag, bits, encode, decoding tolerance)
    "pcm8": (1, 8, lambda x: np.round(x * 128 + 128).astype(np.uint8).tobytes(), 1 / 128),
    "pcm16": (1, 16, lambda x: np.round(x * 32768).astype("<i2").tobytes(), 1 / 32768),
    "pcm24": (1, 24, lambda x: b"".join(int(v).to_bytes(3, "little", signed=True)
                                        for v in np.round(x.ravel() * 2**23)), 2**-23),
    "pcm32": (1, 32, lambda x: np.round(x * 2**31).astype("<i4").tobytes(), 1e-7),
    "float32": (3, 32, lambda x: x.astype("<f4").tobytes(), 1e-7),
    "float64": (3, 64, lambda x: x.astype("<f8").tobytes(), 1e-7),
}


@pytest.mark.parametrize("extensible", [False, True])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_sample_format_reads_as_mono_float(tmp_path, encoding, channels, extensible):
    tag, bits, encode, tolerance = ENCODINGS[encoding]
    x = samples(channels)
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(encode(x), tag, channels, 44100, bits, extensible))
    audio, rate = read_wav(path)
    assert rate == 44100 and audio.dtype == np.float32 and audio.shape == (100,)
    np.testing.assert_allclose(audio, x.mean(axis=1), atol=tolerance)


def test_a_streamed_wav_runs_to_the_end_of_the_file(tmp_path):
    x = samples(1)
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(np.round(x * 32768).astype("<i2").tobytes(), 1, 1, 22050, 16, data_size=0x7FFFF000))
    audio, _ = read_wav(path)
    np.testing.assert_allclose(audio, x[:, 0], atol=1 / 32768)


GOOD = wav_bytes(np.zeros(8, "<i2").tobytes(), 1, 1, 16000, 16)
FMT = 12 + 8  # where the fmt chunk's fields start


@pytest.mark.parametrize("raw, reason", [
    (b"", "not a WAV file"),
    (b"RIFF\0\0\0\0AVI LIST", "not a WAV file"),
    (b"RIFX" + GOOD[4:], "big-endian"),
    (GOOD[:FMT] + struct.pack("<H", 2) + GOOD[FMT + 2:], "format tag 0x2"),  # ADPCM
    (GOOD[:FMT + 14] + struct.pack("<H", 12) + GOOD[FMT + 16:], "12-bit PCM"),
    (GOOD[:FMT + 12] + struct.pack("<H", 4) + GOOD[FMT + 14:], "block align 4"),
    (GOOD[:FMT + 2] + struct.pack("<H", 0) + GOOD[FMT + 4:], "0 channels"),
    (GOOD[:FMT + 4] + struct.pack("<I", 4_000_000_000) + GOOD[FMT + 8:], "4000000000 Hz"),
    (GOOD[:-4], "runs past the end of the file"),
    (GOOD[:12 + 8 + 16], "no data chunk"),
    (GOOD[:12] + GOOD[-24:], "before any fmt chunk"),
    (GOOD[:16] + struct.pack("<I", 10) + GOOD[20:], "too short"),
])
def test_malformed_wav_files(tmp_path, raw, reason):
    path = tmp_path / "bad.wav"
    path.write_bytes(raw)
    with pytest.raises(FormatError, match=reason):
        read_wav(path)


def _tone(freq: float, rate: int, seconds: float = 1.0) -> np.ndarray:
    return np.sin(2 * np.pi * freq * np.arange(int(rate * seconds)) / rate).astype(np.float32)


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_keeps_speech_band_tones(rate):
    out = resample(_tone(1000.0, rate), rate)
    assert len(out) == -(-rate * 16000 // rate)
    middle = slice(1000, 15000)  # away from the edges, where the filter sees the zeros outside
    np.testing.assert_allclose(out[middle], _tone(1000.0, 16000)[middle], atol=2e-3)


@pytest.mark.parametrize("rate", [22050, 44100, 48000])
def test_resampling_removes_what_16_khz_cannot_hold(rate):
    out = resample(_tone(9500.0, rate), rate)  # would fold back to 6.5 kHz
    assert np.abs(out[1000:15000]).max() < 0.01


def test_resampling_arguments():
    x = _tone(440.0, 16000, 0.1)
    assert resample(x, 16000) is not None and np.array_equal(resample(x, 16000), x)
    for rate in (0, -8000, 768_001, 16000.0, True):
        with pytest.raises(ArgumentError, match="sample rate must be an integer"):
            resample(x, rate)


def test_ct2_quantized_weights_are_dequantized():
    weight = RNG.standard_normal((4, 6)).astype(np.float32)
    scale = 127.0 / np.abs(weight).max(axis=1)
    q = np.round(weight * scale[:, None]).astype(np.int16)  # int8 values, as the plugin widens them
    tensors = {"w": c.from_numpy(q), "w_scale": c.from_numpy(scale.astype(np.float32)), "b": c.from_numpy(weight)}
    np.testing.assert_allclose(_dequantized(tensors, "w").numpy(), q / scale[:, None], rtol=1e-6)
    assert _dequantized(tensors, "b") is tensors["b"]  # no scale: as stored


class _Tokens:
    """What LogitRules reads of WhisperTokens, for a vocabulary of 10 text tokens, eot 10, then 12 stamps."""
    eot, no_timestamps, timestamp_begin, generation = 10, 11, 12, {}

    def begin_suppress_tokens(self):
        return [3, 10]

    def suppress_tokens(self):
        return [5]


def _scores(**at) -> np.ndarray:
    scores = np.zeros((1, 24), np.float32)
    for i, v in at.items():
        scores[0, int(i[1:])] = v
    return scores


def test_rules_without_timestamps():
    rules = LogitRules(_Tokens(), DecodingOptions())
    first = rules(_scores(), [[]])[0]
    assert np.isinf(first[[3, 10, 5]]).all() and np.isfinite(np.delete(first, [3, 10, 5])).all()
    later = rules(_scores(), [[1]])[0]
    assert np.isinf(later[5]) and np.isfinite(np.delete(later, [5])).all()


def test_timestamp_rules():
    rules = LogitRules(_Tokens(), DecodingOptions(timestamps=True, max_initial_timestamp=0.06))
    first = rules(_scores(), [[]])[0]
    assert np.isfinite(first).nonzero()[0].tolist() == [12, 13, 14, 15]  # a stamp of at most 0.06 s first
    after_lone = rules(_scores(t10=5.0), [[12, 1, 14]])[0]  # a stamp after text: a second one (>= it) or the end
    assert np.isfinite(after_lone).nonzero()[0].tolist() == [10] + list(range(14, 24))
    after_pair = rules(_scores(), [[12, 1, 14, 14]])[0]  # after a pair: text or the end, no stamp
    assert np.isfinite(after_pair).nonzero()[0].tolist() == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    likely_stamps = rules(_scores(**{f"t{i}": 3.0 for i in range(16, 24)}), [[12, 1]])[0]
    assert np.isinf(likely_stamps[:12]).all()  # the stamps together beat every text token
