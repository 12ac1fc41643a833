"""Text generation: a sampler (candle's LogitsProcessor: greedy,
temperature, top-k, top-p, repeat penalty, its own seeded RNG) and
generators that run a causal LM with a KV cache and yield token ids, or text
pieces, as they are produced."""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

import candle_api as c
from candle_api.errors import ArgumentError

from .tokenizer import check_text

#: Cache positions reserved for the first generated tokens; the cache doubles when they run out, so its
#: memory follows the tokens generated, however many more max_new_tokens allows.
FIRST_TOKENS_CAPACITY = 256


def _check_number(name: str, value, valid, requirement: str, integer: bool = False) -> None:
    """An ArgumentError naming ``value`` unless it is a finite real number (an integer when
    ``integer``; bools are neither) for which ``valid(value)`` holds. NaN fails every comparison,
    so a range check alone lets it through."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real)
            or not (integer or math.isfinite(value)) or not valid(value)):
        raise ArgumentError(f"{name} must be {requirement}, got {value!r}")


#: Tokens per block when a draw inverts the cumulative sum (Sampler._draw).
DRAW_BLOCK = 256


class Sampler:
    """Chooses the next token from a logits vector.

    ``temperature`` 0 (or None) is greedy decoding (argmax). Otherwise the
    logits are divided by it and a token is drawn from the softmax, restricted
    to the ``top_k`` most likely tokens and then to the smallest set of them
    whose probabilities add up to ``top_p``. ``repeat_penalty`` divides the
    positive logits (multiplies the negative ones) of every token among the
    last ``repeat_last_n`` of the history, as llama.cpp and transformers do.
    The draws come from a generator seeded with ``seed`` alone: the same seed
    gives the same tokens, whatever else uses random numbers."""

    def __init__(self, temperature: float | None = 0.0, top_k: int | None = None, top_p: float | None = None,
                 repeat_penalty: float = 1.0, repeat_last_n: int = 64, seed: int = 299792458):
        if temperature is not None:
            _check_number("temperature", temperature, lambda t: t >= 0, "a finite number >= 0")
        if top_k is not None:
            _check_number("top_k", top_k, lambda k: k >= 1, "an integer >= 1", integer=True)
        if top_p is not None:
            _check_number("top_p", top_p, lambda p: 0 < p <= 1, "a number in (0, 1]")
        _check_number("repeat_penalty", repeat_penalty, lambda r: r > 0, "a finite number > 0")
        _check_number("repeat_last_n", repeat_last_n, lambda n: n >= 0, "an integer >= 0", integer=True)
        _check_number("seed", seed, lambda s: s >= 0, "an integer >= 0", integer=True)  # PCG64 takes no negative seed
        self.temperature, self.top_k, self.top_p = float(temperature or 0.0), top_k, top_p
        self.repeat_penalty, self.repeat_last_n = repeat_penalty, repeat_last_n
        self.rng = np.random.Generator(np.random.PCG64(seed))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def penalize(self, logits: np.ndarray, history) -> np.ndarray:
        """The logits with the repeat penalty applied to the recent tokens (a new array)."""
        logits = np.array(logits, dtype=np.float32)
        if self.repeat_penalty != 1.0 and self.repeat_last_n and len(history):
            recent = np.unique(np.asarray(history[-self.repeat_last_n:], dtype=np.int64))
            vals = logits[recent]
            logits[recent] = np.where(vals >= 0, vals / self.repeat_penalty, vals * self.repeat_penalty)
        return logits

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution a token is drawn from: tempered softmax, cut to top-k then top-p, renormalized."""
        weights = self._weights(logits)
        return weights / weights.sum()

    def _weights(self, logits: np.ndarray) -> np.ndarray:
        """probabilities() before the renormalization, which drawing does not need."""
        probs = logits.astype(np.float64)  # in place from here: a vocabulary's worth of float64 per step
        probs /= self.temperature
        probs -= probs.max()
        np.exp(probs, out=probs)
        if self.top_k is not None and self.top_k < probs.size:
            cut = np.partition(probs, probs.size - self.top_k)[probs.size - self.top_k]
            probs[probs < cut] = 0.0
        if self.top_p is not None and self.top_p < 1.0:
            probs = self._nucleus(probs)
        return probs

    def _nucleus(self, probs: np.ndarray) -> np.ndarray:
        """Keeps the smallest set of most likely tokens whose probabilities reach top_p. Sorting the
        whole vocabulary costs milliseconds; the set is nearly always among the few hundred most
        likely, so those are sorted first (all tokens tied with the last of them included, so the
        order is the full stable sort's), and more only when they fall short."""
        total, count = probs.sum(), 256
        while True:
            if count < probs.size:
                cut = np.partition(probs, probs.size - count)[probs.size - count]
                candidates = np.flatnonzero(probs >= cut)
            else:
                candidates = np.arange(probs.size)
            order = candidates[np.argsort(-probs[candidates], kind="stable")]
            sorted_probs = probs[order] / total
            mass_before = np.cumsum(sorted_probs) - sorted_probs
            if mass_before[-1] >= self.top_p or order.size == probs.size:
                kept = order[mass_before < self.top_p]
                nucleus = np.zeros_like(probs)
                nucleus[kept] = probs[kept]
                return nucleus
            count *= 8

    def sample(self, logits, history=()) -> int:
        """The next token for a 1-d logits vector (a Tensor or array) after ``history`` (token ids)."""
        values = logits.numpy() if isinstance(logits, c.Tensor) else np.asarray(logits)
        values = self.penalize(values.reshape(-1), history)
        if self.greedy:
            return int(np.argmax(values))
        return self._draw(self._weights(values))

    def _draw(self, weights: np.ndarray) -> int:
        """An index drawn with probability weights[i] / weights.sum(), by inverting the cumulative sum:
        over blocks of DRAW_BLOCK first, then within the block the draw falls in (a cumulative sum over a
        whole vocabulary costs ~0.2 ms a token; a server samples a batch's rows one after another). An
        index of zero weight is never drawn."""
        starts = np.arange(0, weights.size, DRAW_BLOCK)
        sums = np.add.reduceat(weights, starts)
        cum = np.cumsum(sums)
        target = self.rng.random() * cum[-1]
        b = int(np.searchsorted(cum, target, side="right"))
        if b == cum.size:  # rounding put the draw at the very end
            b = int(np.flatnonzero(sums)[-1])
        lo = int(starts[b])
        inner = np.cumsum(weights[lo:lo + DRAW_BLOCK])
        i = int(np.searchsorted(inner, target - (cum[b - 1] if b else 0.0), side="right"))
        if i == inner.size:  # the block's two sums rounded apart
            i = int(np.flatnonzero(weights[lo:lo + DRAW_BLOCK])[-1])
        return lo + i


@dataclass
class GenerationStats:
    """Filled in as a generation runs: token counts, times, why it ended."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0  # the forward over the prompt and the first token's sampling
    generated_tokens: int = 0
    decode_steps: int = 0  # forwards of one token each (the first token comes from the prompt's)
    decode_seconds: float = 0.0
    finish_reason: str | None = None  # "stop" (a stop token), "length" (max_new_tokens) or "context" (it is full)

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Decoding speed: one-token forward passes (and sampling) per second."""
        return self.decode_steps / self.decode_seconds if self.decode_seconds else 0.0


def generate_ids(model, prompt_ids, max_new_tokens: int = 128, sampler: Sampler | None = None,
                 stop_token_ids=(), stats: GenerationStats | None = None) -> Iterator[int]:
    """Yields up to ``max_new_tokens`` token ids after ``prompt_ids``, as each
    is produced; a stop token ends the generation and is not yielded. It
    also ends when the model's context is full: the last token yielded is
    the one predicted at the context's last position."""
    prompt_ids = [int(i) for i in prompt_ids]
    if not prompt_ids:
        raise ValueError("the prompt is empty: generation needs at least one token to start from")
    sampler, stats = start_generation(max_new_tokens, sampler, stats, len(prompt_ids))
    if max_new_tokens == 0:
        return
    with c.no_grad():
        start = time.perf_counter()
        cache = model.new_cache(capacity=len(prompt_ids) + min(max_new_tokens, FIRST_TOKENS_CAPACITY))
        first = sampler.sample(model([prompt_ids], cache, last_only=True)[0, 0], prompt_ids)
        stats.prompt_seconds = time.perf_counter() - start
        yield from sample_tokens(lambda token: model([[token]], cache, last_only=True)[0, 0], first, cache,
                                 sampler, list(prompt_ids), stop_token_ids, max_new_tokens, stats)


def start_generation(max_new_tokens: int, sampler: Sampler | None, stats: GenerationStats | None,
                     prompt_tokens: int) -> tuple[Sampler, GenerationStats]:
    """The sampler and stats of a generation, ``max_new_tokens`` checked (0 finishes it at once)."""
    _check_number("max_new_tokens", max_new_tokens, lambda n: n >= 0, "an integer >= 0", integer=True)
    stats = stats if stats is not None else GenerationStats()
    stats.prompt_tokens = prompt_tokens
    if max_new_tokens == 0:
        stats.finish_reason = "length"
    return sampler or Sampler(), stats


def sample_tokens(step, token: int, cache, sampler: Sampler, history: list, stop_token_ids, max_new_tokens: int,
                  stats: GenerationStats) -> Iterator[int]:
    """The decoding loop after the prompt: yields ``token`` and each next one, ``step(token)`` giving
    the logits that follow it (the cache taking its position), until a stop token, ``max_new_tokens``
    or a full cache. ``history`` (the tokens so far, for the repeat penalty) grows as they come."""
    stop = frozenset(stop_token_ids)
    while True:
        if token in stop:
            stats.finish_reason = "stop"
            return
        history.append(token)
        stats.generated_tokens += 1
        yield token
        if stats.generated_tokens == max_new_tokens:
            stats.finish_reason = "length"
            return
        if cache.length == cache.max_length:  # no position left to feed the token back at
            stats.finish_reason = "context"
            return
        start = time.perf_counter()  # the consumer's time between tokens is not the model's
        token = sampler.sample(step(token), history)
        stats.decode_seconds += time.perf_counter() - start
        stats.decode_steps += 1


def generate(model, tokenizer, prompt: str, max_new_tokens: int = 128, sampler: Sampler | None = None,
             chat: bool = True, system: str | None = None, stop_token_ids=None,
             stats: GenerationStats | None = None) -> Iterator[str]:
    """Yields the text of the answer to ``prompt`` piece by piece as tokens
    are produced (a piece waits for the tokens that complete its characters).
    With ``chat`` the prompt goes through the tokenizer's chat template (with
    ``system`` as the system message); it stops at the tokenizer's stop
    tokens unless ``stop_token_ids`` says otherwise."""
    check_text(prompt, "prompt")
    if system is not None:
        check_text(system, "system")
    if chat:
        prompt_ids = tokenizer.encode_chat(prompt, system)
    else:
        prompt_ids = tokenizer.encode(prompt)
    stop = tokenizer.stop_token_ids if stop_token_ids is None else stop_token_ids
    yield from stream_text(tokenizer, generate_ids(model, prompt_ids, max_new_tokens, sampler, stop, stats))


def stream_text(tokenizer, tokens) -> Iterator[str]:
    """The text of ``tokens`` (an iterator of ids) piece by piece, each piece as soon as its characters
    are whole."""
    stream = tokenizer.stream()
    for token in tokens:
        piece = stream.push(token)
        if piece:
            yield piece
    rest = stream.flush()
    if rest:
        yield rest
