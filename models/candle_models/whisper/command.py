"""``candle transcribe``: a WAV file to text with Whisper (arguments: see
candle_models/cli.py; the core's command line reports the errors raised here).
Prints the text, or with --timestamps one ``[start --> end] text`` line per
segment; a progress bar on stderr while a long recording is decoded (on a
terminal only).

A recording longer than 30 s is always decoded with timestamp tokens, as
transformers does: each window then starts after the last sentence the
previous one finished. Windows cut every 30 s (the library's
``DecodingOptions(timestamps=False)``) split words, and Whisper then often
drops the whole window's text."""

from __future__ import annotations

import sys

from candle_api.errors import ArgumentError

from ..hub import default_model, resolve
from ..progress import Progress
from .audio import load_audio
from .decoding import DecodingOptions
from .features import N_SAMPLES
from .transcribe import format_timestamp, load, text_of, transcribe


def main(args) -> int:
    if args.language is not None and not args.language.isalpha():
        raise ArgumentError(f"--language takes a language code such as en or fr, got {args.language!r}")
    DecodingOptions(beam_size=args.beam_size).check()
    path = default_model("transcribe") if args.model is None else resolve(args.model)
    audio = load_audio(args.audio)
    options = DecodingOptions(task=args.task, language=args.language, beam_size=args.beam_size,
                              timestamps=args.timestamps or len(audio) > N_SAMPLES)
    with Progress(0, "loading") as progress:
        model, tokens = load(path, dtype=args.dtype or "f32", device=args.device, progress=progress)
    with Progress(0, "transcribing") as progress:
        segments = transcribe(model, tokens, audio, options, progress)
    if args.timestamps:
        for s in segments:
            print(f"[{format_timestamp(s.start)} --> {format_timestamp(s.end)}] {s.text.strip()}")
    else:
        print(text_of(segments))
    sys.stdout.flush()
    return 0
