"""Generation with an encoder-decoder model (T5): the input is encoded once,
then the decoder starts from its start token and feeds each sampled token
back through its KV cache, the cross-attention keys and values staying as
they were computed from the encoder's states. Sampling, stop tokens and
statistics are :mod:`candle_models.generation`'s.

The model provides ``encode(ids)``, ``new_cache(encoder_states, capacity=)``,
``decode(ids, cache, last_only=)`` and ``config.decoder_start_token_id`` and
``config.eos_token_id``."""

from __future__ import annotations

import time
from typing import Iterator

import candle_api as c

from .generation import (FIRST_TOKENS_CAPACITY, GenerationStats, Sampler, sample_tokens, start_generation,
                         stream_text)
from .tokenizer import check_text


def generate_seq2seq_ids(model, input_ids, max_new_tokens: int = 128, sampler: Sampler | None = None,
                         stop_token_ids=None, stats: GenerationStats | None = None) -> Iterator[int]:
    """Yields up to ``max_new_tokens`` ids of the decoder's output for the encoder input ``input_ids``
    (one sequence), as each is produced; a stop token (by default the model's end of sequence) ends
    it and is not yielded. The repeat penalty looks at the decoder's tokens, its start token
    included, as transformers' does."""
    input_ids = [int(i) for i in input_ids]
    if not input_ids:
        raise ValueError("the input is empty: the encoder needs at least one token")
    sampler, stats = start_generation(max_new_tokens, sampler, stats, len(input_ids))
    if max_new_tokens == 0:
        return
    stop = (model.config.eos_token_id,) if stop_token_ids is None else stop_token_ids
    history = [model.config.decoder_start_token_id]
    with c.no_grad():
        start = time.perf_counter()
        cache = model.new_cache(model.encode([input_ids]), capacity=1 + min(max_new_tokens, FIRST_TOKENS_CAPACITY))
        first = sampler.sample(model.decode([history], cache, last_only=True)[0, 0], history)
        stats.prompt_seconds = time.perf_counter() - start
        yield from sample_tokens(lambda token: model.decode([[token]], cache, last_only=True)[0, 0], first, cache,
                                 sampler, history, stop, max_new_tokens, stats)


def text2text(model, tokenizer, text: str, max_new_tokens: int = 128, sampler: Sampler | None = None,
              stop_token_ids=None, stats: GenerationStats | None = None) -> Iterator[str]:
    """Yields the model's output text for ``text`` (a T5 task such as "translate English to German:
    ...") piece by piece as tokens are produced. It stops at the tokenizer's stop tokens (T5's
    ``</s>``) unless ``stop_token_ids`` says otherwise."""
    ids = tokenizer.encode(check_text(text, "text"))
    stop = tokenizer.stop_token_ids if stop_token_ids is None else stop_token_ids
    yield from stream_text(tokenizer, generate_seq2seq_ids(model, ids, max_new_tokens, sampler, stop, stats))
