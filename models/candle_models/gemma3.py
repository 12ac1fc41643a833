"""Gemma 3 (text), as transformers' ``Gemma3ForCausalLM`` and llama.cpp's
``gemma3``: the Llama family's attention and gated MLP with Gemma's own
parts:

- RMSNorms that multiply by (1 + weight), four per layer: before and after
  the attention, before and after the MLP; and one on each query and key head;
- token embeddings scaled by sqrt(hidden_size);
- queries scaled by 1/sqrt(query_pre_attn_scalar), not 1/sqrt(head_dim);
- sliding-window layers and global ones (``layer_types``, or every
  ``sliding_window_pattern``-th layer global), each kind with its rope base
  (10000 for the sliding ones, 1e6 and possibly a linear scaling for the
  global ones);
- a GELU (tanh) gate; optional tanh soft-capping of the final logits
  (Gemma 2's soft-capping of the attention scores is refused: transformers'
  Gemma 3 leaves it out, llama.cpp's converter refuses it).

It loads from config.json + safetensors and from llama.cpp's GGUF (the
quantized matrices kept in their blocks), and runs in the Llama family's
KV caches, batch cache included."""

from __future__ import annotations

import math
from dataclasses import dataclass

import candle_api as c
from candle_api import functional as F
from candle_api import nn

from .llama import LlamaAttention, LlamaConfig, LlamaForCausalLM, LlamaMLP, parse_rope, sizes
from .rope import RotaryEmbedding

#: config.json ``model_type``s this module runs (Gemma3ForCausalLM's; the multimodal "gemma3" is refused).
MODEL_TYPES = ("gemma3_text",)
_GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_tanh")


@dataclass(frozen=True)
class Gemma3Config(LlamaConfig):
    query_pre_attn_scalar: float = 256.0
    final_logit_softcapping: float | None = None
    rope_local_theta: float = 10000.0  # the sliding layers' rope; rope_theta/rope_scaling are the global ones'
    rope_local_scaling: dict | None = None

    @classmethod
    def from_dict(cls, cfg: dict) -> "Gemma3Config":
        """From Gemma3ForCausalLM's config.json, in transformers 5's form (layer_types, rope_parameters per
        layer type) or the earlier one (sliding_window_pattern, rope_theta, rope_local_base_freq)."""
        model_type = cfg.get("model_type", "gemma3_text")
        if model_type == "gemma3":
            raise ValueError("model_type 'gemma3' (Gemma3ForConditionalGeneration, text and images) is not "
                             "supported: the text-only Gemma3ForCausalLM ('gemma3_text') is")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {model_type!r} is not Gemma 3 (supported: {', '.join(MODEL_TYPES)})")
        act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
        if act not in _GELU_TANH:
            raise ValueError(f"hidden_activation {act!r} is not supported (Gemma 3 uses gelu_pytorch_tanh)")
        if cfg.get("attn_logit_softcapping"):  # Gemma 2's; Gemma 3 configs keep the key, set to null
            raise ValueError("attn_logit_softcapping is not supported for Gemma 3: transformers' Gemma 3 does "
                             "not apply it and llama.cpp's converter refuses it")
        if cfg.get("use_bidirectional_attention"):
            raise ValueError("use_bidirectional_attention (EmbeddingGemma) is not supported: Gemma 3 is causal")
        try:
            rope = cfg.get("rope_parameters") or {}
            if "full_attention" not in rope:  # transformers 4: rope_theta, rope_scaling and rope_local_base_freq
                rope = {"full_attention": {"rope_theta": cfg.get("rope_theta", 1e6), **(cfg.get("rope_scaling") or {})},
                        "sliding_attention": {"rope_theta": cfg.get("rope_local_base_freq", 1e4)}}
            theta, scaling = parse_rope(rope["full_attention"], cfg, 1e6)
            local_theta, local_scaling = parse_rope(rope.get("sliding_attention"), cfg, 1e4)
            bias = cfg.get("attention_bias", False)
            return cls(
                **sizes(cfg, 131072), rope_theta=theta, rope_scaling=scaling,
                tie_word_embeddings=cfg.get("tie_word_embeddings", True), qkv_bias=bias, o_bias=bias,
                mlp_bias=False, sliding_windows=_windows(cfg, cfg["num_hidden_layers"]), model_type=model_type,
                qk_norm=True, hidden_act="gelu_pytorch_tanh",
                query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", 256)),
                final_logit_softcapping=cfg.get("final_logit_softcapping"),
                rope_local_theta=local_theta, rope_local_scaling=local_scaling,
            )
        except KeyError as exc:
            raise ValueError(f"the config has no {exc.args[0]!r}") from None


def _windows(cfg: dict, layers: int) -> tuple:
    """Per layer the sliding window, or None for a global layer: from layer_types, else every
    sliding_window_pattern-th layer (6 by default) is global."""
    window = cfg.get("sliding_window")
    kinds = cfg.get("layer_types")
    if kinds is None:
        pattern = cfg.get("sliding_window_pattern", 6)
        kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    if len(kinds) != layers:
        raise ValueError(f"layer_types has {len(kinds)} entries for {layers} layers")
    unknown = set(kinds) - {"sliding_attention", "full_attention"}
    if unknown:
        raise ValueError(f"layer_types {sorted(unknown)} are not supported (sliding_attention, full_attention)")
    return tuple(window if kind == "sliding_attention" and window else None for kind in kinds)


class GemmaRmsNorm(nn.Module):
    """x / sqrt(mean(x ** 2) + eps) * (1 + weight): the multiplier is computed once, at load."""

    def __init__(self, dim: int, eps: float, vb: nn.VarBuilder):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(vb.get((dim,), "weight") + 1.0)

    def forward(self, x: c.Tensor) -> c.Tensor:
        return F.rms_norm(x, self.weight, self.eps)


class Gemma3Attention(LlamaAttention):
    def __init__(self, config: Gemma3Config, vb: nn.VarBuilder, window: int | None):
        super().__init__(config, vb, window, norm=GemmaRmsNorm, scale=config.query_pre_attn_scalar ** -0.5)


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config: Gemma3Config, vb: nn.VarBuilder, window: int | None):
        super().__init__()
        self.window = window
        self.self_attn = Gemma3Attention(config, vb.pp("self_attn"), window)
        self.mlp = LlamaMLP(config, vb.pp("mlp"))
        hidden, eps = config.hidden_size, config.rms_norm_eps
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            setattr(self, name, GemmaRmsNorm(hidden, eps, vb.pp(name)))

    def forward(self, x, cos, sin, cache, layer, masks):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, masks))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3ForCausalLM(LlamaForCausalLM):
    """Gemma 3's decoder and its head, tied to the embeddings (calls: see :class:`~.decoder.DecoderLM`)."""

    config_class = Gemma3Config
    layer_class = Gemma3DecoderLayer
    norm_class = GemmaRmsNorm

    def __init__(self, config: Gemma3Config, vb: nn.VarBuilder, progress=None):
        super().__init__(config, vb, progress)
        self.local_rotary = RotaryEmbedding(config.head_dim, config.rope_local_theta, config.rope_local_scaling,
                                            config.max_position_embeddings, vb.dtype, vb.device)
        # sqrt(hidden) rounded to the activations' dtype, as transformers multiplies
        self.embed_scale = float(c.tensor([math.sqrt(config.hidden_size)]).to_dtype(self.dtype).to_dtype("f32")
                                 .numpy()[0])

    def embed(self, ids: c.Tensor) -> c.Tensor:
        return super().embed(ids) * self.embed_scale

    def _rope_tables(self, positions) -> list:
        """The sliding layers' tables from the local rope, the global layers' from the global one."""
        glob = positions.rope(self.rotary)
        local = positions.rope(self.local_rotary) if any(w is not None for w in self.config.sliding_windows) else None
        return [glob if w is None else local for w in self.config.sliding_windows]

    def forward(self, input_ids, cache=None, last_only: bool = False) -> c.Tensor:
        logits = super().forward(input_ids, cache, last_only)
        cap = self.config.final_logit_softcapping
        return F.tanh(logits / cap) * cap if cap else logits
