"""Llama-family GGUF files (llama.cpp's layout) as a Hugging Face checkpoint:
the metadata as a config.json, the tensors under transformers' names: the
quantized matrices kept in their blocks (QTensors, multiplied as they are),
or dequantized to f32 as they are read.

llama.cpp's converter permutes the rows of attn_q/attn_k of ``llama``
models (Llama, Mistral, SmolLM2) so that each head's rotary pairs are
adjacent (its interleaved rope); we undo that, so one model and one rope
serve every format and the weights equal transformers' exactly. Qwen2 and
Qwen3 files are not permuted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import candle_api as c
from candle_api.errors import FormatError
from candle_api.quantized import QTensor

from .llama import LlamaConfig

#: general.architecture -> config.json model_type (llama.cpp writes Mistral and SmolLM2 as llama).
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}

#: llama.cpp's tensor names -> transformers' (read here, written by gguf_export).
GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str) -> str | None:
    """transformers' name for a llama.cpp tensor name (None for tensors the model does not read)."""
    match = _BLOCK_NAME.match(gguf_name)
    if match:
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{BLOCK_NAMES[part]}.{kind}" if part in BLOCK_NAMES else None
    stem, _, kind = gguf_name.rpartition(".")
    return f"{GLOBAL_NAMES[stem]}.{kind}" if stem in GLOBAL_NAMES else None


def find_gguf(path: Path) -> Path | None:
    """The GGUF file ``path`` names, or the one a folder without config.json holds; None otherwise."""
    path = Path(path)
    if path.is_file():
        with open(path, "rb") as f:
            return path if f.read(4) == b"GGUF" else None
    if (path / "config.json").exists():
        return None
    found = sorted(path.glob("*.gguf"))
    if len(found) > 1:
        raise FormatError(path, None, f"several GGUF files ({', '.join(p.name for p in found)}): name one")
    return found[0] if found else None


def config_dict(metadata: Mapping, names) -> dict:
    """A GGUF's metadata (and which tensors it has) as a config.json."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"GGUF architecture {arch!r} is not a Llama-family model (supported: "
                         f"{', '.join(ARCHITECTURES)})")

    def key(name, default=KeyError):
        value = metadata.get(f"{arch}.{name}", default)
        if value is KeyError:
            raise ValueError(f"the GGUF metadata has no {arch}.{name}")
        return value

    heads = key("attention.head_count")
    head_dim = key("attention.key_length", key("embedding_length") // heads)
    if key("rope.dimension_count", head_dim) != head_dim:
        raise ValueError("partial rotary embeddings (rope.dimension_count < head_dim) are not supported")
    cfg = {
        "model_type": ARCHITECTURES[arch],
        "vocab_size": key("vocab_size", len(metadata.get("tokenizer.ggml.tokens", ()))),
        "hidden_size": key("embedding_length"),
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv", heads),
        "head_dim": head_dim,
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
        "rope_theta": key("rope.freq_base", 10000.0),
        "max_position_embeddings": key("context_length", 4096),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_output.bias" in names,
        "mlp_bias": "blk.0.ffn_down.bias" in names,
    }
    scaling = key("rope.scaling.type", "none")
    if scaling == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": key("rope.scaling.factor")}
    elif scaling != "none":
        raise ValueError(f"GGUF rope scaling {scaling!r} is not supported (linear, or a rope_freqs tensor)")
    return cfg


class GgufTensors(Mapping):
    """The tensors of a GGUF under transformers' names, with llama.cpp's q/k
    row permutation undone when ``unpermute``. Quantized matrices stay
    QTensors when ``quantized``, else are dequantized to f32 when read."""

    def __init__(self, file, unpermute: bool, heads: int, kv_heads: int, quantized: bool = True):
        self._file = file
        self._names = {hf: g for g in file if (hf := hf_name(g)) is not None}
        self._heads = {"q_proj": heads, "k_proj": kv_heads} if unpermute else {}
        self._quantized = quantized
        self._last = (None, None)  # VarBuilder reads a tensor twice (shape, then values): convert once

    def __getitem__(self, name: str):
        if self._last[0] == name:
            return self._last[1]
        t = self._file[self._names[name]]
        if isinstance(t, QTensor) and not (self._quantized and t.rank == 2):
            t = t.dequantize()
        elif not isinstance(t, QTensor):
            t = t.to_dtype("f32")
        proj = name.split(".")[-2]
        if proj in self._heads:
            t = _unpermute(t, self._heads[proj])
        self._last = (name, t)
        return t

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _unpermute(t: c.Tensor, heads: int) -> c.Tensor:
    """llama.cpp stores row (head, j, half) of transformers' (head, half, j): swap them back."""
    rows = t.shape[0]
    return t.reshape((heads, rows // heads // 2, 2) + t.shape[1:]).transpose(1, 2).reshape(t.shape)


def gguf_checkpoint(path: Path, quantized: bool = True) -> tuple[LlamaConfig, GgufTensors]:
    """The config and the tensors of a Llama-family GGUF: quantized matrices
    kept as QTensors when ``quantized``, else dequantized (lazily) to f32."""
    file = c.load(str(path))
    names = set(file)
    cfg = config_dict(file.metadata, names)
    if "rope_freqs.weight" in names:  # llama.cpp's form of Llama 3's rope scaling: divisors per frequency
        factors = file["rope_freqs.weight"]
        factors = factors.dequantize() if isinstance(factors, QTensor) else factors
        cfg["rope_scaling"] = {"rope_type": "freq_factors", "factors": factors.numpy().tolist()}
    config = LlamaConfig.from_dict(cfg)
    permuted = cfg["model_type"] == "llama"  # the converter permutes q/k of its llama architecture only
    if quantized and permuted:  # keep llama.cpp's q/k row order (no copy of the blocks) and rotate pairs
        config = dataclasses.replace(config, rope_interleaved=True)
    return config, GgufTensors(file, permuted and not quantized, config.num_attention_heads,
                               config.num_key_value_heads, quantized)
