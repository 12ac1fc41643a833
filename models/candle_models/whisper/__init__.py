"""Whisper speech recognition: the log-mel front end, the encoder-decoder,
greedy and beam decoding with Whisper's special tokens, and transcription of
recordings of any length (``candle transcribe``)."""

from .audio import load_audio, read_wav, resample
from .decoding import DecodingOptions, decode_window
from .features import log_mel_spectrogram, mel_filters
from .model import WhisperConfig, WhisperForConditionalGeneration
from .tokens import WhisperTokens
from .transcribe import Segment, load, transcribe

__all__ = ["DecodingOptions", "Segment", "WhisperConfig", "WhisperForConditionalGeneration", "WhisperTokens",
           "decode_window", "load", "load_audio", "log_mel_spectrogram", "mel_filters", "read_wav", "resample",
           "transcribe"]
