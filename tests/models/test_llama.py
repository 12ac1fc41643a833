"""The Llama family against transformers: seeded random Llama (three rope
scalings), Mistral and Qwen2 checkpoints (fixtures/tiny_*), greedy decoding
of the real SmolLM2-135M-Instruct GGUF (fixtures/smollm2_greedy.json) and
the GGUF tokenizers; all made by fixtures/make_llama_fixtures.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import ArgumentError
from candle_models import ModelNotFoundError, default_model
from candle_models.generation import Sampler, generate, generate_ids
from candle_models.llama import MODEL_TYPES, LlamaConfig, LlamaForCausalLM
from candle_models.tokenizer import Tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
TINY = sorted(p.name for p in FIXTURES.glob("tiny_*") if (p / "reference.npz").exists()
              and json.loads((p / "config.json").read_text())["model_type"] in MODEL_TYPES)
TOL = 1e-4


def reference(name: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.load(FIXTURES / name / "reference.npz")
    return data["input_ids"], data["logits"]


@pytest.fixture(scope="module")
def smollm2() -> Path:
    try:
        return default_model("generate")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def smollm2_model(smollm2):
    # The references come from transformers, which dequantizes a GGUF's weights: so does dtype="f32" (the
    # quantized path is compared with llama.cpp in tests/quantized).
    return LlamaForCausalLM.from_pretrained(smollm2, dtype="f32")


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2):
    return Tokenizer.from_pretrained(smollm2)


def test_fixtures_cover_the_variants():
    assert TINY == ["tiny_llama3", "tiny_llama_dynamic", "tiny_llama_linear", "tiny_mistral", "tiny_phi3", "tiny_qwen2",
                    "tiny_qwen3"]


@pytest.mark.parametrize("name", TINY)
def test_logits_match_transformers(name):
    ids, expected = reference(name)
    model = LlamaForCausalLM.from_pretrained(FIXTURES / name)
    with c.no_grad():
        logits = model(c.from_numpy(ids.astype(np.uint32))).numpy()
    assert logits.shape == expected.shape
    np.testing.assert_allclose(logits, expected, rtol=0, atol=TOL)


# Dynamic NTK scaling is left out: its frequencies depend on the length seen so far, so keys cached
# before the sequence passed max_position_embeddings differ from a full forward's (in transformers too).
@pytest.mark.parametrize("name", [n for n in TINY if n != "tiny_llama_dynamic"])
def test_kv_cache_steps_match_the_full_forward(name):
    """A prompt of 5, then one token at a time: the positions, the cache (grown
    past its first capacity) and the sliding windows line up with a full forward."""
    ids, expected = reference(name)
    model = LlamaForCausalLM.from_pretrained(FIXTURES / name)
    cache = model.new_cache(batch=ids.shape[0], capacity=6)
    with c.no_grad():
        steps = [model(c.from_numpy(ids[:, :5].astype(np.uint32)), cache).numpy()]
        for t in range(5, ids.shape[1]):
            steps.append(model(c.from_numpy(ids[:, t:t + 1].astype(np.uint32)), cache).numpy())
    assert cache.length == ids.shape[1]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), expected, rtol=0, atol=TOL)


def test_the_cache_doubles_up_to_the_context_length():
    """Capacity 4, then one position at a time: 8, 16 ... up to tiny_llama3's context (128 positions),
    never past it; a position past the context is refused before anything is computed or grown."""
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3")
    cache = model.new_cache(capacity=4)
    capacities = set()
    with c.no_grad():
        for i in range(128):
            model([[1 + i % 95]], cache, last_only=True)
            capacities.add(cache.shape[2])
        assert (cache.length, sorted(capacities)) == (128, [4, 8, 16, 32, 64, 128])
        with pytest.raises(ArgumentError, match=r"^129 positions \(128 cached \+ 1 new\) exceed the model's "
                                                r"context length of 128$"):
            model([[1]], cache)
        assert (cache.length, cache.shape[2]) == (128, 128)
        with pytest.raises(ArgumentError, match="129 positions"):
            model([[1] * 129])  # a full forward has the same bound


def test_context_length_is_max_position_embeddings_or_what_dynamic_scaling_extends_it_to():
    assert LlamaConfig.from_dict(_config()).context_length == 128
    dynamic = json.loads((FIXTURES / "tiny_llama_dynamic" / "config.json").read_text())
    assert LlamaConfig.from_dict(dynamic).context_length == 8 * 2  # max_position_embeddings 8, factor 2


def test_last_only_gives_the_last_position():
    ids, expected = reference("tiny_qwen2")
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_qwen2")
    with c.no_grad():
        last = model(c.from_numpy(ids.astype(np.uint32)), last_only=True).numpy()
    np.testing.assert_allclose(last, expected[:, -1:], rtol=0, atol=TOL)


def test_bf16_and_f16_weights_run_close_to_f32():
    ids, expected = reference("tiny_llama3")
    for dtype, tol in (("f16", 0.05), ("bf16", 0.25)):
        model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_llama3", dtype=dtype)
        with c.no_grad():
            logits = model(c.from_numpy(ids.astype(np.uint32))).to_dtype("f32").numpy()
        assert np.abs(logits - expected).max() < tol * np.abs(expected).max(), dtype


# ---- configuration and input errors ------------------------------------------------------------------

def _config(**changes) -> dict:
    cfg = json.loads((FIXTURES / "tiny_llama3" / "config.json").read_text())
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "gpt2"}, "not a Llama-family model"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"rope_parameters": {"rope_type": "yarn-ish", "rope_theta": 1.0}}, "rope type 'yarn-ish'"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1.0, "partial_rotary_factor": 0.75}},
     "partial rotary"),
    ({"partial_rotary_factor": 0.5}, "partial rotary"),
    ({"model_type": "phi3", "rope_parameters": {"rope_type": "longrope", "rope_theta": 1.0}}, "rope type 'longrope'"),
    ({"num_attention_heads": None}, "num_attention_heads"),
])
def test_bad_configs_are_named(changes, message):
    cfg = _config(**changes)
    if changes.get("num_attention_heads", 0) is None:
        del cfg["num_attention_heads"]
    with pytest.raises(ValueError, match=message):
        LlamaConfig.from_dict(cfg)


def test_bad_inputs_are_named(tmp_path):
    model = LlamaForCausalLM.from_pretrained(FIXTURES / "tiny_mistral")
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        model(c.tensor([1, 2, 3], dtype="u32"))
    with pytest.raises(Exception, match="out of range|index"):
        model([[1, 2, 96]])  # vocab_size is 96
    with pytest.raises(ModelNotFoundError):
        LlamaForCausalLM.from_pretrained(tmp_path / "missing")
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES / "tiny_mistral", broken)
    (broken / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(Exception, match="model.safetensors"):
        LlamaForCausalLM.from_pretrained(broken)


# ---- SmolLM2-135M-Instruct from its real GGUF --------------------------------------------------------

GREEDY = json.loads((FIXTURES / "smollm2_greedy.json").read_text())


def test_gguf_tokenizer_matches_transformers(smollm2_tokenizer):
    for case in GREEDY["tokenizer"]:
        assert smollm2_tokenizer.encode(case["text"], add_special_tokens=False) == case["ids"], case["text"]
    for case in GREEDY["cases"]:
        assert smollm2_tokenizer.encode_chat(case["prompt"]) == case["prompt_ids"], case["prompt"]


@pytest.mark.parametrize("case", GREEDY["cases"], ids=[c["prompt"][:20] for c in GREEDY["cases"]])
def test_greedy_decoding_matches_transformers(case, smollm2_model):
    ids = list(generate_ids(smollm2_model, case["prompt_ids"], GREEDY["tokens"], Sampler(temperature=0)))
    assert ids == case["generated_ids"]


def test_the_capital_of_france_is_paris(smollm2_model, smollm2_tokenizer):
    pieces = list(generate(smollm2_model, smollm2_tokenizer, "What is the capital of France?", 32,
                           Sampler(temperature=0)))
    answer = "".join(pieces)
    assert "Paris" in answer
    assert len(pieces) > 3  # streamed piece by piece, and stopped at <|im_end|> (not shown)
    assert "<|im_end|>" not in answer and len(answer) < 120


def test_smollm2_config_from_gguf_metadata(smollm2_model):
    cfg = smollm2_model.config
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.tie_word_embeddings) == (49152, 576, 30, 9, 3, True)


def spm_cases(tok: Tokenizer) -> list:
    """spm_tokens.json's (text, ids, decoded) as llama.cpp has them: as transformers' GGUF conversion,
    but for a text that starts with a space, where llama.cpp and SentencePiece add the dummy prefix all
    the same ("  two" is "__ _two"); transformers' conversion does not (its Metaspace prepends only to
    text without a leading space). llama.cpp's own vectors check that case (test_tokenizer_vectors.py)."""
    cases = []
    for case in json.loads((FIXTURES / "spm_tokens.json").read_text()):
        ids, decoded = case["ids"], case["decoded"]
        if case["text"].startswith(" "):  # this vocabulary has no "__": the prefix is a token of its own
            ids, decoded = [ids[0], tok.inner.token_to_id("\u2581")] + ids[1:], case["text"]
        cases.append((case["text"], ids, decoded))
    return cases


def test_sentencepiece_gguf_tokenizer_matches_transformers():
    """As transformers' GGUF conversion (but for a leading space: see spm_cases)."""
    metadata = c.load(str(FIXTURES / "spm_vocab.gguf")).metadata
    tok = Tokenizer.from_gguf_metadata(metadata)
    for text, ids, decoded in spm_cases(tok):
        assert tok.encode(text) == ids, text
        assert tok.decode(ids, skip_special_tokens=True) == decoded, text
