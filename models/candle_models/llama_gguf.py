"""Llama-family GGUF files (llama.cpp's layout: its ``llama``, ``qwen2``,
``qwen3``, ``phi3`` and ``gemma3`` architectures) as a Hugging Face
checkpoint: the metadata as a config.json, the tensors under transformers'
names: the quantized matrices kept in their blocks (QTensors, multiplied as
they are), or dequantized to f32 as they are read.

llama.cpp's converter permutes the rows of attn_q/attn_k of ``llama``
models (Llama, Mistral, SmolLM2) so that each head's rotary pairs are
adjacent (its interleaved rope); we undo that, so one model and one rope
serve every format and the weights equal transformers' exactly. The other
architectures are not permuted. Its converter stores Gemma's norm weights
plus one (the multiplier Gemma's RMSNorm applies); they are read back minus
one, as transformers reads them.
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
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma3": "gemma3_text"}

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
#: Per architecture, the block names that differ: Phi-3's fused projections, Gemma's norms before and after
#: each half of the block (its ffn_norm is the one before the MLP).
ARCH_BLOCK_NAMES = {
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
    "gemma3": {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"},
}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def block_names(arch: str) -> dict:
    """llama.cpp's block tensor names -> transformers' (within a layer) for ``arch``."""
    return BLOCK_NAMES | ARCH_BLOCK_NAMES.get(arch, {})


def hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    """transformers' name for a llama.cpp tensor name (None for tensors the model does not read)."""
    match = _BLOCK_NAME.match(gguf_name)
    if match:
        layer, part, kind = match.groups()
        names = block_names(arch)
        return f"model.layers.{layer}.{names[part]}.{kind}" if part in names else None
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
    if arch == "phi3" and "rope_factors_long.weight" in names:
        raise ValueError("Phi-3's longrope scaling (rope_factors_long/short tensors) is not supported")
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
    if arch == "phi3" and key("attention.sliding_window", 0):  # llama.cpp ignores it; transformers slides
        cfg["sliding_window"] = key("attention.sliding_window")
    if arch == "gemma3":
        cfg |= _gemma3_keys(key, cfg)
    return cfg


def _gemma3_keys(key, cfg: dict) -> dict:
    """Gemma 3's keys as llama.cpp reads them: sliding layers where attention.sliding_window is set, in
    attention.sliding_window_pattern (a per-layer list, or n: every nth layer global, 6 by default),
    their rope base rope.freq_base_swa (10000 by default); queries scaled by 1/sqrt(head_dim), except
    for the 27B model (62 layers): 1/sqrt(hidden / heads)."""
    layers, window = cfg["num_hidden_layers"], key("attention.sliding_window", 0)
    pattern = key("attention.sliding_window_pattern", 6)
    if not window:
        sliding = [False] * layers
    elif isinstance(pattern, (list, tuple)):
        sliding = [bool(p) for p in pattern]
    else:
        sliding = [pattern == 0 or i % pattern < pattern - 1 for i in range(layers)]
    big = layers == 62
    return {
        "sliding_window": window or None,
        "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
        "rope_local_base_freq": key("rope.freq_base_swa", 10000.0),
        "query_pre_attn_scalar": cfg["hidden_size"] // cfg["num_attention_heads"] if big else cfg["head_dim"],
        "final_logit_softcapping": key("final_logit_softcapping", None),
        "hidden_activation": "gelu_pytorch_tanh",
    }


class GgufTensors(Mapping):
    """The tensors of a GGUF of ``arch`` under transformers' names, with llama.cpp's q/k
    row permutation undone when ``unpermute`` and Gemma's norms shifted back. Quantized matrices stay
    QTensors when ``quantized``, else are dequantized to f32 when read."""

    def __init__(self, file, arch: str, unpermute: bool, heads: int, kv_heads: int, quantized: bool = True):
        self._file = file
        self._names = {hf: g for g in file if (hf := hf_name(g, arch)) is not None}
        self._heads = {"q_proj": heads, "k_proj": kv_heads} if unpermute else {}
        self._norm_shift = arch == "gemma3"
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
        if self._norm_shift and proj.endswith("norm"):
            t = t - 1.0
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


def gguf_checkpoint(path: Path, quantized: bool = True, config_class=LlamaConfig) -> tuple:
    """The config (a ``config_class``) and the tensors of a Llama-family GGUF: quantized matrices
    kept as QTensors when ``quantized``, else dequantized (lazily) to f32."""
    file = c.load(str(path))
    names = set(file)
    cfg = config_dict(file.metadata, names)
    if "rope_freqs.weight" in names:  # llama.cpp's form of Llama 3's rope scaling: divisors per frequency
        factors = file["rope_freqs.weight"]
        factors = factors.dequantize() if isinstance(factors, QTensor) else factors
        cfg["rope_scaling"] = {"rope_type": "freq_factors", "factors": factors.numpy().tolist()}
    config = config_class.from_dict(cfg)
    permuted = cfg["model_type"] == "llama"  # the converter permutes q/k of its llama architecture only
    if quantized and permuted:  # keep llama.cpp's q/k row order (no copy of the blocks) and rotate pairs
        config = dataclasses.replace(config, rope_interleaved=True)
    return config, GgufTensors(file, file.metadata["general.architecture"], permuted and not quantized,
                               config.num_attention_heads, config.num_key_value_heads, quantized)


def gguf_model_type(path: Path) -> str:
    """The config.json model_type of a GGUF's general.architecture; a ValueError listing the
    architectures read here otherwise."""
    arch = c.load(str(path)).metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not supported (supported: "
                         f"{', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[arch]
