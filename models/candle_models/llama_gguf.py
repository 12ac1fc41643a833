"""Llama-family GGUF files (llama.cpp's ``llama``, ``qwen2``, ``qwen3``,
``phi3`` and ``gemma3`` architectures) as a Hugging Face checkpoint: the
metadata as a config.json, the tensors under transformers' names (read
through :mod:`.gguf_models`).

llama.cpp's converter permutes the rows of attn_q/attn_k of ``llama``
models (Llama, Mistral, SmolLM2) so that each head's rotary pairs are
adjacent (its interleaved rope); dequantized, we undo that, so the weights
equal transformers' exactly; quantized, the rope rotates pairs. The other
architectures are not permuted. Its converter stores Gemma's norm weights
plus one (the multiplier Gemma's RMSNorm applies); they are read back minus
one, as transformers reads them.
"""

from __future__ import annotations

from collections.abc import Mapping

import candle_api as c
from candle_api.quantized import QTensor

from .gguf_models import GgufTensors, TensorNames, gguf_key

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


def tensor_names(arch: str):
    """llama.cpp's and transformers' tensor names of ``arch``."""
    return TensorNames("model.layers", BLOCK_NAMES | ARCH_BLOCK_NAMES.get(arch, {}), GLOBAL_NAMES)


def config_dict(metadata: Mapping, names) -> dict:
    """A GGUF's metadata (and which tensors it has) as a config.json."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"GGUF architecture {arch!r} is not a Llama-family model (supported: "
                         f"{', '.join(ARCHITECTURES)})")

    key = gguf_key(metadata, arch)
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
    if arch in ("llama", "phi3") and key("attention.sliding_window", 0):
        # llama.cpp ignores it for these architectures; transformers (and candle) slide the window. A llama
        # file with one is Mistral's (candle quantize writes it; llama.cpp's converter leaves it out).
        cfg["sliding_window"] = key("attention.sliding_window")
        cfg["model_type"] = "mistral" if arch == "llama" else arch
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


def _unpermute(t: c.Tensor, heads: int) -> c.Tensor:
    """llama.cpp stores row (head, j, half) of transformers' (head, half, j): swap them back."""
    rows = t.shape[0]
    return t.reshape((heads, rows // heads // 2, 2) + t.shape[1:]).transpose(1, 2).reshape(t.shape)


def read_gguf(file, quantized: bool = True) -> tuple:
    """(config.json as a dict, GgufTensors) of a Llama-family GGUF. A quantized ``llama`` file keeps
    llama.cpp's q/k row order (no copy of the blocks) and its config says to rotate interleaved pairs
    (``rope_interleaved``); dequantized, the rows are put back in transformers' order."""
    names = set(file)
    arch = file.metadata["general.architecture"]
    cfg = config_dict(file.metadata, names)
    if "rope_freqs.weight" in names:  # llama.cpp's form of Llama 3's rope scaling: divisors per frequency
        factors = file["rope_freqs.weight"]
        factors = factors.dequantize() if isinstance(factors, QTensor) else factors
        cfg["rope_scaling"] = {"rope_type": "freq_factors", "factors": factors.numpy().tolist()}
    permuted = arch == "llama"  # the converter permutes q/k of its llama architecture only
    cfg["rope_interleaved"] = permuted and quantized
    heads = {"q_proj": cfg["num_attention_heads"], "k_proj": cfg["num_key_value_heads"]}

    def transform(name: str, t):
        proj = name.split(".")[-2]
        if permuted and not quantized and proj in heads:
            t = _unpermute(t, heads[proj])
        if arch == "gemma3" and proj.endswith("norm"):  # stored as the multiplier 1 + w
            t = t - 1.0
        return t

    return cfg, GgufTensors(file, tensor_names(arch).of(file), quantized, transform)
