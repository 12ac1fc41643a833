"""The causal LMs outside the Llama family, GPT-2 (candle_models.gpt2) and
Falcon (candle_models.falcon), against transformers: seeded random tiny
models made by fixtures/make_llama_fixtures.py (logits of a full forward,
and step by step through the KV cache), their errors, and the choice of a
checkpoint's family (candle_models.causal_lm)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError
from candle_models.generation import Sampler, generate_ids
from candle_models.falcon import FalconConfig, FalconForCausalLM
from candle_models.gpt2 import GPT2Config, GPT2LMHeadModel

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny_gpt2"
MODELS = [("tiny_gpt2", GPT2LMHeadModel), ("tiny_falcon", FalconForCausalLM),
          ("tiny_falcon_grouped", FalconForCausalLM), ("tiny_falcon_sequential", FalconForCausalLM)]


def reference(name="tiny_gpt2"):
    ref = np.load(FIXTURES / name / "reference.npz")
    return ref["input_ids"].astype(np.uint32), ref["logits"]


@pytest.mark.parametrize("name, cls", MODELS)
def test_logits_match_transformers(name, cls):
    ids, expected = reference(name)
    model = cls.from_pretrained(FIXTURES / name)
    with c.no_grad():
        logits = model(c.from_numpy(ids)).numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name, cls", MODELS)
def test_kv_cache_steps_match_the_full_forward(name, cls):
    ids, expected = reference(name)
    model = cls.from_pretrained(FIXTURES / name)
    cache = model.new_cache(batch=ids.shape[0], capacity=3)
    with c.no_grad():
        steps = [model(c.from_numpy(ids[:, :5]), cache).numpy(), model(c.from_numpy(ids[:, 5:7]), cache).numpy()]
        steps += [model(c.from_numpy(ids[:, t:t + 1]), cache).numpy() for t in range(7, ids.shape[1])]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), expected, rtol=0, atol=1e-4)


GREEDY = json.loads((FIXTURES / "tiny_greedy.json").read_text())


@pytest.mark.parametrize("name", sorted(GREEDY))
def test_greedy_tokens_match_transformers(name):
    """Every family's 32 greedy steps (28 for GPT-2's 32 positions) through the KV cache give
    transformers' tokens (fixtures/make_greedy_fixtures.py), up to the model's context (dynamic
    rope scaling's 16 positions here: transformers goes on past it); a step whose two best logits
    were within the logits' tolerance of each other (2e-4) would end the comparison (none does)."""
    from candle_models import causal_lm

    case = GREEDY[name]
    model = causal_lm.from_pretrained(FIXTURES / name, dtype="f32")
    got = list(generate_ids(model, case["prompt_ids"], len(case["generated_ids"]), Sampler(temperature=0)))
    for step, (g, w, gap) in enumerate(zip(got, case["generated_ids"], case["top2_gaps"])):
        if gap < 2e-4:
            break
        assert g == w, f"{name} step {step}: {g}, transformers {w} (gap {gap:.2e})"
    else:
        context = model.config.context_length - len(case["prompt_ids"]) + 1  # the last predicted at its last position
        assert len(got) == min(len(case["generated_ids"]), context)


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


@pytest.mark.parametrize("name, config_class, change, message", [
    ("tiny_gpt2", GPT2Config, {"activation_function": "relu"}, "activation_function 'relu'"),
    ("tiny_gpt2", GPT2Config, {"model_type": "llama"}, "not GPT-2"),
    ("tiny_gpt2", GPT2Config, {"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
    ("tiny_gpt2", GPT2Config, {"n_head": None}, "n_head"),
    ("tiny_falcon", FalconConfig, {"alibi": True}, "ALiBi"),
    ("tiny_falcon", FalconConfig, {"activation": "relu"}, "activation 'relu'"),
    ("tiny_falcon", FalconConfig, {"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "rope type 'linear'"),
    ("tiny_falcon", FalconConfig, {"hidden_size": None}, "hidden_size"),
])
def test_bad_configs_are_named(name, config_class, change, message):
    cfg = json.loads((FIXTURES / name / "config.json").read_text())
    cfg.update(change)
    for key in [k for k, v in change.items() if v is None]:
        del cfg[key]
    with pytest.raises(ValueError, match=message):
        config_class.from_dict(cfg)


def test_the_family_comes_from_the_config(tmp_path):
    from candle_models import causal_lm
    from candle_models.llama import LlamaForCausalLM

    fixtures = TINY.parent
    assert causal_lm.family(TINY) is GPT2LMHeadModel
    assert causal_lm.family(fixtures / "tiny_qwen3") is LlamaForCausalLM
    assert isinstance(causal_lm.from_pretrained(fixtures / "tiny_phi3"), LlamaForCausalLM)
    folder = tmp_path / "bart"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(ValueError, match=r"model_type 'bart' is not a supported causal language model "
                                         r"\(supported: llama, mistral, qwen2, qwen3, phi3, gemma3_text, gpt2, falcon; "
                                         r"text to text: t5\)"):
        causal_lm.family(folder)
    (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    assert causal_lm.family(folder) is GPT2LMHeadModel


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_falcon"])
def test_candle_generate_runs_every_family(tmp_path, capsys, name):
    """candle generate loads the family its config names (a char-level tokenizer stands in for one)."""
    from candle_api.cli import main
    from test_quantize_command import char_level_tokenizer

    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    char_level_tokenizer(96).save(str(folder / "tokenizer.json"))
    assert main(["generate", "--model", str(folder), "--raw", "--max-tokens", "6", "--seed", "3", "ab"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith("\n") and "6 tokens generated" in err


@pytest.mark.parametrize("name", ["tiny_gpt2", "tiny_falcon"])
def test_candle_serve_batches_gpt2_and_falcon(tmp_path, name):
    """candle serve runs every causal LM family in its batch: four concurrent completions (token-id prompts)
    each get the greedy tokens of decoding them alone; without a chat template, chat answers 400."""
    import concurrent.futures

    import httpx
    from test_quantize_command import char_level_tokenizer
    from test_serve import Server

    from candle_models import causal_lm
    from candle_models.tokenizer import Tokenizer

    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    char_level_tokenizer(96).save(str(folder / "tokenizer.json"))
    model, tokenizer = causal_lm.from_pretrained(folder), Tokenizer.from_pretrained(folder)
    prompts = [[5, 17, 30], [2, 9, 40, 41, 60, 7, 8], [11], [90, 3, 3, 3, 3]]
    alone = [tokenizer.decode(generate_ids(model, p, 8, Sampler(temperature=0))) for p in prompts]
    server = Server("--model", str(folder), "--embedding-model", "none", "--max-concurrent", "4")
    try:
        assert any("has no chat template" in line for line in server.lines)

        def complete(prompt):
            body = {"model": name, "prompt": prompt, "temperature": 0, "max_tokens": 8}
            return httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]

        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            assert list(pool.map(complete, prompts)) == alone
        chat = httpx.post(f"{server.url}/v1/chat/completions", timeout=60,
                          json={"model": name, "messages": [{"role": "user", "content": "hi"}]})
        assert chat.status_code == 400 and "no chat template" in chat.json()["error"]["message"]
    finally:
        assert server.stop() == 0


def test_candle_serve_refuses_what_is_no_causal_lm(capsys):
    from candle_api.cli import main

    code = main(["serve", "--port", "0", "--model", str(FIXTURES / "tiny_bert" / "bert-mlm"),
                 "--embedding-model", "none"])
    err = capsys.readouterr().err
    assert code == 1 and "model_type 'bert' is not a supported causal language model (supported: llama" in err
    assert err.count("\n") == 1

def test_candle_generate_names_what_it_does_not_run(tmp_path, capsys):
    """The family comes from config.json or the GGUF's general.architecture; another is one line that lists
    the supported ones."""
    from candle_api.cli import main

    gguf = tmp_path / "bloom.gguf"
    c.save({"w": c.zeros((2, 32))}, gguf, {"general.architecture": "bloom"}, format="gguf")
    folder = tmp_path / "bart"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["BartForConditionalGeneration"]}))
    for model, message in ((gguf, "GGUF architecture 'bloom' is not supported (supported: llama, qwen2, qwen3, "
                                  "phi3, gemma3, gpt2, falcon)"),
                           (folder, "config.json names no model_type, and none of its architectures "
                                    "['BartForConditionalGeneration'] is supported (supported: LlamaForCausalLM")):
        assert main(["generate", "--model", str(model), "--raw", "hi"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("candle generate: error: ") and message in err and err.count("\n") == 1, err
