"""Decoding one 30 s window: greedy or beam search from the prompt
(<|startoftranscript|>, language, task, <|notimestamps|>), with the logit
rules of Whisper (as openai-whisper and transformers apply them, in this
order):

1. the first sampled token is never a blank or the end of text;
2. the suppressed tokens (non-speech symbols, prompt-only specials) are never sampled;
3. with timestamps: <|notimestamps|> never; timestamps come in pairs (after
   a lone one, a second or the end; after a pair, text); they never
   decrease; the first token is a timestamp of at most ``max_initial_timestamp``
   seconds; and when the timestamps together are likelier than any text
   token, a timestamp it is.

Beam search follows transformers' (its default ``length_penalty`` 1.0 and
``early_stopping`` False): each step keeps the 2N best continuations of the N
beams; those ending the text among the first N join the finished ones, scored
by their summed log-probability over their length; the search ends when N
have finished and no running beam can beat the worst of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api.errors import ArgumentError

from .tokens import TIME_PRECISION, WhisperTokens

NEG_INF = np.float32(-np.inf)


@dataclass
class DecodingOptions:
    task: str = "transcribe"
    language: str | None = None  # None: English for English-only models, else detected
    timestamps: bool = False
    beam_size: int = 1  # 1: greedy
    max_new_tokens: int = 224  # openai-whisper's sample_len: half the decoder's 448 positions
    max_initial_timestamp: float = 1.0
    length_penalty: float = 1.0

    def check(self) -> None:
        if not (isinstance(self.beam_size, int) and self.beam_size >= 1):
            raise ArgumentError(f"beam size must be an integer >= 1, got {self.beam_size!r}")
        if not (isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1):
            raise ArgumentError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")


@dataclass
class DecodingResult:
    tokens: list[int]  # what was generated after the prompt, without the end of text
    language: str | None
    sum_logprob: float


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


class LogitRules:
    """The rules above, applied in place to scores (rows: beams) given each row's generated tokens."""

    def __init__(self, tokens: WhisperTokens, options: DecodingOptions):
        self.t = tokens
        self.begin = np.array(tokens.begin_suppress_tokens(), dtype=np.int64)
        self.suppress = np.array(tokens.suppress_tokens(), dtype=np.int64)
        self.timestamps = options.timestamps
        self.max_initial = tokens.generation.get("max_initial_timestamp_index",
                                                 round(options.max_initial_timestamp / TIME_PRECISION))

    def __call__(self, scores: np.ndarray, generated: list[list[int]]) -> np.ndarray:
        first = len(generated[0]) == 0
        if first:
            scores[:, self.begin] = NEG_INF
        scores[:, self.suppress] = NEG_INF
        if self.timestamps:
            self._timestamp_rules(scores, generated, first)
        return scores

    def _timestamp_rules(self, scores: np.ndarray, generated: list[list[int]], first: bool) -> None:
        tb, eot = self.t.timestamp_begin, self.t.eot
        scores[:, self.t.no_timestamps] = NEG_INF
        for k, seq in enumerate(generated):
            last = len(seq) >= 1 and seq[-1] >= tb
            penultimate = len(seq) < 2 or seq[-2] >= tb
            if last:
                if penultimate:
                    scores[k, tb:] = NEG_INF  # after a pair: text (or the end)
                else:
                    scores[k, :eot] = NEG_INF  # after a lone timestamp: another, or the end
            stamps = [tok for tok in seq if tok >= tb]
            if stamps:  # never decreasing; after a pair, strictly increasing
                floor = stamps[-1] if last and not penultimate else stamps[-1] + 1
                scores[k, tb:floor] = NEG_INF
        if first:
            scores[:, :tb] = NEG_INF
            if self.max_initial is not None:
                scores[:, tb + self.max_initial + 1:] = NEG_INF
        logprobs = _log_softmax(scores)
        with np.errstate(divide="ignore"):
            stamp_mass = np.log(np.exp(logprobs[:, tb:]).sum(axis=-1))
        likelier = stamp_mass > logprobs[:, :tb].max(axis=-1)
        scores[likelier, :tb] = NEG_INF


def _last_logits(model, ids, cross, cache) -> np.ndarray:
    """(batch, vocab) float32 logits of the last position of ``ids`` (batch, seq) after the cached ones."""
    return model.decode(ids, cross, cache, last_only=True).numpy()[:, -1].astype(np.float32)


def detect_language(model, tokens: WhisperTokens, cross) -> str:
    """The language whose token is likeliest after <|startoftranscript|>."""
    logits = _last_logits(model, [[tokens.sot]], cross, model.new_cache(1, 1))[0]
    codes = list(tokens.languages)
    return codes[int(np.argmax(logits[[tokens.languages[k] for k in codes]]))]


def _greedy(model, cross, prompt: list[int], rules: LogitRules, options: DecodingOptions, eot: int):
    cache = model.new_cache(1, len(prompt) + options.max_new_tokens)
    logits = _last_logits(model, [prompt], cross, cache)
    generated, total = [], 0.0
    for step in range(options.max_new_tokens):
        scores = rules(logits, [generated])
        token = int(np.argmax(scores[0]))
        total += float(_log_softmax(scores[0])[token])
        if token == eot:
            break
        generated.append(token)
        if step + 1 < options.max_new_tokens:
            logits = _last_logits(model, [[token]], cross, cache)
    return generated, total


def _reorder(cache, beams: np.ndarray) -> None:
    """The cache rows follow the beams kept: row i becomes old row beams[i]."""
    if np.array_equal(beams, np.arange(len(beams))):
        return
    index = c.from_numpy(beams.astype(np.int64)).to_device(cache.device)
    for buffers in (cache.keys, cache.values):
        for i, t in enumerate(buffers):
            buffers[i] = t.index_select(index, 0)


def _beam_search(model, cross, prompt: list[int], rules: LogitRules, options: DecodingOptions, eot: int):
    n, penalty = options.beam_size, options.length_penalty
    cache = model.new_cache(n, len(prompt) + options.max_new_tokens)
    logits = _last_logits(model, [prompt] * n, cross, cache)
    running = [[] for _ in range(n)]
    running_scores = np.full(n, -1e9, dtype=np.float64)
    running_scores[0] = 0.0
    finished: list[tuple[float, list[int]]] = []
    improvable = True
    for step in range(options.max_new_tokens):
        totals = (rules(_log_softmax(logits), running) + running_scores[:, None]).ravel()
        top = np.argsort(-totals, kind="stable")[:2 * n]
        beams, chosen, scores = top // logits.shape[1], top % logits.shape[1], totals[top]
        ends = (chosen == eot) | (step + 1 == options.max_new_tokens)
        if improvable:
            finished += [(scores[r] / (step + 1) ** penalty, running[beams[r]] + [int(chosen[r])])
                         for r in range(n) if ends[r]]
            finished = sorted(finished, key=lambda f: -f[0])[:n]
        live = scores - 1e9 * ends
        keep = np.argsort(-live, kind="stable")[:n]
        running = [running[beams[k]] + [int(chosen[k])] for k in keep]
        running_scores = live[keep]
        improvable = improvable and (len(finished) < n or running_scores[0] / (step + 1) ** penalty > finished[-1][0])
        if not improvable or ends.all():
            break
        _reorder(cache, beams[keep])
        logits = _last_logits(model, chosen[keep].reshape(n, 1).tolist(), cross, cache)
    score, best = finished[0]
    return [t for t in best if t != eot], float(score)


def decode_window(model, tokens: WhisperTokens, mel: np.ndarray, options: DecodingOptions) -> DecodingResult:
    """Decodes one window of log-mel frames (n_mels, 3000)."""
    options.check()
    with c.no_grad():
        cross = model.cross_kv(model.encode(np.ascontiguousarray(mel, dtype=np.float32)[None]))
        language = options.language
        if language is None and tokens.multilingual:
            language = detect_language(model, tokens, cross)
        prompt = tokens.sot_sequence(language, options.task, options.timestamps)
        rules = LogitRules(tokens, options)
        search = _greedy if options.beam_size == 1 else _beam_search
        generated, score = search(model, cross, prompt, rules, options, tokens.eot)
    return DecodingResult(generated, language, score)
