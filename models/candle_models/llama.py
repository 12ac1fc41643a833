"""The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3, Phi-3, SmolLM2) through one code
path, as candle-transformers' ``llama.rs``: RMSNorm, rotary embeddings,
grouped-query attention with a KV cache grown as positions come, a SwiGLU MLP.

The variants differ only in configuration: Qwen2 has q/k/v biases, Qwen3
RMS-normalizes each query and key head before the rope, Phi-3 stores q/k/v
and gate/up as fused matrices, Mistral, Phi-3 and Qwen2/3 may use a sliding
attention window, small models tie the output layer to the embeddings, and
the rope may be scaled.
"""

from __future__ import annotations

from dataclasses import dataclass

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.quantized import QTensor

from .batch_cache import BatchKVCache
from .decode_step import decode_step
from .decoder import DecoderLM, KVCache, attention_mask, finish
from .rope import ROPE_TYPES, RotaryEmbedding

#: config.json ``model_type``s this module runs.
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")

#: The MLP gate activations, by config.json name (Gemma's gelu_pytorch_tanh is GELU's tanh approximation).
ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": F.gelu}


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None  # {"rope_type": ..., parameters}; None for plain rope
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    sliding_windows: tuple  # per layer: the attention window, or None for full attention
    model_type: str = "llama"
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on each query and key head, before the rope
    fused: bool = False  # Phi-3: the checkpoint holds qkv_proj and gate_up_proj, not their parts
    # q/k rows as llama.cpp's converter stores them (each head's rotary pairs adjacent): rotate
    # interleaved pairs instead of halves, so quantized weights need no reordering.
    rope_interleaved: bool = False
    hidden_act: str = "silu"  # the MLP's gate activation (a key of ACTIVATIONS)

    @classmethod
    def from_dict(cls, cfg: dict) -> "LlamaConfig":
        """From a Hugging Face config.json (transformers 4's rope_theta/rope_scaling or 5's rope_parameters)."""
        model_type = cfg.get("model_type", "llama")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {model_type!r} is not a Llama-family model (supported: "
                             f"{', '.join(MODEL_TYPES)})")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {cfg['hidden_act']!r} is not supported (the Llama family uses silu)")
        try:
            theta, scaling = parse_rope(cfg.get("rope_parameters") or cfg.get("rope_scaling"), cfg,
                                        cfg.get("rope_theta", 10000.0))
            return cls(
                **sizes(cfg, 4096), rope_theta=theta, rope_scaling=scaling,
                tie_word_embeddings=cfg.get("tie_word_embeddings", False),
                qkv_bias=model_type == "qwen2" or cfg.get("attention_bias", False),
                o_bias=model_type != "qwen2" and cfg.get("attention_bias", False),
                mlp_bias=cfg.get("mlp_bias", False),
                sliding_windows=_sliding_windows(cfg, model_type, cfg["num_hidden_layers"]),
                model_type=model_type, qk_norm=model_type == "qwen3", fused=model_type == "phi3",
                rope_interleaved=cfg.get("rope_interleaved", False),
            )
        except KeyError as exc:
            raise ValueError(f"the config has no {exc.args[0]!r}") from None

    @property
    def context_length(self) -> int:
        """Positions the model takes at most: max_position_embeddings, times the factor of dynamic NTK
        scaling, whose point is to run past max_position_embeddings (the length its scaling starts at)."""
        if (self.rope_scaling or {}).get("rope_type") == "dynamic":
            return int(self.max_position_embeddings * self.rope_scaling["factor"])
        return self.max_position_embeddings


def sizes(cfg: dict, max_positions: int) -> dict:
    """The LlamaConfig fields a config.json gives alike in every family that uses it: its sizes, the norms'
    epsilon and the context (``max_positions`` when it says none); a KeyError names a missing one."""
    heads = cfg["num_attention_heads"]
    return dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                num_attention_heads=heads, num_key_value_heads=cfg.get("num_key_value_heads") or heads,
                head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads, rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
                max_position_embeddings=cfg.get("max_position_embeddings", max_positions))


def parse_rope(rope: dict | None, cfg: dict, theta: float) -> tuple[float, dict | None]:
    """(theta, rope_scaling or None for plain rope) from a config's rope parameters: transformers 5's
    rope_parameters (or one entry of them) or 4's rope_scaling; ``theta`` when they do not say."""
    rope = dict(rope or {})
    theta = rope.pop("rope_theta", theta)
    kind = rope.pop("rope_type", rope.pop("type", "default"))
    if kind == "llama3":
        rope.setdefault("original_max_position_embeddings", cfg["max_position_embeddings"])
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope type {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
    if rope.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial rotary embeddings (partial_rotary_factor < 1) are not supported")
    return float(theta), None if kind == "default" else {"rope_type": kind, **rope}


def _sliding_windows(cfg: dict, model_type: str, layers: int) -> tuple:
    """Mistral slides every layer; Qwen2 and Qwen3 the layers their layer_types
    (or use_sliding_window and max_window_layers) mark."""
    window = cfg.get("sliding_window")
    if model_type == "llama" or window is None or not cfg.get("use_sliding_window", True):
        return (None,) * layers
    if "layer_types" in cfg:
        return tuple(window if kind == "sliding_attention" else None for kind in cfg["layer_types"])
    if model_type in ("qwen2", "qwen3"):
        first = cfg.get("max_window_layers", layers)
        return tuple(window if i >= first else None for i in range(layers))
    return (window,) * layers


class TransposedLinear(nn.Module):
    """A linear layer whose weight is kept transposed, (in, out) contiguous,
    or, from a quantized checkpoint, kept in its blocks.

    Decoding multiplies one row by each weight: a matrix-vector product,
    which the cpu backend streams from the rows of W^T (its axpy form) faster
    than from the rows of W when the input dim is short: on one thread, 1.3x
    for SmolLM2's 576-wide projections, 1.7x for its 49152 x 576 output layer
    (dot products over short rows keep too few memory streams going). ``names`` fuses
    several projections of the same input (q/k/v, gate/up) into one weight,
    so that one product streams them all.

    Quantized weights (QTensors, rows of blocks) are multiplied as they are
    (``QTensor.matmul_t``); parts of one type are fused by stacking their rows,
    parts of different types (a Q4_K_M file mixes them) run one by one."""

    def __init__(self, vb: nn.VarBuilder, in_features: int, sizes, bias: bool, names=("",)):
        super().__init__()
        parts = [vb.pp(n) if n else vb for n in names]
        weights = [p.get_weight((o, in_features), "weight") for p, o in zip(parts, sizes)]
        self.weight_t, self.quantized = None, None
        if any(isinstance(w, QTensor) for w in weights):
            self.quantized = _fused_rows([w if isinstance(w, QTensor) else QTensor.quantize(w, "f32")
                                          for w in weights])
            for w in self.quantized:  # packed for the device's products where it has a layout for them
                w.pack()
        else:
            self.weight_t = nn.Parameter(c.cat([w.t() for w in weights], 1))
        self.bias = nn.Parameter(c.cat([p.get((o,), "bias") for p, o in zip(parts, sizes)], 0)) if bias else None

    def forward(self, x: c.Tensor) -> c.Tensor:
        if self.quantized is None:
            y = x.matmul(self.weight_t)
        elif len(self.quantized) == 1:
            y = self.quantized[0].matmul_t(x)
        else:
            y = c.cat([w.matmul_t(x) for w in self.quantized], -1)
        return y + self.bias if self.bias is not None else y


class _QuantizedEmbedding(nn.Module):
    """Token embeddings kept in their blocks: a lookup decodes only the rows it reads."""

    def __init__(self, weight: QTensor):
        super().__init__()
        self.weight = weight

    def forward(self, ids: c.Tensor) -> c.Tensor:
        return self.weight.embedding(ids)


def embedding_layer(vb: nn.VarBuilder, vocab: int, hidden: int) -> nn.Module:
    """An embedding table, kept in its blocks when the checkpoint's is quantized."""
    weight = vb.get_weight((vocab, hidden), "weight")
    return _QuantizedEmbedding(weight) if isinstance(weight, QTensor) else nn.Embedding(vocab, hidden, vb=vb)


def _fused_rows(weights: list) -> list:
    """QTensors stacked row-wise where neighbours share a type: as few products as the types allow.
    Parts that lie end to end in the file (a GGUF's ffn_gate and ffn_up) join without a copy; the others
    (q, k, v: a tenth of the weights) are copied, and their pages in the file are read once."""
    groups: list = []
    for w in weights:
        if groups and groups[-1][-1].ggml_dtype == w.ggml_dtype:
            groups[-1].append(w)
        else:
            groups.append([w])
    fused = [g[0] if len(g) == 1 else QTensor.cat_rows(g) for g in groups]
    for g, f in zip(groups, fused):
        if len(g) > 1 and not g[0].follows(g[1]):  # copied: the parts' pages in the file are not read again
            for w in g:
                w.release_pages()
    return fused


class LlamaAttention(nn.Module):
    """Grouped-query attention over the KV cache. A family may normalize q/k heads with its own ``norm``
    class and scale the scores by other than 1/sqrt(head_dim)."""

    def __init__(self, config: LlamaConfig, vb: nn.VarBuilder, window: int | None, norm=nn.RmsNorm,
                 scale: float | None = None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.window, self.scale = window, scale
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if config.fused:
            self.qkv_proj = TransposedLinear(vb.pp("qkv_proj"), config.hidden_size, (q_size + 2 * kv_size,),
                                             config.qkv_bias)
        else:
            self.qkv_proj = TransposedLinear(vb, config.hidden_size, (q_size, kv_size, kv_size), config.qkv_bias,
                                             ("q_proj", "k_proj", "v_proj"))
        self.o_proj = TransposedLinear(vb.pp("o_proj"), q_size, (config.hidden_size,), config.o_bias)
        self.rope = F.rope_i if config.rope_interleaved else F.rope
        self.q_norm = self.k_norm = None
        if config.qk_norm:
            self.q_norm = norm(self.head_dim, config.rms_norm_eps, vb=vb.pp("q_norm"))
            self.k_norm = norm(self.head_dim, config.rms_norm_eps, vb=vb.pp("k_norm"))

    def forward(self, x: c.Tensor, cos: c.Tensor, sin: c.Tensor, cache: KVCache | None, layer: int,
                masks: dict) -> c.Tensor:
        b, t, _ = x.shape
        h, kvh = self.heads, self.kv_heads
        heads = self.qkv_proj(x).reshape(b, t, h + 2 * kvh, self.head_dim).transpose(1, 2)
        if self.q_norm is None:
            qk = self.rope(heads.narrow(1, 0, h + kvh), cos, sin)  # q and k heads are adjacent: one rope for both
            q, k = qk.narrow(1, 0, h), qk.narrow(1, h, kvh)
        else:
            q = self.rope(self.q_norm(heads.narrow(1, 0, h)), cos, sin)
            k = self.rope(self.k_norm(heads.narrow(1, h, kvh)), cos, sin)
        v = heads.narrow(1, h + kvh, kvh)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        s = k.shape[2]
        if isinstance(cache, BatchKVCache):  # one token per sequence, each sequence at its own length
            q = q.reshape(b, kvh, h // kvh, self.head_dim)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=cache.mask(self.window), scale=self.scale)
        elif t == 1:
            # Decoding sees every cached key (or the last `window`): the query heads sharing a key/value
            # head are the rows of one query matrix, so grouped attention is plain attention.
            if self.window is not None and s > self.window:
                k, v = k.narrow(2, s - self.window, self.window), v.narrow(2, s - self.window, self.window)
            q = q.reshape(b, kvh, h // kvh, self.head_dim)
            y = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        elif s == t and (self.window is None or self.window >= s):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)
            y = y.transpose(1, 2)
        else:
            if self.window not in masks:
                masks[self.window] = attention_mask(t, s - t, self.window, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[self.window], scale=self.scale,
                                               enable_gqa=True)
            y = y.transpose(1, 2)
        return self.o_proj(y.reshape(b, t, h * self.head_dim))


class LlamaMLP(nn.Module):
    """down(act(gate(x)) * up(x)), gate and up in one product; act is silu but for Gemma."""

    def __init__(self, config: LlamaConfig, vb: nn.VarBuilder):
        super().__init__()
        self.ffn = config.intermediate_size
        if config.fused:
            self.gate_up_proj = TransposedLinear(vb.pp("gate_up_proj"), config.hidden_size, (2 * self.ffn,),
                                                 config.mlp_bias)
        else:
            self.gate_up_proj = TransposedLinear(vb, config.hidden_size, (self.ffn, self.ffn), config.mlp_bias,
                                                 ("gate_proj", "up_proj"))
        self.down_proj = TransposedLinear(vb.pp("down_proj"), self.ffn, (config.hidden_size,), config.mlp_bias)
        self.act = ACTIVATIONS[config.hidden_act]

    def forward(self, x: c.Tensor) -> c.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.act is F.silu:  # SwiGLU's gate in one op
            return self.down_proj(F.silu_mul(gate_up))
        return self.down_proj(self.act(gate_up.narrow(-1, 0, self.ffn)) * gate_up.narrow(-1, self.ffn, self.ffn))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, vb: nn.VarBuilder, window: int | None):
        super().__init__()
        self.self_attn = LlamaAttention(config, vb.pp("self_attn"), window)
        self.mlp = LlamaMLP(config, vb.pp("mlp"))
        self.input_layernorm = nn.RmsNorm(config.hidden_size, config.rms_norm_eps, vb=vb.pp("input_layernorm"))
        self.post_attention_layernorm = nn.RmsNorm(config.hidden_size, config.rms_norm_eps,
                                                   vb=vb.pp("post_attention_layernorm"))

    def forward(self, x, cos, sin, cache, layer, masks):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, masks)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """The decoder stack, of ``layer_class`` layers and a final ``norm_class`` norm. With tied embeddings
    the table lives in the causal LM's output layer (transposed, for decoding) and ``embed_tokens`` is None."""

    def __init__(self, config: LlamaConfig, vb: nn.VarBuilder, progress=None, layer_class=LlamaDecoderLayer,
                 norm_class=nn.RmsNorm):
        super().__init__()
        self.embed_tokens = None if config.tie_word_embeddings else embedding_layer(
            vb.pp("embed_tokens"), config.vocab_size, config.hidden_size)
        layers = []
        for i, window in enumerate(config.sliding_windows):
            layers.append(layer_class(config, vb.pp("layers").pp(i), window))
            if progress is not None:
                progress.update()
        self.layers = nn.ModuleList(layers)
        self.norm = norm_class(config.hidden_size, config.rms_norm_eps, vb=vb.pp("norm"))


class LlamaForCausalLM(DecoderLM):
    """A Llama-family decoder with its language-model head (calls: see :class:`DecoderLM`). A family
    that differs in its layers and norms (Gemma 3) subclasses it with its own ``config_class``,
    ``layer_class`` and ``norm_class``."""

    config_class = LlamaConfig
    layer_class = LlamaDecoderLayer
    norm_class = nn.RmsNorm
    #: One-token steps of one sequence run as a bound step (candle_models.decode_step) where it serves the
    #: model; False runs the forward's ops (the same logits, bit for bit).
    bound_decoding = True

    def __init__(self, config: LlamaConfig, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, vb.pp("model"), progress, self.layer_class, self.norm_class)
        head = vb.pp("model").pp("embed_tokens") if config.tie_word_embeddings else vb.pp("lm_head")
        self.lm_head = TransposedLinear(head, config.hidden_size, (config.vocab_size,), False)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling,
                                      config.max_position_embeddings, vb.dtype, vb.device)

    def embed(self, ids: c.Tensor) -> c.Tensor:
        if self.model.embed_tokens is not None:
            return self.model.embed_tokens(ids)
        if self.lm_head.quantized is not None:
            return self.lm_head.quantized[0].embedding(ids)
        return F.embedding(ids, self.lm_head.weight_t.t())

    @property
    def dtype(self):
        """The dtype of the activations (f32 on quantized weights)."""
        return self.lm_head.weight_t.dtype if self.lm_head.weight_t is not None else c.f32

    @property
    def device(self):
        head = self.lm_head
        return head.weight_t.device if head.weight_t is not None else head.quantized[0].device

    def forward(self, input_ids, cache: KVCache | None = None, last_only: bool = False) -> c.Tensor:
        """Logits for ``input_ids`` (batch, seq) of integer ids; ``last_only``
        computes them for the last position only (batch, 1, vocab), all
        that generating the next token needs. The cached positions and the
        new ones make at most ``config.context_length``. With a
        :class:`BatchKVCache` the ids are (batch, 1), one token for each of
        its sequences, each at its own position."""
        ids, positions = self.start(input_ids, cache)
        if positions.length == 1 and type(cache) is KVCache and cache.length < cache.shape[2] and ids.shape[0] == 1:
            step = decode_step(self, cache)  # one token: the kernels bound once, when they serve this model
            if step is not None:
                return step(ids)
        x = self.embed(ids)
        masks = {}  # the attention masks this forward needs, one per window, shared by the layers
        for i, (layer, (cos, sin)) in enumerate(zip(self.model.layers, self._rope_tables(positions))):
            x = layer(x, cos, sin, cache, i, masks)
        return self.lm_head(self.model.norm(finish(x, cache, positions.length, last_only)))

    def _rope_tables(self, positions) -> list:
        """Each layer's cos/sin tables: one rope for every layer."""
        return [positions.rope(self.rotary)] * len(self.model.layers)
