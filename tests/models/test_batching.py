"""Continuous batching: every causal LM family (the Llama family, Gemma 3,
GPT-2 and Falcon) decoding sequences of different lengths in one forward
(BatchKVCache), and the serve engine that joins and retires requests
between steps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError, DTypeError, ShapeError
from candle_models import causal_lm
from candle_models.generation import Sampler, generate_ids
from candle_models.llama import LlamaForCausalLM
from candle_models.serve.engine import Engine, Generation, QueueFull, StopText

FIXTURES = Path(__file__).parent / "fixtures"


def single_logits(model, prompt, feed):
    """Each fed token's logits, decoding the sequence alone."""
    cache = model.new_cache(capacity=4)
    model([prompt], cache)
    return [model([[t]], cache, last_only=True)[0, 0].numpy() for t in feed]


def batched_logits(model, prompts, feeds, joins, leaves):
    """The same through one BatchKVCache: sequence i joins before step joins[i] and leaves after
    step leaves[i]; rows move as sequences leave."""
    cache = model.new_batch_cache(len(prompts))
    rows, out = [], [[] for _ in prompts]  # rows[r] is the sequence in row r
    for step in range(max(leaves) + 1):
        for i, join in enumerate(joins):
            if join == step:
                single = model.new_cache()
                model([prompts[i]], single)
                assert cache.admit(single) == len(rows)
                rows.append(i)
        logits = model([[feeds[i][len(out[i])]] for i in rows], cache, last_only=True)
        for r, i in enumerate(rows):
            out[i].append(logits[r, 0].numpy())
        for r in reversed(range(len(rows))):
            if leaves[rows[r]] == step:
                moved = cache.release(r)
                last = rows.pop()
                if moved is not None:
                    rows[r] = last
    return out


@pytest.mark.parametrize("name", ["tiny_llama3", "tiny_mistral", "tiny_phi3", "tiny_qwen2", "tiny_qwen3",
                                  "tiny_llama_dynamic", "tiny_gemma3", "tiny_gpt2", "tiny_falcon", "tiny_falcon_40b",
                                  "tiny_falcon_sequential"])
def test_a_batch_decodes_each_sequence_as_alone(name):
    """(GPT-2's learned positions and Falcon's layouts gathered per row as the Llama family's rope is.)"""
    model = causal_lm.from_pretrained(FIXTURES / name)
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, model.config.vocab_size, n)) for n in (5, 8, 3, 7, 2)]  # within 16 positions
    joins, leaves = [0, 0, 2, 3, 3], [3, 6, 8, 5, 8]
    feeds = [list(rng.integers(0, model.config.vocab_size, leave - join + 1)) for join, leave in zip(joins, leaves)]
    with c.no_grad():
        batched = batched_logits(model, prompts, feeds, joins, leaves)
        for i, prompt in enumerate(prompts):
            alone = single_logits(model, prompt, feeds[i])
            assert len(batched[i]) == len(alone)
            np.testing.assert_allclose(np.stack(batched[i]), np.stack(alone), atol=1e-5, rtol=1e-5)


def test_sliding_windows_and_dynamic_rope_past_the_window():
    """Positions past tiny_mistral's window and tiny_llama_dynamic's max_position_embeddings."""
    for name in ("tiny_mistral", "tiny_llama_dynamic"):
        model = LlamaForCausalLM.from_pretrained(FIXTURES / name)
        long = min(model.config.sliding_windows[0] or model.config.max_position_embeddings,
                   model.config.max_position_embeddings) + 3
        prompts = [list(range(1, long + 1)), [4, 2]]
        feeds = [[7, 8, 9, 10], [1, 2, 3, 4]]
        with c.no_grad():
            batched = batched_logits(model, prompts, feeds, [0, 0], [3, 3])
            for i in range(2):
                np.testing.assert_allclose(np.stack(batched[i]), np.stack(single_logits(model, prompts[i], feeds[i])),
                                           atol=1e-5, rtol=1e-5)


def test_quantized_rows_are_bit_identical_to_decoding_alone(smollm2_chat):
    model, _ = smollm2_chat
    prompts, feeds = [[1, 2, 3], [9, 8, 7, 6, 5], [42]], [[5, 6, 7], [1, 1, 1], [2, 3, 4]]
    with c.no_grad():
        batched = batched_logits(model, prompts, feeds, [0, 0, 0], [2, 2, 2])
        for i in range(3):
            assert np.array_equal(np.stack(batched[i]), np.stack(single_logits(model, prompts[i], feeds[i])))


def test_batch_cache_misuse_is_named():
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3")
    cache = model.new_batch_cache(1)
    with c.no_grad():
        with pytest.raises(ArgumentError, match="empty"):
            model([[1]], cache)
        single = model.new_cache()
        model([[1, 2]], single)
        cache.admit(single)
        with pytest.raises(ArgumentError, match="full"):
            cache.admit(single)
        with pytest.raises(ShapeError, match=r"\(1, 1\)"):
            model([[1, 2]], cache)
        with pytest.raises(ArgumentError, match="row 3"):
            cache.release(3)
        two = model.new_cache(batch=2)
        cache.release(0)
        with pytest.raises(ArgumentError, match="one sequence"):
            cache.admit(two)
    with pytest.raises(ArgumentError, match="max_batch"):
        model.new_batch_cache(0)


def test_a_step_writes_each_row_at_its_position_and_refuses_wrong_keys_by_name():
    """update's direct copies (a step's usual path) and copy_into's (taken for anything unusual, here
    keys of another shape or dtype, which it names) write the same places."""
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3")
    cache = model.new_batch_cache(3)
    with c.no_grad():
        for n in (2, 5, 3):
            single = model.new_cache()
            model([list(range(1, n + 1))], single)
            cache.admit(single)
    cache.begin_step()
    before = cache.keys[0].numpy().copy()
    rng = np.random.default_rng(0)
    shape = (3, cache.kv_heads, 1, cache.head_dim)
    k, v = (c.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(2))
    keys, values = cache.update(0, k, v)
    assert keys.shape == (3, cache.kv_heads, 6, cache.head_dim)
    expect = before.copy()
    for row, n in enumerate((2, 5, 3)):
        expect[row, :, n] = k.numpy()[row, :, 0]
    np.testing.assert_array_equal(cache.keys[0].numpy(), expect)  # nothing else moved
    np.testing.assert_array_equal(keys.numpy()[:, :, :6], expect[:, :, :6])
    with pytest.raises(ShapeError, match="copy_into"):
        cache.update(1, k.narrow(3, 0, 2), v)
    with pytest.raises(DTypeError, match="copy_into"):
        cache.update(1, k.to_dtype("bf16"), v)


def test_the_cache_grows_and_is_freed():
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3")
    cache = model.new_batch_cache(8)
    with c.no_grad():
        for n in (3, 100):
            single = model.new_cache()
            model([[i % 90 for i in range(n)]], single)
            cache.admit(single)
        assert cache.keys[0].shape[0] == 2 and cache.keys[0].shape[2] >= 100
        model([[1], [2]], cache)
        assert cache.lengths == [4, 101]
    cache.clear()
    assert cache.batch == 0 and cache.keys == []


# ---- the engine -----------------------------------------------------------------------------------------

class Collector:
    """A generation's events, gathered on the worker thread."""

    def __init__(self):
        self.text, self.end, self.done = [], None, threading.Event()

    def __call__(self, kind, value):
        if kind == "text":
            self.text.append(value)
        else:
            self.end = value
            self.done.set()


def run_engine(engine, gens, timeout=60):
    engine.start()
    try:
        for gen in gens:
            engine.submit(gen)
        for gen in gens:
            assert gen.emit.done.wait(timeout)
    finally:
        engine.stop()


def test_concurrent_generations_share_steps_and_match_generating_alone(smollm2_chat):
    model, tokenizer = smollm2_chat
    prompts = [tokenizer.encode_chat(q) for q in ("What is the capital of France?", "Name a colour.",
                                                   "Count to five.", "Say hello.", "What is 2 + 2?")]
    engine = Engine(model, tokenizer, max_batch=4, max_queue=4)
    gens = [Generation(p, 24, Sampler(0.8, seed=i), Collector(), frozenset(tokenizer.stop_token_ids))
            for i, p in enumerate(prompts)]
    run_engine(engine, gens)
    tokens = 0
    for i, (prompt, gen) in enumerate(zip(prompts, gens)):
        alone = list(generate_ids(model, prompt, 24, Sampler(0.8, seed=i), tokenizer.stop_token_ids))
        assert "".join(gen.emit.text) == tokenizer.decode(alone, skip_special_tokens=True)
        assert gen.completion_tokens == len(alone) and gen.emit.end == ("length" if len(alone) == 24 else "stop")
        tokens += len(alone)
    assert engine.steps < tokens - len(prompts)  # tokens after the first come from steps shared by several


def test_a_generation_alone_decodes_on_its_own_cache_then_moves_into_the_batch(smollm2_chat):
    """One request runs on its own KVCache (the model's one-sequence step, as candle generate); a second
    arriving mid-answer moves it into the batch, and both answer as generating alone."""
    model, tokenizer = smollm2_chat
    prompts = [tokenizer.encode_chat(q) for q in ("Count from one to twenty in words.", "Name a colour.")]
    engine = Engine(model, tokenizer, max_batch=2, max_queue=2)
    gens = [Generation(p, n, Sampler(0.8, seed=i), Collector(), frozenset(tokenizer.stop_token_ids))
            for i, (p, n) in enumerate(zip(prompts, (40, 8)))]
    engine.start()
    try:
        engine.submit(gens[0])
        while gens[0].completion_tokens < 6:
            assert not gens[0].emit.done.is_set()
            time.sleep(0.005)
        alone_steps = engine.steps
        assert alone_steps >= 4 and engine._solo is not None and engine._cache.batch == 0
        engine.submit(gens[1])
        for gen in gens:
            assert gen.emit.done.wait(60)
    finally:
        engine.stop()
    tokens = 0
    for i, (prompt, gen) in enumerate(zip(prompts, gens)):
        alone = list(generate_ids(model, prompt, (40, 8)[i], Sampler(0.8, seed=i), tokenizer.stop_token_ids))
        assert "".join(gen.emit.text) == tokenizer.decode(alone, skip_special_tokens=True)
        tokens += len(alone)
    assert engine.steps < tokens - len(prompts)  # some steps served both: the first had moved into the batch
    assert engine._solo is None and engine._cache.batch == 0


def test_stop_texts_cancellation_and_a_full_queue(smollm2_chat):
    model, tokenizer = smollm2_chat
    prompt = tokenizer.encode_chat("What is the capital of France? Answer in one sentence.")
    engine = Engine(model, tokenizer, max_batch=1, max_queue=1)
    stopped = Generation(prompt, 30, Sampler(0), Collector(), stop_texts=("Paris",))
    run_engine(engine, [stopped])
    assert "".join(stopped.emit.text) == "The capital of France is " and stopped.emit.end == "stop"

    engine = Engine(model, tokenizer, max_batch=1, max_queue=1)
    long, waiting = Generation(prompt, 10_000, Sampler(0), Collector()), Generation(prompt, 3, Sampler(0), Collector())
    engine.submit(long)
    engine.submit(waiting)
    with pytest.raises(QueueFull):
        engine.submit(Generation(prompt, 1, Sampler(0), Collector()))
    engine.start()
    try:
        while long.completion_tokens < 2:
            time.sleep(0.01)
        long.cancel()
        assert waiting.emit.done.wait(60)  # it got the row the cancelled one left
        assert waiting.completion_tokens == 3 and long.completion_tokens < 100 and not long.emit.done.is_set()
    finally:
        engine.stop()


def test_stop_texts_are_held_back_until_they_are_decided():
    stop = StopText(["</s>", "END"])
    assert stop.push("Hello <") == ("Hello ", False)
    assert stop.push("/") == ("", False)
    assert stop.push("p>") == ("</p>", False)
    assert stop.push(" E") == (" ", False)
    assert stop.push("ND and more") == ("", True)
    assert StopText(["ab"]).push("xxa") == ("xx", False)


def test_rows_and_positions_grow_each_only_when_needed():
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3")
    cache = model.new_batch_cache(8)
    with c.no_grad():
        single = model.new_cache()
        model([[1, 2, 3]], single)
        cache.admit(single)
        for _ in range(20):
            model([[1]], cache)
        assert cache.keys[0].shape[0] == 1 and cache.keys[0].shape[2] == 24  # 3 -> 6 -> 12 -> 24 positions
        cache.admit(single)
        assert cache.keys[0].shape[:3:2] == (2, 24)
