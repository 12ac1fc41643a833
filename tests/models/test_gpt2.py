"""GPT-2 (candle_models.gpt2) against transformers: a seeded random tiny
model made by fixtures/make_llama_fixtures.py (logits of a full forward, and
step by step through the KV cache), and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError
from candle_models.generation import Sampler, generate_ids
from candle_models.gpt2 import GPT2Config, GPT2LMHeadModel

TINY = Path(__file__).parent / "fixtures" / "tiny_gpt2"


def reference():
    ref = np.load(TINY / "reference.npz")
    return ref["input_ids"].astype(np.uint32), ref["logits"]


def test_logits_match_transformers():
    ids, expected = reference()
    model = GPT2LMHeadModel.from_pretrained(TINY)
    with c.no_grad():
        logits = model(c.from_numpy(ids)).numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)


def test_kv_cache_steps_match_the_full_forward():
    ids, expected = reference()
    model = GPT2LMHeadModel.from_pretrained(TINY)
    cache = model.new_cache(batch=ids.shape[0], capacity=3)
    with c.no_grad():
        steps = [model(c.from_numpy(ids[:, :5]), cache).numpy(), model(c.from_numpy(ids[:, 5:7]), cache).numpy()]
        steps += [model(c.from_numpy(ids[:, t:t + 1]), cache).numpy() for t in range(7, ids.shape[1])]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), expected, rtol=0, atol=1e-4)


def test_the_hubs_unprefixed_names_load_too(tmp_path):
    """gpt2 on the hub was saved from GPT2Model: its tensors have no transformer. prefix."""
    folder = tmp_path / "gpt2"
    shutil.copytree(TINY, folder)
    tensors = c.load(str(folder / "model.safetensors"))
    c.save({k.removeprefix("transformer."): tensors[k] for k in tensors}, folder / "model.safetensors")
    ids, expected = reference()
    with c.no_grad():
        logits = GPT2LMHeadModel.from_pretrained(folder)(c.from_numpy(ids)).numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)


def test_generation_runs_to_the_context_length():
    model = GPT2LMHeadModel.from_pretrained(TINY)
    tokens = list(generate_ids(model, [1, 2, 3], 100, Sampler(0.8, seed=1)))
    assert len(tokens) == model.config.n_positions - 3 + 1  # the last comes from the context's last position
    with pytest.raises(ArgumentError, match="context length of 32"):
        model([list(range(33))])


@pytest.mark.parametrize("change, message", [
    ({"activation_function": "relu"}, "activation_function 'relu'"),
    ({"model_type": "llama"}, "not GPT-2"),
    ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
    ({"n_head": None}, "n_head"),
])
def test_bad_configs_are_named(change, message):
    cfg = json.loads((TINY / "config.json").read_text())
    cfg.update(change)
    if change.get("n_head", 0) is None:
        del cfg["n_head"]
    with pytest.raises(ValueError, match=message):
        GPT2Config.from_dict(cfg)


def test_the_family_comes_from_the_config(tmp_path):
    from candle_models import causal_lm
    from candle_models.llama import LlamaForCausalLM

    fixtures = TINY.parent
    assert causal_lm.family(TINY) is GPT2LMHeadModel
    assert causal_lm.family(fixtures / "tiny_qwen3") is LlamaForCausalLM
    assert isinstance(causal_lm.from_pretrained(fixtures / "tiny_phi3"), LlamaForCausalLM)
    folder = tmp_path / "t5"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(ValueError, match=r"model_type 't5' is not a supported causal language model "
                                         r"\(supported: llama, mistral, qwen2, qwen3, phi3, gpt2\)"):
        causal_lm.family(folder)
    (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    assert causal_lm.family(folder) is GPT2LMHeadModel
