"""GPT-2 (and its fine-tunes: DistilGPT2, DialoGPT...), as transformers'
``GPT2LMHeadModel``: learned positions, pre-norm blocks of LayerNorm,
multi-head attention and a GELU (tanh) MLP, the output layer tied to the
token embeddings. Its Conv1D weights are stored (in, out), the layout a
decoding step multiplies fastest, so they are used as they are.

It takes the same ``model(ids, cache, last_only)`` calls and ``KVCache`` as
the Llama family, so ``generate_ids`` and ``candle generate`` run it. Its
GGUF form is llama.cpp's ``gpt2`` architecture (``read_gguf``; written by
gguf_export): weights stored as a Linear's (out, in), quantized or not."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.quantized import QTensor

from .decoder import DecoderLM, KVCache, causal_attention, finish
from .gguf_models import GgufTensors, TensorNames, gguf_key, vocab_size
from .llama import TransposedLinear, embedding_layer

#: llama.cpp's tensor names (its gpt2 architecture) and transformers'.
GGUF_NAMES = TensorNames("transformer.h", {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj",
                                           "ffn_norm": "ln_2", "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"},
                         {"token_embd": "transformer.wte", "position_embd": "transformer.wpe",
                          "output_norm": "transformer.ln_f"})


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    n_inner: int
    layer_norm_epsilon: float
    scale_attn_by_inverse_layer_idx: bool = False
    linear_weights: bool = False  # weights stored (out, in) as llama.cpp's (a GGUF), not Conv1D's (in, out)

    @classmethod
    def from_dict(cls, cfg: dict) -> "GPT2Config":
        if cfg.get("model_type", "gpt2") != "gpt2":
            raise ValueError(f"model_type {cfg.get('model_type')!r} is not GPT-2")
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"activation_function {act!r} is not supported (GPT-2 uses gelu_new)")
        if cfg.get("reorder_and_upcast_attn"):
            raise ValueError("reorder_and_upcast_attn is not supported")
        try:
            return cls(vocab_size=cfg["vocab_size"], n_positions=cfg["n_positions"], n_embd=cfg["n_embd"],
                       n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_inner=cfg.get("n_inner") or 4 * cfg["n_embd"],
                       layer_norm_epsilon=cfg.get("layer_norm_epsilon", 1e-5),
                       scale_attn_by_inverse_layer_idx=cfg.get("scale_attn_by_inverse_layer_idx", False),
                       linear_weights=cfg.get("linear_weights", False))
        except KeyError as exc:
            raise ValueError(f"the config has no {exc.args[0]!r}") from None

    # What KVCache and generation read, under the Llama family's names.
    @property
    def context_length(self) -> int:
        return self.n_positions

    @property
    def num_hidden_layers(self) -> int:
        return self.n_layer

    @property
    def num_key_value_heads(self) -> int:
        return self.n_head

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class Conv1D(nn.Module):
    """transformers' Conv1D: y = x @ weight + bias, weight (in, out)."""

    def __init__(self, vb: nn.VarBuilder, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(vb.get((n_in, n_out), "weight"))
        self.bias = nn.Parameter(vb.get((n_out,), "bias"))

    def forward(self, x: c.Tensor) -> c.Tensor:
        return x.matmul(self.weight) + self.bias


def projection(config: GPT2Config, vb: nn.VarBuilder, n_in: int, n_out: int) -> nn.Module:
    """A Conv1D, or from a GGUF the same product over (out, in) weights, kept quantized."""
    return TransposedLinear(vb, n_in, (n_out,), True) if config.linear_weights else Conv1D(vb, n_in, n_out)


class GPT2Attention(nn.Module):
    def __init__(self, config: GPT2Config, vb: nn.VarBuilder, layer: int):
        super().__init__()
        self.heads, self.head_dim = config.n_head, config.head_dim
        self.c_attn = projection(config, vb.pp("c_attn"), config.n_embd, 3 * config.n_embd)
        self.c_proj = projection(config, vb.pp("c_proj"), config.n_embd, config.n_embd)
        self.scale = self.head_dim ** -0.5 / (layer + 1 if config.scale_attn_by_inverse_layer_idx else 1)

    def forward(self, x: c.Tensor, cache: KVCache | None, layer: int) -> c.Tensor:
        b, t, _ = x.shape
        h = self.heads
        qkv = self.c_attn(x).reshape(b, t, 3 * h, self.head_dim).transpose(1, 2)
        q, k, v = qkv.narrow(1, 0, h), qkv.narrow(1, h, h), qkv.narrow(1, 2 * h, h)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        y = causal_attention(q, k, v, cache, scale=self.scale)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, h * self.head_dim))


class GPT2Block(nn.Module):
    def __init__(self, config: GPT2Config, vb: nn.VarBuilder, layer: int):
        super().__init__()
        eps = config.layer_norm_epsilon
        self.ln_1 = nn.LayerNorm(config.n_embd, eps, vb=vb.pp("ln_1"))
        self.attn = GPT2Attention(config, vb.pp("attn"), layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps, vb=vb.pp("ln_2"))
        self.c_fc = projection(config, vb.pp("mlp").pp("c_fc"), config.n_embd, config.n_inner)
        self.c_proj = projection(config, vb.pp("mlp").pp("c_proj"), config.n_inner, config.n_embd)

    def forward(self, x, cache, layer):
        x = x + self.attn(self.ln_1(x), cache, layer)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT2LMHeadModel(DecoderLM):
    config_class = GPT2Config

    def __init__(self, config: GPT2Config, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        if vb.contains_tensor("transformer.wte.weight"):  # saved from GPT2LMHeadModel; the hub's gpt2 was saved from GPT2Model
            vb = vb.pp("transformer")
        self.wte = embedding_layer(vb.pp("wte"), config.vocab_size, config.n_embd)
        self.wpe = embedding_layer(vb.pp("wpe"), config.n_positions, config.n_embd)
        blocks = []
        for i in range(config.n_layer):
            blocks.append(GPT2Block(config, vb.pp("h").pp(i), i))
            if progress is not None:
                progress.update()
        self.h = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(config.n_embd, config.layer_norm_epsilon, vb=vb.pp("ln_f"))
        # tied: logits = x @ wte^T, a view of the table (or its quantized rows)
        self.head = TransposedLinear(vb.pp("wte"), config.n_embd, (config.vocab_size,), False) \
            if isinstance(self.wte.weight, QTensor) else None

    def _anchor(self) -> c.Tensor:
        return self.ln_f.weight

    def forward(self, input_ids, cache: KVCache | None = None, last_only: bool = False) -> c.Tensor:
        ids, positions = self.start(input_ids, cache)
        x = self.wte(ids) + self.wpe(positions.ids(self.device))
        for i, block in enumerate(self.h):
            x = block(x, cache, i)
        x = self.ln_f(finish(x, cache, positions.length, last_only))
        return self.head(x) if self.head is not None else x.matmul(self.wte.weight.t())


def read_gguf(file, quantized: bool = True) -> tuple:
    """(config.json as a dict, tensors) of llama.cpp's gpt2 architecture."""
    key = gguf_key(file.metadata, "gpt2")
    cfg = {"model_type": "gpt2", "vocab_size": vocab_size(file, key),
           "n_positions": key("context_length"), "n_embd": key("embedding_length"), "n_layer": key("block_count"),
           "n_head": key("attention.head_count"), "n_inner": key("feed_forward_length"),
           "layer_norm_epsilon": key("attention.layer_norm_epsilon"), "linear_weights": True}
    return cfg, GgufTensors(file, GGUF_NAMES.of(file), quantized)


def gguf_form(config: GPT2Config):
    """GPT-2 as llama.cpp's converter writes it: Conv1D weights transposed to (out, in), the output layer
    tied to the token embedding."""
    from .gguf_export import GgufForm

    if config.scale_attn_by_inverse_layer_idx:
        raise ValueError("scale_attn_by_inverse_layer_idx has no GGUF form: llama.cpp's gpt2 does not scale by "
                         "the layer index")
    keys = {"context_length": config.n_positions, "embedding_length": config.n_embd,
            "feed_forward_length": config.n_inner, "block_count": config.n_layer,
            "attention.head_count": config.n_head, "attention.layer_norm_epsilon": float(config.layer_norm_epsilon)}

    def name(hf: str) -> str | None:  # with or without the transformer. prefix
        return GGUF_NAMES.gguf(hf if hf.startswith("transformer.") else "transformer." + hf)

    def transposed(gguf: str) -> bool:
        return gguf.endswith(".weight") and gguf.split(".")[-2] in ("attn_qkv", "attn_output", "ffn_up", "ffn_down")

    return GgufForm("gpt2", keys, name, convert=lambda n, v: np.ascontiguousarray(v.T) if transposed(n) else v,
                    shape=lambda n, shape: tuple(reversed(shape)) if transposed(n) else shape)
