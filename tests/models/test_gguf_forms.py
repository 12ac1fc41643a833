"""The GGUF forms of Mistral, Phi-3, GPT-2, Falcon and Gemma 3 (llama.cpp's
llama, phi3, gpt2, falcon and gemma3 architectures): ``candle quantize``
writes each tiny transformers fixture as llama.cpp's converter would (its
tensor names, metadata keys and layouts), and ``from_pretrained`` reads the
file back to the model the config.json path gives, on the same random
weights:

- written in f16 (the fixtures' own precision, so nothing is lost), the
  dequantized model's logits equal the folder's and transformers' (1e-4);
  with the weights kept in their f16 or q8_0 blocks, within the rounding of
  the products;
- llama.cpp (llama-cpp-python 0.3.36) loads these same files and computes
  the same logits: fixtures/llamacpp_gguf_forms.npz, made by
  fixtures/make_gguf_form_fixtures.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_models import causal_lm
from test_quantize_command import char_level_tokenizer, run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: fixture -> general.architecture, the tensors of block 0 that are its own, and what config.json must say
#: for a GGUF form (llama.cpp scales Gemma 3's queries by 1/sqrt(head_dim): its fixtures' 24 has no form)
FORMS = {
    "tiny_mistral": ("llama", {"attn_q", "attn_k", "attn_v", "ffn_gate"}, {}),
    "tiny_phi3": ("phi3", {"attn_qkv", "ffn_up"}, {}),
    "tiny_gpt2": ("gpt2", {"attn_qkv", "attn_norm", "ffn_norm"}, {}),
    "tiny_falcon": ("falcon", {"attn_qkv", "attn_norm"}, {}),
    "tiny_falcon_40b": ("falcon", {"attn_qkv", "attn_norm", "attn_norm_2"}, {}),
    "tiny_gemma3": ("gemma3", {"attn_q_norm", "post_attention_norm", "post_ffw_norm"}, {"query_pre_attn_scalar": 16}),
    "tiny_gemma3_softcap": ("gemma3", {"attn_k_norm", "ffn_norm"}, {"query_pre_attn_scalar": 16}),
}
#: llama.cpp ignores the sliding windows of these (candle slides them): compared over the window
LLAMA_CPP_FULL_ATTENTION = {"tiny_mistral": 5, "tiny_phi3": 6}
LLAMA_CPP_FILE = FIXTURES / "llamacpp_gguf_forms.npz"
#: max |candle - llama.cpp| / max |llama.cpp logit|, measured: f16 files 2e-4 to 1e-3 (llama.cpp rounds the
#: activations to f16 for the products), q8_0 files 0.005 to 0.026 (llama.cpp rounds them to q8_0; candle
#: multiplies 12-row prompts by f32 activations; the soft-capped logits make the largest relative figure).
LLAMA_CPP_TOL = {"f16": 3e-3, "q8_0": 0.05}


def folder_of(name: str, tmp: Path) -> Path:
    """The fixture ``name`` with a byte-level tokenizer and the config changes its GGUF form needs. (A model
    named "phi3" would have llama.cpp look up Phi-3's special tokens, which a byte-level vocabulary lacks: the
    folder, which names the model, is named otherwise.)"""
    folder = tmp / name.replace("phi3", "phi")
    if not folder.exists():
        shutil.copytree(FIXTURES / name, folder)
        char_level_tokenizer(96).save(str(folder / "tokenizer.json"))
        path = folder / "config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | FORMS[name][2]))
    return folder


def write_gguf(name: str, tmp: Path, ggml_type: str) -> Path:
    """The fixture ``name`` written by candle quantize as ``ggml_type``."""
    out = tmp / f"{name}.{ggml_type}.gguf"
    code, _, err = run_cli(str(folder_of(name, tmp)), str(out), "--type", ggml_type)
    assert code == 0, err
    return out


def logits_of(path: Path, ids: np.ndarray, dtype=None) -> np.ndarray:
    model = causal_lm.from_pretrained(path, dtype=dtype)
    with c.no_grad():
        return model(ids.tolist()).numpy()


@pytest.mark.parametrize("name", FORMS)
def test_names_and_keys_are_llama_cpps(tmp_path, name):
    arch, parts, _ = FORMS[name]
    file = c.load(str(write_gguf(name, tmp_path, "f16")))
    assert file.metadata["general.architecture"] == arch
    assert {f"{arch}.block_count", f"{arch}.embedding_length", f"{arch}.attention.head_count"} <= set(file.metadata)
    assert {f"blk.0.{part}.weight" for part in parts} <= set(file)
    assert all(n.startswith(("blk.", "token_embd.", "position_embd.", "output", "rope_freqs.")) for n in file)
    assert causal_lm.family(tmp_path / f"{name}.f16.gguf") is causal_lm.family(FIXTURES / name)


@pytest.mark.parametrize("name", FORMS)
def test_f16_form_reads_back_to_the_config_json_model(tmp_path, name):
    ref = np.load(FIXTURES / name / "reference.npz")
    ids = ref["input_ids"]
    path = write_gguf(name, tmp_path, "f16")
    folder = logits_of(folder_of(name, tmp_path), ids)
    dequantized = logits_of(path, ids, "f32")
    np.testing.assert_allclose(dequantized, folder, atol=1e-5, rtol=0)
    if not FORMS[name][2]:  # the config transformers ran
        np.testing.assert_allclose(dequantized, ref["logits"], atol=1e-4, rtol=0)
    kept = logits_of(path, ids)  # f16 blocks, multiplied as they are (activations rounded to f16)
    np.testing.assert_allclose(kept, folder, atol=0.02 * np.abs(folder).max(), rtol=0)


@pytest.mark.parametrize("name", FORMS)
def test_q8_0_form_stays_quantized(tmp_path, name):
    ids = np.load(FIXTURES / name / "reference.npz")["input_ids"]
    path = write_gguf(name, tmp_path, "q8_0")
    model = causal_lm.from_pretrained(path)
    assert any(getattr(m, "quantized", None) for m in model.modules())
    with c.no_grad():
        got = model(ids.tolist()).numpy()
    folder = logits_of(folder_of(name, tmp_path), ids)
    np.testing.assert_allclose(got, folder, atol=0.05 * np.abs(folder).max(), rtol=0)


@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("ggml_type", ["f16", "q8_0"])
def test_llama_cpp_computes_the_same_logits(tmp_path, name, ggml_type):
    """llama.cpp loaded the files candle quantize writes (it refuses a missing or extra tensor and a key of
    the wrong type) and its logits for the fixture's ids agree with candle's from the same file."""
    want = np.load(LLAMA_CPP_FILE)[f"{name}.{ggml_type}"]
    ids = np.load(FIXTURES / name / "reference.npz")["input_ids"]
    got = logits_of(write_gguf(name, tmp_path, ggml_type), ids)
    window = LLAMA_CPP_FULL_ATTENTION.get(name, ids.shape[1])
    tol = LLAMA_CPP_TOL[ggml_type] * np.abs(want).max()
    np.testing.assert_allclose(got[:, :window], want[:, :window], atol=tol, rtol=0)


@pytest.mark.parametrize("arch, keys, message", [
    ("gpt2", {}, "the GGUF has no token_embd.weight tensor"),
    ("falcon", {"falcon.vocab_size": 2}, "the GGUF metadata has no falcon.embedding_length"),
    ("gemma3", {}, "the GGUF metadata has no gemma3.attention.head_count"),
    ("phi3", {"phi3.attention.head_count": 2, "phi3.embedding_length": 32}, "the GGUF metadata has no phi3."),
    ("bloom", {}, "GGUF architecture 'bloom' is not supported (supported: llama, qwen2, qwen3, phi3, gemma3, gpt2"),
])
def test_a_gguf_without_what_its_architecture_needs_is_named(tmp_path, arch, keys, message):
    path = tmp_path / f"{arch}.gguf"
    c.save({"w": c.zeros((2, 32))}, path, {"general.architecture": arch, **keys}, format="gguf")
    with pytest.raises(ValueError, match=re.escape(message)):
        causal_lm.from_pretrained(path)
