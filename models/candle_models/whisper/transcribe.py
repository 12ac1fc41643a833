"""Transcribing a recording of any length, as transformers' Whisper
``generate`` does (and openai-whisper's ``transcribe``, without its temperature
fallback and previous-text prompt):

- up to 30 s: one window, the log-mel of the audio zero-padded to 30 s;
- longer: the log-mel of the whole recording, read in windows of 3000 frames
  (zero frames past its end). With timestamps, each window's text is split
  at its timestamp pairs into segments and the next window starts at the
  last timestamp (or after the window when the text ended with a single
  one, or had no pair); without, windows follow each other every 30 s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .decoding import DecodingOptions, decode_window
from .features import FRAME_SECONDS, N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim, window_features
from .tokens import WhisperTokens

#: Mel frames per decoder timestamp step (the encoder halves the frames; a step is one position).
INPUT_STRIDE = 2


@dataclass
class Segment:
    start: float  # seconds
    end: float
    text: str
    tokens: list[int]


def _timestamp_segments(tokens: WhisperTokens, ids: list[int], offset: float,
                        window_frames: int) -> tuple[list[Segment], int]:
    """(segments of one window's ids, mel frames to advance)."""
    is_ts = [tokens.is_timestamp(t) for t in ids]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(ids) - 1) if is_ts[i] and is_ts[i + 1]]
    if not cuts:  # no pair: one segment for the window, ending at its last timestamp if it has one
        stamps = [t for t in ids if tokens.is_timestamp(t) and t != tokens.timestamp_begin]
        end = tokens.time(stamps[-1]) if stamps else window_frames * FRAME_SECONDS
        return [Segment(offset, offset + end, tokens.decode(ids), ids)], window_frames
    if single_ending:
        cuts.append(len(ids))
    segments, last = [], 0
    for cut in cuts:
        part = ids[last:cut]
        segments.append(Segment(offset + tokens.time(part[0]), offset + tokens.time(part[-1]), tokens.decode(part),
                                part))
        last = cut
    advance = window_frames if single_ending else (ids[last - 1] - tokens.timestamp_begin) * INPUT_STRIDE
    return segments, advance


def transcribe(model, tokens: WhisperTokens, audio: np.ndarray, options: DecodingOptions | None = None,
               progress=None) -> list[Segment]:
    """Segments of 16 kHz mono ``audio``. ``progress`` (a :class:`candle_models.progress.Progress`) counts
    the mel frames done."""
    options = options or DecodingOptions()
    options.check()
    tokens.sot_sequence(options.language, options.task, options.timestamps)  # refuses what the model cannot do
    n_mels = model.config.num_mel_bins
    short = len(audio) <= N_SAMPLES
    mel = log_mel_spectrogram(pad_or_trim(audio) if short else audio, n_mels)
    content = max(1, min(len(audio) // 160, N_FRAMES)) if short else mel.shape[1]
    if progress is not None:
        progress.total = content
    segments, seek = [], 0
    while seek < content:
        frames = min(N_FRAMES, content - seek)
        result = decode_window(model, tokens, window_features(mel, seek), options)
        if options.language is None and result.language is not None:
            options = DecodingOptions(**{**vars(options), "language": result.language})  # detected once
        offset = seek * FRAME_SECONDS
        if options.timestamps and result.tokens:
            found, advance = _timestamp_segments(tokens, result.tokens, offset, frames)
        else:
            found = [Segment(offset, offset + frames * FRAME_SECONDS, tokens.decode(result.tokens), result.tokens)]
            advance = frames
        segments += [s for s in found if s.text.strip()]
        # one window for up to 30 s; a window whose only timestamp pair is at 0 must still move on
        advance = content - seek if short else max(advance, 1)
        if progress is not None:
            progress.update(min(advance, content - seek))
        seek += advance
    return segments


def text_of(segments: list[Segment]) -> str:
    return "".join(s.text for s in segments).strip()


def format_timestamp(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    return (f"{hours:d}:" if hours else "") + f"{minutes:02d}:{secs:06.3f}"


def load(model_path: str | os.PathLike, dtype="f32", device="cpu", progress=None):
    """(model, tokens) of a Whisper model folder (transformers' or CTranslate2's) or repo id."""
    from ..hub import model_folder, resolve
    from ..tokenizer import Tokenizer
    from .checkpoint import generation_settings
    from .model import WhisperForConditionalGeneration

    path = resolve(model_path)
    model = WhisperForConditionalGeneration.from_pretrained(path, dtype=dtype, device=device, progress=progress)
    tokenizer = Tokenizer.from_folder(model_folder(path))
    return model, WhisperTokens(tokenizer, model.config.vocab_size, generation_settings(path))
