"""Falcon, as transformers' ``FalconForCausalLM`` with rotary embeddings: one
fused query_key_value matrix laid out in one of three ways (multi-head,
multi-query as Falcon-7B, or grouped as the "new decoder architecture" of
Falcon-40B/180B), attention and MLP side by side on the same normalized
input (``parallel_attn``; one LayerNorm for both, or one each) or one after
the other, a GELU MLP and the output layer tied to the embeddings.

It takes the Llama family's calls and ``KVCache``, so ``generate_ids`` and
``candle generate`` run it. ALiBi variants are refused by name. Its GGUF form
is llama.cpp's ``falcon`` architecture (``read_gguf``; written by
gguf_export): parallel attention, no biases, the fused projection's rows
reordered as all query heads, then the key heads, then the value heads
(llama.cpp's "jploski" layout)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn

from .decoder import DecoderLM, KVCache, causal_attention, finish
from .gguf_models import GgufTensors, TensorNames, gguf_key, vocab_size
from .llama import TransposedLinear, embedding_layer
from .rope import RotaryEmbedding


@dataclass(frozen=True)
class FalconConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    layout: str  # "grouped" (new decoder architecture), "multi_query" or "multi_head"
    parallel_attn: bool
    two_norms: bool  # parallel attention with a LayerNorm for each branch
    ffn_hidden_size: int
    layer_norm_epsilon: float
    bias: bool
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_layout: str = "transformers"  # or "llama.cpp": the fused rows as all queries, then keys, then values

    @classmethod
    def from_dict(cls, cfg: dict) -> "FalconConfig":
        if cfg.get("model_type", "falcon") != "falcon":
            raise ValueError(f"model_type {cfg.get('model_type')!r} is not Falcon")
        if cfg.get("alibi"):
            raise ValueError("Falcon with ALiBi positions (alibi: true) is not supported, only rotary embeddings")
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise ValueError(f"rope type {kind!r} is not supported for Falcon (supported: default)")
        if cfg.get("activation", "gelu") != "gelu":
            raise ValueError(f"activation {cfg['activation']!r} is not supported (Falcon uses gelu)")
        try:
            heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
            new_arch = cfg.get("new_decoder_architecture", False)
            layout = "grouped" if new_arch else ("multi_query" if cfg.get("multi_query", True) else "multi_head")
            kv_heads = {"grouped": cfg.get("num_kv_heads") or heads, "multi_query": 1, "multi_head": heads}[layout]
            parallel = cfg.get("parallel_attn", True)
            return cls(vocab_size=cfg["vocab_size"], hidden_size=hidden, num_hidden_layers=cfg["num_hidden_layers"],
                       num_attention_heads=heads, num_key_value_heads=kv_heads, layout=layout,
                       parallel_attn=parallel or new_arch,
                       two_norms=new_arch and (cfg.get("num_ln_in_parallel_attn") or 2) == 2,
                       ffn_hidden_size=cfg.get("ffn_hidden_size") or 4 * hidden,
                       layer_norm_epsilon=cfg.get("layer_norm_epsilon", 1e-5), bias=cfg.get("bias", False),
                       rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
                       max_position_embeddings=cfg.get("max_position_embeddings", 2048),
                       tie_word_embeddings=cfg.get("tie_word_embeddings", True),
                       qkv_layout=cfg.get("qkv_layout", "transformers"))
        except KeyError as exc:
            raise ValueError(f"the config has no {exc.args[0]!r}") from None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def context_length(self) -> int:
        return self.max_position_embeddings


class FalconAttention(nn.Module):
    def __init__(self, config: FalconConfig, vb: nn.VarBuilder):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.layout = "llama.cpp" if config.qkv_layout == "llama.cpp" else config.layout
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.query_key_value = TransposedLinear(vb.pp("query_key_value"), config.hidden_size, (width,), config.bias)
        self.dense = TransposedLinear(vb.pp("dense"), config.hidden_size, (config.hidden_size,), config.bias)

    def _split(self, qkv: c.Tensor) -> tuple:
        """(b, heads or kv_heads, t, d) queries, keys and values from the fused projection's layout."""
        b, t, _ = qkv.shape
        h, kvh, d = self.heads, self.kv_heads, self.head_dim
        if self.layout == "llama.cpp":  # the query heads, then the key heads, then the value heads
            heads = qkv.reshape(b, t, h + 2 * kvh, d).transpose(1, 2)
            return heads.narrow(1, 0, h), heads.narrow(1, h, kvh), heads.narrow(1, h + kvh, kvh)
        if self.layout == "multi_head":  # per head: its query, key and value
            parts = qkv.reshape(b, t, h, 3, d)
            return tuple(parts.narrow(3, i, 1).squeeze(3).transpose(1, 2) for i in range(3))
        # per group of h / kvh query heads: the queries, then the group's key and value (multi_query: one group)
        g = h // kvh
        parts = qkv.reshape(b, t, kvh, g + 2, d)
        q = parts.narrow(3, 0, g).reshape(b, t, h, d).transpose(1, 2)
        return q, parts.narrow(3, g, 1).squeeze(3).transpose(1, 2), parts.narrow(3, g + 1, 1).squeeze(3).transpose(1, 2)

    def forward(self, x: c.Tensor, cos, sin, cache: KVCache | None, layer: int) -> c.Tensor:
        b, t, _ = x.shape
        q, k, v = self._split(self.query_key_value(x))
        q, k = F.rope(q.contiguous(), cos, sin), F.rope(k.contiguous(), cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        y = causal_attention(q, k, v, cache, enable_gqa=self.kv_heads != self.heads)
        return self.dense(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class FalconDecoderLayer(nn.Module):
    def __init__(self, config: FalconConfig, vb: nn.VarBuilder):
        super().__init__()
        eps, hidden = config.layer_norm_epsilon, config.hidden_size
        self.parallel = config.parallel_attn
        self.self_attention = FalconAttention(config, vb.pp("self_attention"))
        self.up = TransposedLinear(vb.pp("mlp").pp("dense_h_to_4h"), hidden, (config.ffn_hidden_size,), config.bias)
        self.down = TransposedLinear(vb.pp("mlp").pp("dense_4h_to_h"), config.ffn_hidden_size, (hidden,), config.bias)
        if config.two_norms:
            self.ln_attn = nn.LayerNorm(hidden, eps, vb=vb.pp("ln_attn"))
            self.ln_mlp = nn.LayerNorm(hidden, eps, vb=vb.pp("ln_mlp"))
        else:
            self.ln_attn = self.ln_mlp = nn.LayerNorm(hidden, eps, vb=vb.pp("input_layernorm"))
            if not self.parallel:
                self.ln_mlp = nn.LayerNorm(hidden, eps, vb=vb.pp("post_attention_layernorm"))

    def forward(self, x, cos, sin, cache, layer):
        attn = self.self_attention(self.ln_attn(x), cos, sin, cache, layer)
        if not self.parallel:
            x = x + attn
        mlp = self.down(F.gelu_erf(self.up(self.ln_mlp(x))))
        return x + attn + mlp if self.parallel else x + mlp


class FalconForCausalLM(DecoderLM):
    config_class = FalconConfig

    def __init__(self, config: FalconConfig, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        tvb = vb.pp("transformer")
        self.word_embeddings = embedding_layer(tvb.pp("word_embeddings"), config.vocab_size, config.hidden_size)
        layers = []
        for i in range(config.num_hidden_layers):
            layers.append(FalconDecoderLayer(config, tvb.pp("h").pp(i)))
            if progress is not None:
                progress.update()
        self.h = nn.ModuleList(layers)
        self.ln_f = nn.LayerNorm(config.hidden_size, config.layer_norm_epsilon, vb=tvb.pp("ln_f"))
        head = tvb.pp("word_embeddings") if config.tie_word_embeddings else vb.pp("lm_head")
        self.lm_head = TransposedLinear(head, config.hidden_size, (config.vocab_size,), False)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, None, config.max_position_embeddings,
                                      vb.dtype, vb.device)

    def _anchor(self) -> c.Tensor:
        return self.ln_f.weight

    def forward(self, input_ids, cache: KVCache | None = None, last_only: bool = False) -> c.Tensor:
        ids, positions = self.start(input_ids, cache)
        cos, sin = positions.rope(self.rotary)
        x = self.word_embeddings(ids)
        for i, layer in enumerate(self.h):
            x = layer(x, cos, sin, cache, i)
        return self.lm_head(self.ln_f(finish(x, cache, positions.length, last_only)))


def gguf_names(two_norms: bool) -> TensorNames:
    """llama.cpp's tensor names (its falcon architecture) and transformers': with a LayerNorm per branch
    (Falcon-40B), attn_norm is the MLP's (ln_mlp) and attn_norm_2 the attention's (ln_attn)."""
    norms = {"attn_norm": "ln_mlp", "attn_norm_2": "ln_attn"} if two_norms else {"attn_norm": "input_layernorm"}
    return TensorNames("transformer.h", norms | {"attn_qkv": "self_attention.query_key_value",
                                                 "attn_output": "self_attention.dense",
                                                 "ffn_up": "mlp.dense_h_to_4h", "ffn_down": "mlp.dense_4h_to_h"},
                       {"token_embd": "transformer.word_embeddings", "output_norm": "transformer.ln_f",
                        "output": "lm_head"})


def read_gguf(file, quantized: bool = True) -> tuple:
    """(config.json as a dict, tensors) of llama.cpp's falcon architecture: one key/value head is
    Falcon-7B's multi-query layout, more are the grouped layout of the new decoder architecture."""
    key = gguf_key(file.metadata, "falcon")
    names = set(file)
    kv_heads = key("attention.head_count_kv", 1)
    two_norms = "blk.0.attn_norm_2.weight" in names
    cfg = {"model_type": "falcon", "vocab_size": vocab_size(file, key),
           "hidden_size": key("embedding_length"), "num_hidden_layers": key("block_count"),
           "num_attention_heads": key("attention.head_count"), "new_decoder_architecture": kv_heads > 1,
           "multi_query": kv_heads == 1, "num_kv_heads": kv_heads, "num_ln_in_parallel_attn": 2 if two_norms else 1,
           "parallel_attn": True, "bias": False, "ffn_hidden_size": key("feed_forward_length"),
           "layer_norm_epsilon": key("attention.layer_norm_epsilon"), "rope_theta": key("rope.freq_base", 10000.0),
           "max_position_embeddings": key("context_length", 2048), "tie_word_embeddings": "output.weight" not in names,
           "qkv_layout": "llama.cpp"}
    return cfg, GgufTensors(file, gguf_names(two_norms).of(file), quantized)


def gguf_form(config: FalconConfig):
    """Falcon as llama.cpp's converter writes it: the fused query/key/value rows in llama.cpp's order."""
    from .gguf_export import GgufForm

    if not config.parallel_attn:
        raise ValueError("Falcon with sequential attention (parallel_attn: false) has no GGUF form: llama.cpp's "
                         "falcon runs attention and MLP side by side")
    if config.bias:
        raise ValueError("Falcon with biases (bias: true) has no GGUF form: llama.cpp's falcon has none")
    h, kvh, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    keys = {"context_length": config.max_position_embeddings, "embedding_length": config.hidden_size,
            "feed_forward_length": config.ffn_hidden_size, "block_count": config.num_hidden_layers,
            "attention.head_count": h, "attention.head_count_kv": kvh,
            "attention.layer_norm_epsilon": float(config.layer_norm_epsilon),
            "rope.freq_base": float(config.rope_theta), "tensor_data_layout": "jploski"}

    def convert(name: str, values: np.ndarray) -> np.ndarray:
        if not name.endswith("attn_qkv.weight") or config.qkv_layout == "llama.cpp":
            return values
        if config.layout == "multi_head":  # per head: query, key, value
            return np.ascontiguousarray(values.reshape(h, 3, d, -1).swapaxes(0, 1)).reshape(values.shape)
        groups = values.reshape(kvh, h // kvh + 2, d, -1)  # per group: its queries, its key, its value
        parts = (groups[:, :-2], groups[:, -2], groups[:, -1])
        return np.concatenate([p.reshape(-1, values.shape[1]) for p in parts])

    return GgufForm("falcon", keys, gguf_names(config.two_norms).gguf, convert, tied=config.tie_word_embeddings)
