"""``candle quantize``: Llama-family folders and GGUF files written as GGUF
files that llama.cpp loads, read back by candle's own GGUF loader.

The model is a seeded random Llama folder built here (two safetensors
shards, a byte-level BPE tokenizer trained on a few sentences, a chat
template): its 256-wide rows hold whole K-quant blocks, its 320-wide
down-projection rows do not (they fall back to q8_0); the transformers-made
fixtures cover Llama 3.1's rope, Mistral and Qwen2. That llama.cpp loads
such files, with the same logits, was checked outside the tests
(llama-cpp-python).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

import candle_api as c
from candle_api.cli import main
from candle_models.cli import register
from candle_models.gguf_export import pre_tokenizer_name
from candle_models.llama import LlamaForCausalLM
from candle_models.tokenizer import Tokenizer
from test_llama import spm_cases

FIXTURES = Path(__file__).parent / "fixtures"
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320, "hidden_size": 256,
          "intermediate_size": 320, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 128, "hidden_act": "silu",
          "tie_word_embeddings": False}
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
CORPUS = ["The quick brown fox jumps over the lazy dog.", "What is the capital of France? Paris is.",
          "Hello world, hello there: 12345 and 678.", "naïve café, ünïcödé and 日本語"]
TEXTS = ["Hello world", "What is the capital of France?", "  two  spaces, 2024 numbers\n\ttabs",
         "naïve café 日本 😀", "<|im_start|>user\nHi<|im_end|>"]
IDS = np.array([[5, 17, 250, 3, 99, 42, 7, 310, 64, 128, 1, 200]], dtype=np.uint32)
#: Largest |logit error| / largest |logit| against the f32 folder model, measured (q8_0 0.016, q4_0 0.214, q4k
#: 0.205; the same dequantized or not) with margin. Random weights amplify the weights' own error (0.5%, 8.6%,
#: 7.2% rms) about 2.5 times; llama.cpp's logits for these files are as far off (0.019, 0.218, 0.202).
TOLERANCES = {"q8_0": 0.03, "q4_0": 0.35, "q4k": 0.3}


# ---- the model folder ---------------------------------------------------------------------------

def bpe_tokenizer() -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer as GPT-2/SmolLM2 have, trained on CORPUS (deterministic)."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def random_weights(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    """transformers' names and shapes, values with O(1) activations."""
    rng = np.random.default_rng(seed)
    hidden, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = hidden // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], hidden), "model.norm.weight": (hidden,)}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], hidden)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                   p + "self_attn.q_proj.weight": (hidden, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
                   p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.o_proj.weight": (hidden, hidden),
                   p + "mlp.gate_proj.weight": (ffn, hidden), p + "mlp.up_proj.weight": (ffn, hidden),
                   p + "mlp.down_proj.weight": (hidden, ffn)}
    shapes["model.layers.0.self_attn.rotary_emb.inv_freq"] = (head_dim // 2,)  # older checkpoints have them
    weights = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            weights[name] = 1 + 0.2 * rng.standard_normal(shape)
        else:
            weights[name] = rng.standard_normal(shape) / (1 if "embed" in name else shape[1] ** 0.5)
    return {name: w.astype(np.float16) for name, w in weights.items()}


def llama_folder(path: Path, tokenizer: tokenizers.Tokenizer, seed: int = 0, **config) -> Path:
    """A Hugging Face Llama folder: config.json, tokenizer files, f16 weights in two shards and their index."""
    cfg = CONFIG | config
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE}))
    weights = random_weights(cfg, seed)
    names = sorted(weights)
    weight_map = {}
    for shard, part in enumerate((names[:len(names) // 2], names[len(names) // 2:])):
        file = f"model-{shard + 1:05d}-of-00002.safetensors"
        c.save({n: c.from_numpy(weights[n]) for n in part}, path / file)
        weight_map |= dict.fromkeys(part, file)
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return llama_folder(tmp_path_factory.mktemp("quantize") / "tiny-llama", bpe_tokenizer())


@pytest.fixture(scope="module")
def reference(folder) -> np.ndarray:
    return logits(folder)


@pytest.fixture(scope="module")
def quantized(folder, tmp_path_factory):
    """type -> (GGUF path, stdout, stderr) of the folder quantized once per type."""
    out, done = tmp_path_factory.mktemp("quantized"), {}

    def get(ggml_type: str):
        if ggml_type not in done:
            path = out / f"tiny-{ggml_type}.gguf"
            code, stdout, stderr = run_cli(str(folder), str(path), "--type", ggml_type)
            assert code == 0, stderr
            done[ggml_type] = (path, stdout, stderr)
        return done[ggml_type]

    return get


def run_cli(*argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``candle quantize argv``; module fixtures cannot use capsys."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["quantize", *argv])
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def logits(path: Path, ids: np.ndarray = IDS, dtype=None) -> np.ndarray:
    """The model's logits, loaded as ``candle generate`` loads it (or dequantized to ``dtype``)."""
    model = LlamaForCausalLM.from_pretrained(path, dtype=dtype)
    with c.no_grad():
        return model(c.from_numpy(ids)).numpy()


def gguf_value_type(path: Path, key: str) -> int:
    """The GGUF value type a key is stored with (candle's reader gives the values only)."""
    head = path.read_bytes()[:1 << 20]
    name = key.encode()
    at = head.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    return struct.unpack_from("<I", head, at)[0]


# ---- quantized models match the folder's ----------------------------------------------------------

@pytest.mark.parametrize("ggml_type", sorted(TOLERANCES))
def test_quantized_logits_match_the_folder_model(quantized, reference, ggml_type):
    path, stdout, _ = quantized(ggml_type)
    got = logits(path)
    error = np.abs(got - reference).max() / np.abs(reference).max()
    assert 0 < error < TOLERANCES[ggml_type], error
    assert stdout.startswith(f"{path}: {ggml_type}, 21 tensors (")


def test_each_tensor_gets_the_type_its_rows_allow(quantized):
    path, stdout, stderr = quantized("q4k")
    file = c.load(str(path))
    types = {name: file[name].ggml_dtype for name in file}
    assert types["token_embd.weight"] == types["output.weight"] == types["blk.1.attn_q.weight"] == "q4k"
    assert types["blk.0.ffn_down.weight"] == types["blk.1.ffn_down.weight"] == "q8_0"  # rows of 320
    assert types["output_norm.weight"] == types["blk.0.attn_norm.weight"] == "f32"
    assert "21 tensors (14 q4k, 5 f32, 2 q8_0)" in stdout
    assert stderr == ("candle quantize: note: skipped the tensors llama.cpp has no place for: "
                      "model.layers.0.self_attn.rotary_emb.inv_freq\n"
                      "candle quantize: note: q8_0 for the matrices whose rows are not whole q4k blocks of 256 "
                      "values: blk.0.ffn_down.weight, blk.1.ffn_down.weight\n")


def test_f32_reproduces_the_model_exactly(quantized, reference, folder, capsys):
    path, _, _ = quantized("f32")
    np.testing.assert_array_equal(logits(path, dtype="f32"), reference)  # the same weights
    np.testing.assert_allclose(logits(path), reference, rtol=0, atol=1e-5)  # GGUF matmuls sum in another order
    # and candle generate gives the same text from either
    args = ["--raw", "--temperature", "0", "--max-tokens", "8", "Hello world"]
    assert main(["generate", "--model", str(folder), *args]) == 0
    from_folder = capsys.readouterr().out
    assert main(["generate", "--model", str(path), *args]) == 0
    assert capsys.readouterr().out == from_folder


def test_llama3_rope_scaling_travels_as_rope_freqs(tmp_path):
    """tiny_llama3 (transformers' save_pretrained, Llama 3.1 rope): the scaling becomes llama.cpp's rope_freqs
    tensor; its 48-wide down-projection rows are not whole q8_0 blocks, so they stay f16."""
    folder = tmp_path / "tiny_llama3"
    shutil.copytree(FIXTURES / "tiny_llama3", folder)
    bpe_tokenizer().save(str(folder / "tokenizer.json"))  # 300 tokens for 96 embeddings: too many
    code, _, err = run_cli(str(folder), str(tmp_path / "out.gguf"), "--type", "q8_0")
    assert code == 1 and err == "candle quantize: error: the tokenizer has ids up to 299, past the model's 96 " \
                                "embeddings\n"
    char_level_tokenizer(96).save(str(folder / "tokenizer.json"))
    code, _, err = run_cli(str(folder), str(tmp_path / "out.gguf"), "--type", "q8_0")
    assert code == 0 and "note: f16 for the matrices whose rows are not whole q8_0 blocks of 32 values: " \
                         "blk.0.ffn_down.weight, blk.1.ffn_down.weight\n" in err
    file = c.load(str(tmp_path / "out.gguf"))
    assert file["rope_freqs.weight"].shape == (4,) and "llama.rope.scaling.type" not in file.metadata
    ids = np.load(FIXTURES / "tiny_llama3" / "reference.npz")["input_ids"].astype(np.uint32)
    assert run_cli(str(folder), str(tmp_path / "f32.gguf"), "--type", "f32")[0] == 0
    np.testing.assert_array_equal(logits(tmp_path / "f32.gguf", ids, "f32"), logits(folder, ids))


@pytest.mark.parametrize("name, arch", [("tiny_mistral", "llama"), ("tiny_qwen2", "qwen2"), ("tiny_qwen3", "qwen3")])
def test_mistral_and_qwen(tmp_path, name, arch):
    """Mistral (tied embeddings) is written as llama with its window (which llama.cpp ignores and candle reads
    back), Qwen2 (q/k/v biases, rows not permuted) as qwen2, Qwen3 (q/k norms, head_dim 16 over a hidden size
    of 32) as qwen3; their per-layer sliding windows are dropped, so the logits agree within the windows only
    (test_gguf_forms.py compares Mistral's whole sequences)."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    char_level_tokenizer(96).save(str(folder / "tokenizer.json"))
    code, _, err = run_cli(str(folder), str(tmp_path / "out.gguf"), "--type", "f32")
    assert code == 0 and ("ignores the sliding window" if arch == "llama" else "has no sliding window") in err
    file = c.load(str(tmp_path / "out.gguf"))
    assert file.metadata["general.architecture"] == arch and f"{arch}.block_count" in file.metadata
    assert ("output.weight" in file) == (name != "tiny_mistral") and ("blk.0.attn_q.bias" in file) == (arch == "qwen2")
    assert ("blk.0.attn_q_norm.weight" in file) == (arch == "qwen3")
    ids = np.load(FIXTURES / name / "reference.npz")["input_ids"][:, :4].astype(np.uint32)
    np.testing.assert_array_equal(logits(tmp_path / "out.gguf", ids, "f32"), logits(folder, ids))


def char_level_tokenizer(vocab_size: int) -> tokenizers.Tokenizer:
    """A byte-level BPE of byte-characters and one merge, for the fixtures' small vocabularies."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())[:vocab_size - 1]
    vocab = {ch: i for i, ch in enumerate(alphabet)} | {alphabet[0] + alphabet[1]: vocab_size - 1}
    tok = tokenizers.Tokenizer(models.BPE(vocab, [(alphabet[0], alphabet[1])]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


# ---- metadata and tokenizer ---------------------------------------------------------------------------

# GGUF value types
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
#: What llama.cpp reads from a llama GGUF, with the type it requires.
REQUIRED = {
    "general.architecture": STRING, "general.name": STRING, "general.file_type": UINT32,
    "general.quantization_version": UINT32, "llama.context_length": UINT32, "llama.embedding_length": UINT32,
    "llama.block_count": UINT32, "llama.feed_forward_length": UINT32, "llama.rope.dimension_count": UINT32,
    "llama.attention.head_count": UINT32, "llama.attention.head_count_kv": UINT32,
    "llama.attention.layer_norm_rms_epsilon": FLOAT32, "llama.rope.freq_base": FLOAT32, "llama.vocab_size": UINT32,
    "tokenizer.ggml.model": STRING, "tokenizer.ggml.pre": STRING, "tokenizer.ggml.tokens": ARRAY,
    "tokenizer.ggml.token_type": ARRAY, "tokenizer.ggml.merges": ARRAY, "tokenizer.ggml.bos_token_id": UINT32,
    "tokenizer.ggml.eos_token_id": UINT32, "tokenizer.ggml.unknown_token_id": UINT32,
    "tokenizer.ggml.padding_token_id": UINT32, "tokenizer.ggml.add_bos_token": BOOL,
    "tokenizer.chat_template": STRING,
}


def test_metadata_has_what_llama_cpp_reads(quantized, folder):
    path, _, _ = quantized("q8_0")
    meta = c.load(str(path)).metadata
    for key, value_type in REQUIRED.items():
        assert gguf_value_type(path, key) == value_type, key
    assert {k: meta[k] for k in ("general.architecture", "general.name", "general.file_type",
                                 "general.quantization_version")} == {
        "general.architecture": "llama", "general.name": "tiny-llama", "general.file_type": 7,
        "general.quantization_version": 2}
    assert [meta[f"llama.{k}"] for k in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                                         "rope.dimension_count", "attention.head_count", "attention.head_count_kv",
                                         "vocab_size")] == [128, 256, 2, 320, 64, 4, 2, 320]
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert meta["llama.rope.freq_base"] == 10000.0
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == 320
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] and types[:3] == [3, 3, 3]  # control
    assert tokens[300:] == [f"[PAD{i}]" for i in range(300, 320)] and set(types[300:]) == {5}  # unused
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert meta["tokenizer.ggml.merges"][0].count(" ") == 1
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"],
            meta["tokenizer.ggml.unknown_token_id"], meta["tokenizer.ggml.padding_token_id"]) == (1, 2, 0, 2)
    assert meta["tokenizer.ggml.add_bos_token"] is False and meta["tokenizer.chat_template"] == CHAT_TEMPLATE


def test_the_gguf_tokenizer_encodes_as_tokenizer_json(quantized, folder):
    path, _, _ = quantized("q8_0")
    ours, theirs = Tokenizer.from_pretrained(path), Tokenizer.from_folder(folder)
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text), text
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode_chat("Hi") == theirs.encode_chat("Hi")
    assert ours.stop_token_ids == theirs.stop_token_ids == {2}


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")  # as Llama 3's tokenizer.json writes it


@pytest.mark.parametrize("pre, name", [
    (pre_tokenizers.ByteLevel(add_prefix_space=False), "gpt-2"),
    (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                              pre_tokenizers.ByteLevel(add_prefix_space=False)]), "smollm"),
    (pre_tokenizers.Sequence([pre_tokenizers.Split(tokenizers.Regex(LLAMA3_SPLIT), "isolated"),
                              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), "llama-bpe"),
    (pre_tokenizers.Sequence([pre_tokenizers.Split(tokenizers.Regex(LLAMA3_SPLIT), "removed"),
                              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), "default"),
    (pre_tokenizers.Whitespace(), "default"),
])
def test_pre_tokenizers_get_llama_cpp_names(pre, name):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    assert pre_tokenizer_name(json.loads(tok.to_str())["pre_tokenizer"]) == name


def test_sentencepiece_vocabularies_become_llama_tokenizers(tmp_path):
    """A Llama 2-style tokenizer.json (BPE with byte fallback, made here from the SentencePiece GGUF fixture)
    becomes a "llama" vocabulary whose scores rank the merges: it tokenizes as transformers does."""
    spm = Tokenizer.from_gguf_metadata(c.load(str(FIXTURES / "spm_vocab.gguf")).metadata)
    folder = llama_folder(tmp_path / "spm", spm.inner, vocab_size=spm.vocab_size, hidden_size=32,
                          intermediate_size=32, num_attention_heads=2, num_key_value_heads=2)
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                              "unk_token": "<unk>", "add_bos_token": True}))
    assert run_cli(str(folder), str(tmp_path / "spm.gguf"), "--type", "q8_0")[0] == 0
    meta = c.load(str(tmp_path / "spm.gguf")).metadata
    assert meta["tokenizer.ggml.model"] == "llama" and "tokenizer.ggml.merges" not in meta
    assert meta["tokenizer.ggml.token_type"][:4] == [2, 3, 3, 6]  # unknown, control, control, byte
    assert meta["tokenizer.ggml.add_bos_token"] is True and meta["tokenizer.ggml.add_space_prefix"] is True
    ours = Tokenizer.from_pretrained(tmp_path / "spm.gguf")
    for text, ids, _ in spm_cases(spm):
        assert ours.encode(text) == ids, text


# ---- GGUF -> GGUF -------------------------------------------------------------------------------------

def test_requantizing_a_gguf_keeps_its_metadata(quantized, tmp_path, reference):
    source, _, _ = quantized("q8_0")
    code, stdout, _ = run_cli(str(source), str(tmp_path / "q4_0.gguf"), "--type", "Q4_0")
    assert code == 0 and "q4_0, 21 tensors (16 q4_0, 5 f32)" in stdout
    before, after = c.load(str(source)), c.load(str(tmp_path / "q4_0.gguf"))
    assert after.metadata == before.metadata | {"general.file_type": 2}
    assert gguf_value_type(tmp_path / "q4_0.gguf", "llama.block_count") == UINT32
    assert {after[n].ggml_dtype for n in after if after[n].rank == 2} == {"q4_0"}
    error = np.abs(logits(tmp_path / "q4_0.gguf") - reference).max() / np.abs(reference).max()
    assert error < TOLERANCES["q4_0"] * 1.5  # q8_0's error, then q4_0's
    # tensors already of the type are copied as they are
    assert run_cli(str(tmp_path / "q4_0.gguf"), str(tmp_path / "again.gguf"), "--type", "q4_0")[0] == 0
    assert (tmp_path / "again.gguf").read_bytes() == (tmp_path / "q4_0.gguf").read_bytes()


# ---- errors -------------------------------------------------------------------------------------------

def test_unknown_types_list_the_known_ones(folder, tmp_path):
    for name in ("q9_0", "q8k", "q8_1"):
        code, out, err = run_cli(str(folder), str(tmp_path / "x.gguf"), "--type", name)
        assert (code, out) == (1, "")
        assert err.startswith(f"candle quantize: error: unknown --type {name!r} (known: f32, f16, q4_0, ")
        known = err.split("(known: ")[1]
        assert "q6k" in known and "bf16" in known and "q8k" not in known and "q8_1" not in known
        assert err.count("\n") == 1
    assert not (tmp_path / "x.gguf").exists()


def test_errors_are_one_line(folder, tmp_path):
    out = str(tmp_path / "out.gguf")
    cases = [
        ([str(tmp_path / "missing"), out], "is not a file, a folder or a Hugging Face repo id"),
        ([str(FIXTURES / "tiny_bert" / "bert-mlm"), out], "model_type 'bert' is not a supported causal language "
                                                          "model (supported: llama, mistral, qwen2, qwen3, phi3, "
                                                          "gemma3_text, gpt2, falcon; text to text: t5)"),
        ([str(FIXTURES / "tiny_falcon_sequential"), out], "Falcon with sequential attention (parallel_attn: false) "
                                                          "has no GGUF form"),
        ([str(FIXTURES / "tiny_llama_dynamic"), out], "rope scaling 'dynamic' has no GGUF form"),
        ([str(folder), str(tmp_path / "nowhere" / "out.gguf")], "there is no folder"),
    ]
    empty = tmp_path / "empty"
    shutil.copytree(folder, empty, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
    cases.append(([str(empty), out], "no weights found"))
    other = tmp_path / "bloom.gguf"
    c.save({"w": c.zeros((2, 32))}, other, {"general.architecture": "bloom"}, format="gguf")
    cases.append(([str(other), out], "GGUF architecture 'bloom' is not supported (supported: llama, qwen2, qwen3, "
                                     "phi3, gemma3, gpt2, falcon)"))
    for argv, message in cases:
        code, stdout, err = run_cli(*argv, "--type", "q8_0")
        assert (code, stdout) == (1, ""), argv
        assert err.startswith("candle quantize: error: ") and message in err and err.count("\n") == 1, err
    assert not Path(out).exists()


def test_usage_errors_exit_with_status_2(folder):
    code, _, err = run_cli(str(folder), "--type", "q8_0")
    assert code == 2 and "candle quantize: error: the following arguments are required: OUTPUT" in err
    code, _, err = run_cli(str(folder), "out.gguf")
    assert code == 2 and "--type" in err


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["quantize", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    subcommands = argparse.ArgumentParser().add_subparsers()
    register(subcommands)
    for action in subcommands.choices["quantize"]._actions:
        assert action.help and " ".join(action.help.split()) in out
