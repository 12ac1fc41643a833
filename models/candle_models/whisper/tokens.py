"""Whisper's special tokens, found by name in the tokenizer.json: the start of
transcript, languages, tasks, timestamps, and the tokens decoding suppresses.

The vocabulary holds the text tokens, then ``<|endoftext|>``,
``<|startoftranscript|>``, a token per language (multilingual and English-only
models alike), ``<|translate|>``, ``<|transcribe|>``, ``<|startoflm|>``,
``<|startofprev|>``, ``<|nospeech|>`` (``<|nocaptions|>`` before large-v3),
``<|notimestamps|>``, and after it 1501 timestamp tokens, 0.00 s to 30.00 s in
steps of 20 ms, which tokenizer.json does not list.
"""

from __future__ import annotations

import re

from candle_api.errors import ArgumentError

from ..tokenizer import Tokenizer

#: Seconds per timestamp step.
TIME_PRECISION = 0.02
_LANGUAGE = re.compile(r"<\|([a-z]{2,3}|haw|yue)\|>")


class WhisperTokens:
    """The ids of ``tokenizer``'s special tokens, and text <-> ids with timestamps. ``generation`` holds
    the model's generation_config.json fields (suppress_tokens, begin_suppress_tokens), when it has them."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, generation: dict | None = None):
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self.generation = dict(generation or {})
        find = self._find
        self.eot, self.sot = find("<|endoftext|>"), find("<|startoftranscript|>")
        self.translate, self.transcribe = find("<|translate|>"), find("<|transcribe|>")
        self.sot_lm, self.sot_prev = find("<|startoflm|>"), find("<|startofprev|>")
        self.no_speech = self._find_any("<|nospeech|>", "<|nocaptions|>")
        self.no_timestamps = find("<|notimestamps|>")
        self.timestamp_begin = self.no_timestamps + 1
        inner = tokenizer.inner
        self.languages = {m[1]: i for i in range(self.sot + 1, self.translate)
                          if (m := _LANGUAGE.fullmatch(inner.id_to_token(i) or ""))}
        #: English-only models have the language tokens but were trained without them.
        self.multilingual = vocab_size >= 51865

    def _find(self, token: str) -> int:
        i = self.tokenizer.inner.token_to_id(token)
        if i is None:
            raise ValueError(f"the tokenizer has no {token}: not a Whisper tokenizer")
        return i

    def _find_any(self, *tokens: str) -> int:
        for token in tokens:
            i = self.tokenizer.inner.token_to_id(token)
            if i is not None:
                return i
        raise ValueError(f"the tokenizer has none of {', '.join(tokens)}: not a Whisper tokenizer")

    # ---- prompts ---------------------------------------------------------------------------------
    def language_id(self, language: str) -> int:
        if language not in self.languages:
            raise ArgumentError(f"unknown language {language!r} (the model knows: {', '.join(self.languages)})")
        return self.languages[language]

    def sot_sequence(self, language: str | None, task: str, timestamps: bool) -> list[int]:
        """The decoder's prompt: <|startoftranscript|>, then language and task for a multilingual model,
        then <|notimestamps|> unless timestamps are wanted."""
        if task not in ("transcribe", "translate"):
            raise ArgumentError(f"task must be 'transcribe' or 'translate', got {task!r}")
        seq = [self.sot]
        if self.multilingual:
            seq += [self.language_id(language or "en"), self.transcribe if task == "transcribe" else self.translate]
        elif task == "translate" or language not in (None, "en"):
            raise ArgumentError("this model is English-only: it transcribes English, and cannot translate "
                                "(a multilingual model can)")
        return seq if timestamps else seq + [self.no_timestamps]

    # ---- suppressed tokens -----------------------------------------------------------------------
    def non_speech_tokens(self) -> list[int]:
        """Whisper's list of tokens for symbols that speakers do not say (music notes, brackets, speaker
        tags): the first token of each symbol alone and after a space, when it is one token (or a
        symbol from the U+2640 block, whose tokens share their first), and " -" and " '"."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        miscellaneous = list("♩♪♫♬♭♮♯")
        encode = self._encode
        result = {encode(" -")[0], encode(" '")[0]}
        for symbol in symbols + miscellaneous:
            for ids in (encode(symbol), encode(" " + symbol)):
                if len(ids) == 1 or symbol in miscellaneous:
                    result.add(ids[0])
        return sorted(result)

    def suppress_tokens(self) -> list[int]:
        """Never sampled: the generation config's suppress_tokens (else the non-speech tokens), and the
        special tokens that only prompts hold."""
        listed = self.generation.get("suppress_tokens")
        ids = set(self.non_speech_tokens() if listed is None or -1 in listed else listed)
        ids |= {self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm, self.no_speech}
        return sorted(i for i in ids if 0 <= i < self.vocab_size)

    def begin_suppress_tokens(self) -> list[int]:
        """Not sampled first: a blank (" ") and the end of text."""
        listed = self.generation.get("begin_suppress_tokens")
        return sorted(listed) if listed is not None else sorted({self._encode(" ")[0], self.eot})

    # ---- text ------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def is_timestamp(self, token: int) -> bool:
        return token >= self.timestamp_begin

    def time(self, token: int) -> float:
        return (token - self.timestamp_begin) * TIME_PRECISION

    def decode(self, ids) -> str:
        """The text of ``ids``, special tokens and timestamps left out."""
        return self.tokenizer.decode([i for i in ids if i < self.eot], skip_special_tokens=True)

    def decode_with_timestamps(self, ids) -> str:
        """The text with each timestamp written as <|1.08|>."""
        out, text = [], []
        for i in list(ids) + [self.timestamp_begin - 1]:
            if i < self.eot:
                text.append(i)
                continue
            if text:
                out.append(self.tokenizer.decode(text))
                text = []
            if self.is_timestamp(i):
                out.append(f"<|{self.time(i):.2f}|>")
        return "".join(out)
