"""Checkpoints in llama.cpp's GGUF layout: the metadata llama.cpp reads
(hyper-parameters from config.json, the vocabulary from tokenizer.json and
tokenizer_config.json), its tensor names and the layouts it expects, as a
:class:`GgufForm` per model: the Llama family's here (llama, with the q/k row
order of its rope, qwen2, qwen3, phi3, gemma3), GPT-2's and Falcon's in their
modules. The inverse of the ``read_gguf`` functions, which read such files
back (:mod:`.gguf_models`).

The keys, value types and vocabulary rules are those of llama.cpp's
converter (convert_hf_to_gguf.py and gguf-py), which llama.cpp's loader
expects: it refuses a key stored with another type than it reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from candle_api.quantized import GGML_TYPES, GgmlType

from .gguf_vocab import PRE_TOKENIZERS
from .llama import LlamaConfig
from .llama_gguf import tensor_names
from .rope import rope_inv_freq
from .tokenizer import Tokenizer, read_json_object, token_text

#: config.json model_type -> general.architecture of the Llama family (llama.cpp writes Mistral as llama).
LLAMA_ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
                       "gemma3_text": "gemma3"}
#: config.json model_type -> general.architecture, for every model candle quantize writes.
GGUF_ARCHITECTURES = LLAMA_ARCHITECTURES | {"gpt2": "gpt2", "falcon": "falcon"}

#: general.file_type, llama.cpp's llama_ftype, of a model whose matrices are (mostly) of a GGML type, by
#: ggml type id. A file of one K-quant is what llama.cpp calls its _M variant. Q8_1 and Q8_K hold only
#: activations: llama.cpp has no file type for them.
FILE_TYPES = {0: 0, 1: 1, 2: 2, 3: 3, 6: 8, 7: 9, 8: 7, 10: 10, 11: 12, 12: 15, 13: 17, 14: 18,
              20: 25, 23: 30, 30: 32, 39: 38}  # 20 IQ4_NL, 23 IQ4_XS, 30 BF16, 39 MXFP4
QUANTIZATION_VERSION = 2

# llama.cpp's token types (llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

#: Scalar integer keys gguf-py stores as INT32; llama.cpp reads every other integer key as UINT32.
_INT32_KEYS = {"general.sampling.top_k", "general.sampling.penalty_last_n", "general.sampling.mirostat"}



@dataclass
class GgufForm:
    """How a model is written in llama.cpp's GGUF layout."""

    arch: str  # general.architecture
    keys: dict  # the hyper-parameters, {arch}.* keys without the prefix
    name: Callable  # transformers' tensor name -> llama.cpp's (None: llama.cpp has no place for it)
    convert: Callable = lambda name, values: values  # by llama.cpp's name: transformers' values -> its layout
    shape: Callable = lambda name, shape: shape  # the shape convert gives
    extra: dict = field(default_factory=dict)  # tensors of llama.cpp's own: {name: values}
    tied: bool = True  # the output layer is the token embedding: no output.weight
    notes: list = field(default_factory=list)  # where llama.cpp will not run the model as candle does


def output_types() -> dict[str, GgmlType]:
    """The GGML types a model file can be written in: those candle-api quantizes to that llama.cpp has a file
    type for."""
    return {name: t for name, t in GGML_TYPES.items() if t.type_id in FILE_TYPES}


# ---- tensors ------------------------------------------------------------------------------------

def permute_qk(values: np.ndarray, heads: int) -> np.ndarray:
    """transformers' q/k rows (head, half, j) in llama.cpp's order (head, j, half), which its interleaved
    rope rotates as transformers' rotates the halves (llama_gguf's _unpermute undoes it)."""
    rows = values.shape[0]
    return values.reshape((heads, 2, rows // heads // 2) + values.shape[1:]).swapaxes(1, 2).reshape(values.shape)


def rope_freqs(config: LlamaConfig) -> np.ndarray | None:
    """llama.cpp's form of Llama 3.1's rope scaling: a rope_freqs tensor of per-frequency divisors."""
    if (config.rope_scaling or {}).get("rope_type") != "llama3":
        return None
    plain = rope_inv_freq(config.head_dim, config.rope_theta, None)
    return (plain.astype(np.float64) / rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
            ).astype(np.float32)


# ---- metadata -----------------------------------------------------------------------------------

def llama_form(config: LlamaConfig) -> GgufForm:
    """The GGUF form of a Llama-family model (Gemma 3 included)."""
    arch = LLAMA_ARCHITECTURES.get(config.model_type)
    if arch is None:
        raise ValueError(f"model_type {config.model_type!r} has no GGUF form here (candle quantize writes "
                         f"{', '.join(GGUF_ARCHITECTURES)})")
    keys, notes = _llama_keys(config), []
    windows = sorted({w for w in config.sliding_windows if w is not None})
    if arch == "phi3":  # as llama.cpp's converter writes Phi-3 (0: no window)
        keys["rope.scaling.original_context_length"] = config.max_position_embeddings
        keys["attention.sliding_window"] = 0
    if arch == "gemma3":
        keys |= _gemma3_hyperparameters(config)
    elif arch in ("llama", "phi3") and len(windows) == 1 and None not in config.sliding_windows:
        keys["attention.sliding_window"] = windows[0]
        notes.append(f"llama.cpp's {arch} architecture ignores the sliding window (attention.sliding_window "
                     f"{windows[0]}): it attends to the whole context there; candle reads the window back")
    elif windows:
        notes.append(f"llama.cpp's {arch} architecture has no sliding window: the GGUF attends to the whole "
                     f"context (config.json slides windows of {', '.join(map(str, windows))} positions)")
    names = tensor_names(arch)
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads} if arch == "llama" else {}

    def convert(name: str, values: np.ndarray) -> np.ndarray:
        part = name.split(".")[-2]
        if part in heads:
            return permute_qk(values, heads[part])
        if arch == "gemma3" and part.endswith("norm"):  # llama.cpp's Gemma norms hold the multiplier 1 + w
            return (values + 1.0).astype(np.float32)
        return values

    freqs = rope_freqs(config)
    return GgufForm(arch, keys, names.gguf, convert, extra={} if freqs is None else {"rope_freqs.weight": freqs},
                    tied=config.tie_word_embeddings, notes=notes)


def _llama_keys(config: LlamaConfig) -> dict:
    keys = {
        "context_length": config.max_position_embeddings,
        "embedding_length": config.hidden_size,
        "block_count": config.num_hidden_layers,
        "feed_forward_length": config.intermediate_size,
        "rope.dimension_count": config.head_dim,
        "attention.head_count": config.num_attention_heads,
        "attention.head_count_kv": config.num_key_value_heads,
        "attention.layer_norm_rms_epsilon": float(config.rms_norm_eps),
        "rope.freq_base": float(config.rope_theta),
        "vocab_size": config.vocab_size,
    }
    if config.head_dim * config.num_attention_heads != config.hidden_size:  # llama.cpp's default head size
        keys["attention.key_length"] = keys["attention.value_length"] = config.head_dim
    scaling = (config.rope_scaling or {}).get("rope_type")
    if scaling == "linear":
        keys["rope.scaling.type"] = "linear"
        keys["rope.scaling.factor"] = float(config.rope_scaling["factor"])
    elif scaling not in (None, "llama3"):  # llama3 travels as the rope_freqs tensor
        raise ValueError(f"rope scaling {scaling!r} has no GGUF form candle writes (supported: linear, llama3)")
    return keys


def _gemma3_hyperparameters(config) -> dict:
    """Gemma 3's keys as llama.cpp's converter writes them, and the per-layer pattern where it is not
    llama.cpp's default (every 6th layer global); llama.cpp scales queries by 1/sqrt(head_dim) (1/sqrt(hidden /
    heads) for 62 layers), so another query_pre_attn_scalar has no GGUF form."""
    layers = config.num_hidden_layers
    expected = config.hidden_size // config.num_attention_heads if layers == 62 else config.head_dim
    if config.query_pre_attn_scalar != expected:
        raise ValueError(f"query_pre_attn_scalar {config.query_pre_attn_scalar:g} has no GGUF form: llama.cpp "
                         f"scales Gemma 3's queries by 1/sqrt({expected})")
    if config.rope_local_scaling is not None:
        raise ValueError("a rope scaling of Gemma 3's sliding layers has no GGUF form")
    keys = {"rope.freq_base_swa": float(config.rope_local_theta)}
    windows = set(config.sliding_windows) - {None}
    if len(windows) > 1:
        raise ValueError("Gemma 3 layers with different sliding windows have no GGUF form")
    if windows:
        keys["attention.sliding_window"] = windows.pop()
        sliding = [w is not None for w in config.sliding_windows]
        if sliding != [i % 6 < 5 for i in range(layers)]:
            keys["attention.sliding_window_pattern"] = sliding
    if config.final_logit_softcapping:
        keys["final_logit_softcapping"] = float(config.final_logit_softcapping)
    return keys


def gguf_form(config) -> GgufForm:
    """The GGUF form of a model's config (any family candle quantize writes)."""
    from . import falcon, gpt2

    if isinstance(config, LlamaConfig):
        return llama_form(config)
    if isinstance(config, gpt2.GPT2Config):
        return gpt2.gguf_form(config)
    if isinstance(config, falcon.FalconConfig):
        return falcon.gguf_form(config)
    raise ValueError(f"{type(config).__name__} has no GGUF form here (candle quantize writes "
                     f"{', '.join(GGUF_ARCHITECTURES)})")


def tokenizer_metadata(folder: Path, vocab_size: int) -> dict:
    """The ``tokenizer.*`` keys of a model folder: a byte-level BPE vocabulary as llama.cpp's "gpt2" model,
    a SentencePiece-style one (BPE with byte fallback) as its "llama" model."""
    tok = Tokenizer.from_folder(folder)
    spec = json.loads(tok.inner.to_str())
    bpe = spec["model"]
    if bpe.get("type") != "BPE":
        raise ValueError(f"{folder / 'tokenizer.json'}: a {bpe.get('type')} tokenizer has no GGUF form candle "
                         "writes (byte-level BPE, or BPE with byte fallback as in Llama 2)")
    spm = bool(bpe.get("byte_fallback"))
    vocab = tok.inner.get_vocab(with_added_tokens=True)
    if max(vocab.values()) >= vocab_size:
        raise ValueError(f"the tokenizer has ids up to {max(vocab.values())}, past the model's {vocab_size} "
                         "embeddings")
    tokens, types = _vocabulary(tok, vocab, vocab_size, spm)
    if spm and bpe.get("unk_token") in vocab:
        types[vocab[bpe["unk_token"]]] = UNKNOWN
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in bpe.get("merges", ())]
    meta = {"tokenizer.ggml.model": "llama" if spm else "gpt2"}
    if not spm:
        meta["tokenizer.ggml.pre"] = pre_tokenizer_name(spec.get("pre_tokenizer"))
    meta |= {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    if spm:
        meta["tokenizer.ggml.scores"] = np.asarray(_scores(tokens, merges), np.float32)
    else:
        meta["tokenizer.ggml.merges"] = [" ".join(m) for m in merges]
    meta |= _special_tokens(folder, tok, vocab)
    first = tok.inner.encode("a", add_special_tokens=False).tokens
    meta["tokenizer.ggml.add_space_prefix"] = bool(first) and first[0].startswith(("\u2581", "\u0120"))
    if tok.chat_template:
        meta["tokenizer.chat_template"] = tok.chat_template
    return meta


def _vocabulary(tok: Tokenizer, vocab: dict, vocab_size: int, spm: bool) -> tuple[list, list]:
    """Tokens by id and their types; ids the tokenizer lacks up to vocab_size are unused [PAD<id>] tokens."""
    tokens, types = [f"[PAD{i}]" for i in range(vocab_size)], [UNUSED] * vocab_size
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = BYTE if spm and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text) else NORMAL
    for i, added in tok.inner.get_added_tokens_decoder().items():
        # Some models leave <|...|> tokens unmarked: llama.cpp's converter makes them control tokens all the same.
        special = added.special or (added.content.startswith("<|") and added.content.endswith("|>"))
        types[i] = CONTROL if special else USER_DEFINED
    return tokens, types


def _scores(tokens: list, merges: list) -> list[float]:
    """SentencePiece scores from BPE merge ranks: llama.cpp's "llama" tokenizer merges the adjacent pair
    whose token scores highest, so the token of the first merge scores highest; tokens no merge makes
    (characters, bytes, special tokens) score below all."""
    rank: dict[str, int] = {}
    for r, (left, right) in enumerate(merges):
        rank.setdefault(left + right, r)
    return [-float(rank.get(t, len(merges))) for t in tokens]


def _special_tokens(folder: Path, tok: Tokenizer, vocab: dict) -> dict:
    """bos/eos/unknown/padding ids (from tokenizer_config.json, else config.json) and whether the tokenizer
    adds bos/eos (tokenizer_config.json's add_*_token, else what tokenizer.json's post-processor does)."""
    tok_config, config = read_json_object(folder / "tokenizer_config.json"), read_json_object(folder / "config.json")
    meta = {}
    for key, field in (("bos", "bos"), ("eos", "eos"), ("unknown", "unk"), ("padding", "pad")):
        found = vocab.get(token_text(tok_config.get(f"{field}_token")))
        if found is None and isinstance(config.get(f"{field}_token_id"), int):
            found = config[f"{field}_token_id"]
        if found is not None:
            meta[f"tokenizer.ggml.{key}_token_id"] = found
    ids = tok.inner.encode("a").ids
    for key in ("bos", "eos"):
        given = tok_config.get(f"add_{key}_token")
        token = meta.get(f"tokenizer.ggml.{key}_token_id")
        adds = given if isinstance(given, bool) else token is not None and ids[0 if key == "bos" else -1] == token
        meta[f"tokenizer.ggml.add_{key}_token"] = adds
    return meta


def pre_tokenizer_name(pre: dict | None) -> str:
    """llama.cpp's name (tokenizer.ggml.pre) for the way a tokenizer.json splits text before byte-level BPE,
    from its regexes; "default", llama.cpp's fallback, when they are not ones it names."""
    names = {PRE_TOKENIZERS[name]: name for name in ("gpt-2", "smollm", "llama-bpe", "qwen2")}
    return names.get(_splits(pre), "default")


def _splits(pre: dict | None) -> tuple | None:
    """The regexes a tokenizer.json pre-tokenizer splits with, in order (None for other pre-tokenizers)."""
    pre = pre or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    regexes = []
    for step in steps:
        kind = step.get("type")
        if kind == "Split" and "Regex" in step.get("pattern", {}) and step.get("behavior") == "Isolated":
            regexes.append(step["pattern"]["Regex"])
        elif kind == "Digits" and step.get("individual_digits"):
            regexes.append(r"\p{N}")
        elif kind == "ByteLevel":
            if step.get("use_regex", True):
                regexes += PRE_TOKENIZERS["gpt-2"]
        else:
            return None
    return tuple(regexes)


def model_metadata(folder: Path, form: GgufForm, vocab_size: int, ggml_type: GgmlType, name: str) -> dict:
    """Every key of the GGUF of a model folder written with matrices of ``ggml_type``."""
    meta = {"general.architecture": form.arch, "general.name": name,
            "general.file_type": FILE_TYPES[ggml_type.type_id], "general.quantization_version": QUANTIZATION_VERSION}
    keys = {f"{form.arch}.{key}": value for key, value in form.keys.items()}
    return meta | keys | tokenizer_metadata(folder, vocab_size)


def llama_cpp_types(metadata: dict) -> dict:
    """``metadata`` with the value types llama.cpp checks: candle's GGUF writer stores a Python int as
    INT32 (and reads every integer back as a Python int), llama.cpp wants UINT32 integer keys."""
    return {key: np.uint32(value) if type(value) is int and key not in _INT32_KEYS and 0 <= value < 1 << 32
            else value for key, value in metadata.items()}
