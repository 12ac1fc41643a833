"""T5 as transformers' ``T5ForConditionalGeneration`` and ``T5EncoderModel``:
T5 v1.0 (ReLU feed-forward, output layer tied to the embeddings and scaled
by d_model**-0.5), T5 v1.1 and flan-t5 (gated GELU, an output layer of its
own) from config.json + safetensors (or PyTorch) weights.

What sets T5 apart from the other families: no position embeddings but a
learned bias per head for each relative-position bucket (bidirectional in
the encoder, causal in the decoder), kept by the first layer of each stack
and added to the scores of every layer; no scaling of the attention scores;
an RMS norm without mean subtraction nor bias. The decoder attends to the
encoder's states through cross-attention, whose keys and values are
computed once per input (:class:`T5Cache`), and its own keys and values grow
in a :class:`~candle_models.decoder.KVCache` as tokens come;
:mod:`candle_models.seq2seq` generates with it.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.errors import ShapeError

from .bert import activation, as_ids
from .decoder import KVCache
from .llama import TransposedLinear

#: config.json ``model_type``s this module runs (mT5 and UMT5 differ in ways it does not check).
MODEL_TYPES = ("t5",)


@dataclass(frozen=True)
class T5Config:
    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    relative_attention_num_buckets: int
    relative_attention_max_distance: int
    layer_norm_epsilon: float
    activation: str  # the feed-forward's, a transformers name (bert.ACTIVATIONS)
    gated: bool  # act(wi_0 x) * wi_1 x (v1.1, flan-t5) rather than act(wi x) (v1.0)
    scale_decoder_outputs: bool  # d_model**-0.5 before a tied output layer (v1.0)
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0

    @classmethod
    def from_dict(cls, cfg: dict) -> "T5Config":
        """From a config.json as transformers 4 or 5 writes it (5 records the output scaling as
        scale_decoder_outputs; 4 implied it from tie_word_embeddings)."""
        model_type = cfg.get("model_type", "t5")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {model_type!r} is not T5 (supported: {', '.join(MODEL_TYPES)})")
        proj = cfg.get("feed_forward_proj", "relu")
        parts = proj.split("-")
        if len(parts) > 2 or len(parts) == 2 and parts[0] != "gated":
            raise ValueError(f"feed_forward_proj {proj!r} is not supported (T5 uses 'relu' or 'gated-gelu')")
        act = "gelu_new" if proj == "gated-gelu" else parts[-1]  # transformers' rule for v1.1 checkpoints
        activation(act)
        try:
            layers = cfg["num_layers"]
            buckets = cfg.get("relative_attention_num_buckets", 32)
            distance = cfg.get("relative_attention_max_distance", 128)
            if buckets < 4:  # a quarter of them are the encoder's exact ones in each direction
                raise ValueError(f"relative_attention_num_buckets must be at least 4, got {buckets}")
            if distance <= buckets // 2:  # the decoder's logarithmic buckets would span no distance
                raise ValueError(f"relative_attention_max_distance ({distance}) must exceed half the "
                                 f"relative_attention_num_buckets ({buckets})")
            scale = cfg.get("scale_decoder_outputs", cfg.get("tie_word_embeddings", True) is not False)
            eos = cfg.get("eos_token_id", 1)
            return cls(vocab_size=cfg["vocab_size"], d_model=cfg["d_model"], d_kv=cfg["d_kv"], d_ff=cfg["d_ff"],
                       num_layers=layers, num_decoder_layers=cfg.get("num_decoder_layers") or layers,
                       num_heads=cfg["num_heads"],
                       relative_attention_num_buckets=buckets, relative_attention_max_distance=distance,
                       layer_norm_epsilon=cfg.get("layer_norm_epsilon", 1e-6), activation=act,
                       gated=len(parts) == 2, scale_decoder_outputs=bool(scale),
                       pad_token_id=cfg.get("pad_token_id", 0),
                       eos_token_id=eos[0] if isinstance(eos, list) else eos,
                       decoder_start_token_id=cfg.get("decoder_start_token_id", cfg.get("pad_token_id", 0)))
        except KeyError as exc:
            raise ValueError(f"the config has no {exc.args[0]!r}") from None

    # The decoder's self-attention cache, under the names KVCache reads.
    @property
    def num_hidden_layers(self) -> int:
        return self.num_decoder_layers

    @property
    def num_key_value_heads(self) -> int:
        return self.num_heads

    @property
    def head_dim(self) -> int:
        return self.d_kv

    @property
    def context_length(self) -> int:
        """Relative positions set no bound on the decoder's length: only memory does."""
        return sys.maxsize


def relative_position_bucket(relative: np.ndarray, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> np.ndarray:
    """The bucket of each relative position (key - query), as Mesh TensorFlow and transformers compute
    it: half the buckets for each direction when bidirectional (causal: every later key in bucket 0),
    distances below half a direction's buckets exactly, longer ones logarithmically up to
    ``max_distance``, all beyond in the last. In float32 as transformers, whose rounding decides the
    distances that fall on a bucket's edge."""
    relative = np.asarray(relative, dtype=np.int64)
    buckets = np.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        distance = np.abs(relative)
    else:
        distance = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    ratio = np.maximum(distance, 1).astype(np.float32) / np.float32(max_exact)
    log_bucket = np.log(ratio) / np.float32(math.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact)
    large = np.minimum(max_exact + log_bucket.astype(np.int64), num_buckets - 1)
    return buckets + np.where(distance < max_exact, distance, large)


class RelativeBias(nn.Module):
    """The first layer's relative_attention_bias (buckets, heads), as the (1, heads, queries, keys)
    scores to add for queries at positions ``start .. start + queries - 1`` over keys 0 .. keys - 1."""

    def __init__(self, config: T5Config, vb: nn.VarBuilder, bidirectional: bool):
        super().__init__()
        self.table_t = nn.Parameter(vb.get((config.relative_attention_num_buckets, config.num_heads),
                                           "weight").t().contiguous())
        self.bidirectional = bidirectional
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance

    def forward(self, start: int, queries: int, keys: int) -> c.Tensor:
        relative = np.arange(keys)[None, :] - np.arange(start, start + queries)[:, None]
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)
        ids = c.from_numpy(buckets.reshape(-1).astype(np.uint32)).to_device(self.table_t.device)
        return self.table_t.index_select(ids, 1).reshape(1, -1, queries, keys)


def kept_keys(attention_mask, batch: int, length: int) -> np.ndarray | None:
    """The attention mask (batch, length), nonzero for real tokens, as a bool (batch, 1, 1, length) array
    of the keys to attend to; None when nothing is masked."""
    if attention_mask is None:
        return None
    mask = attention_mask.numpy() if isinstance(attention_mask, c.Tensor) else np.asarray(attention_mask)
    if mask.shape != (batch, length):
        raise ShapeError(f"attention_mask has shape {mask.shape}, the input ids {(batch, length)}")
    return None if mask.all() else (mask != 0).reshape(batch, 1, 1, length)


def causal_scores(start: int, queries: int, keys: int, dtype, device) -> c.Tensor:
    """(queries, keys) scores of 0 for the keys a query at ``start + i`` sees and -inf for later ones."""
    later = np.arange(keys)[None, :] > np.arange(start, start + queries)[:, None]
    return c.from_numpy(np.where(later, -np.inf, 0.0).astype(np.float32)).to_dtype(dtype).to_device(device)


class T5Attention(nn.Module):
    """Multi-head attention without score scaling: self-attention with q/k/v in one product, or
    cross-attention whose keys and values come from the encoder's states (``keys_values``)."""

    def __init__(self, config: T5Config, vb: nn.VarBuilder, cross: bool = False):
        super().__init__()
        self.heads, self.head_dim = config.num_heads, config.d_kv
        inner = self.heads * self.head_dim
        if cross:
            self.q = TransposedLinear(vb.pp("q"), config.d_model, (inner,), False)
            self.kv = TransposedLinear(vb, config.d_model, (inner, inner), False, ("k", "v"))
        else:
            self.qkv = TransposedLinear(vb, config.d_model, (inner,) * 3, False, ("q", "k", "v"))
        self.o = TransposedLinear(vb.pp("o"), inner, (config.d_model,), False)

    def _heads(self, x: c.Tensor, n: int) -> c.Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, n * self.heads, self.head_dim).transpose(1, 2)

    def keys_values(self, encoder_hidden: c.Tensor) -> tuple[c.Tensor, c.Tensor]:
        kv = self._heads(self.kv(encoder_hidden), 2)
        return kv.narrow(1, 0, self.heads), kv.narrow(1, self.heads, self.heads)

    def _out(self, y: c.Tensor) -> c.Tensor:
        b, _, t, _ = y.shape
        return self.o(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))

    def forward(self, x: c.Tensor, scores, cache: KVCache | None = None, layer: int = 0) -> c.Tensor:
        h = self.heads
        qkv = self._heads(self.qkv(x), 3)
        q, k, v = qkv.narrow(1, 0, h), qkv.narrow(1, h, h), qkv.narrow(1, 2 * h, h)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        return self._out(F.scaled_dot_product_attention(q, k, v, attn_mask=scores, scale=1.0))

    def cross(self, x: c.Tensor, keys: c.Tensor, values: c.Tensor, mask) -> c.Tensor:
        q = self._heads(self.q(x), 1)
        return self._out(F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1.0))


class T5FeedForward(nn.Module):
    """wo(act(wi x)), or wo(act(wi_0 x) * wi_1 x) with wi_0 and wi_1 in one product."""

    def __init__(self, config: T5Config, vb: nn.VarBuilder):
        super().__init__()
        self.act, self.d_ff = activation(config.activation), config.d_ff
        if config.gated:
            self.wi = TransposedLinear(vb, config.d_model, (self.d_ff, self.d_ff), False, ("wi_0", "wi_1"))
        else:
            self.wi = TransposedLinear(vb.pp("wi"), config.d_model, (self.d_ff,), False)
        self.gated = config.gated
        self.wo = TransposedLinear(vb.pp("wo"), self.d_ff, (config.d_model,), False)

    def forward(self, x: c.Tensor) -> c.Tensor:
        h = self.wi(x)
        if self.gated:
            h = self.act(h.narrow(-1, 0, self.d_ff)) * h.narrow(-1, self.d_ff, self.d_ff)
        else:
            h = self.act(h)
        return self.wo(h)


def _norm(config: T5Config, vb: nn.VarBuilder) -> nn.RmsNorm:
    return nn.RmsNorm(config.d_model, config.layer_norm_epsilon, vb=vb.pp("layer_norm"))


class T5Block(nn.Module):
    """Pre-norm residual sub-layers: self-attention, cross-attention (decoder), feed-forward."""

    def __init__(self, config: T5Config, vb: nn.VarBuilder, decoder: bool):
        super().__init__()
        vb = vb.pp("layer")
        self.self_norm, self.self_attn = _norm(config, vb.pp(0)), T5Attention(config, vb.pp(0).pp("SelfAttention"))
        self.cross_norm = self.cross_attn = None
        if decoder:
            self.cross_norm = _norm(config, vb.pp(1))
            self.cross_attn = T5Attention(config, vb.pp(1).pp("EncDecAttention"), cross=True)
        last = vb.pp(2 if decoder else 1)
        self.ff_norm, self.ff = _norm(config, last), T5FeedForward(config, last.pp("DenseReluDense"))

    def forward(self, x: c.Tensor, scores, cache: "T5Cache | None" = None, layer: int = 0) -> c.Tensor:
        x = x + self.self_attn(self.self_norm(x), scores, cache.self_attn if cache is not None else None, layer)
        if self.cross_attn is not None:
            keys, values = cache.cross[layer]
            x = x + self.cross_attn.cross(self.cross_norm(x), keys, values, cache.encoder_mask)
        return x + self.ff(self.ff_norm(x))


class T5Stack(nn.Module):
    """The encoder's or the decoder's blocks, their relative bias (kept by the first block) and final norm."""

    def __init__(self, config: T5Config, vb: nn.VarBuilder, decoder: bool, progress=None):
        super().__init__()
        count = config.num_decoder_layers if decoder else config.num_layers
        blocks = []
        for i in range(count):
            blocks.append(T5Block(config, vb.pp("block").pp(i), decoder))
            if progress is not None:
                progress.update()
        self.block = nn.ModuleList(blocks)
        self.bias = RelativeBias(config, vb.pp("block.0.layer.0.SelfAttention.relative_attention_bias"),
                                 bidirectional=not decoder)
        self.final_layer_norm = nn.RmsNorm(config.d_model, config.layer_norm_epsilon, vb=vb.pp("final_layer_norm"))

    def encode(self, x: c.Tensor, attention_mask=None) -> c.Tensor:
        b, s, _ = x.shape
        scores = self.bias(0, s, s)
        keep = kept_keys(attention_mask, b, s)
        if keep is not None:  # padding: -inf added to its keys' scores
            padding = np.where(keep, 0.0, -np.inf).astype(np.float32)
            scores = scores + c.from_numpy(padding).to_dtype(x.dtype).to_device(x.device)
        for block in self.block:
            x = block(x, scores)
        return self.final_layer_norm(x)

    def decode(self, x: c.Tensor, cache: "T5Cache") -> c.Tensor:
        """The new positions' states, after the cached ones (the cache takes their keys and values)."""
        t, start = x.shape[1], cache.length
        scores = self.bias(start, t, start + t)
        if t > 1:
            scores = scores + causal_scores(start, t, start + t, x.dtype, x.device)
        for i, block in enumerate(self.block):
            x = block(x, scores, cache, i)
        cache.self_attn.advance(t)
        return x


@dataclass
class T5Cache:
    """What the decoder keeps for one batch of encoded inputs: its self-attention keys and values
    (growing), the cross-attention keys and values of every layer (computed once from the encoder's
    states) and the mask of the encoder's padding."""

    self_attn: KVCache
    cross: list
    encoder_mask: c.Tensor | None

    @property
    def length(self) -> int:
        return self.self_attn.length

    @property
    def max_length(self) -> int:
        return self.self_attn.max_length


def _embedding_table(vb: nn.VarBuilder) -> str:
    """Where a checkpoint keeps the token embeddings: ``shared`` (T5's own), or only a stack's copy."""
    for name in ("shared", "encoder.embed_tokens", "decoder.embed_tokens"):
        if vb.contains_tensor(f"{name}.weight"):
            return name
    return "shared"  # missing: reported by the layer that asks for it


class _Pretrained:
    """from_pretrained for the T5 classes: a folder with config.json and safetensors (or PyTorch)
    weights, or a Hugging Face repo id."""

    @classmethod
    def from_pretrained(cls, repo_or_path: str | os.PathLike, dtype=None, device="cpu", progress=None,
                        revision: str | None = None):
        from .pretrained import load_folder

        _, cfg, vb = load_folder(repo_or_path, dtype or "f32", device, revision)
        config = T5Config.from_dict(cfg)
        if progress is not None:
            decoder = config.num_decoder_layers if cls is T5ForConditionalGeneration else 0
            progress.total = config.num_layers + decoder
        with c.no_grad():
            return cls(config, vb, progress).eval()

    def _ids(self, input_ids) -> c.Tensor:
        return as_ids(input_ids, self.device)


class T5EncoderModel(_Pretrained, nn.Module):
    """The encoder alone: ``model(input_ids, attention_mask)`` gives its last hidden states
    (batch, length, d_model). It loads from an encoder's checkpoint or a whole T5's."""

    def __init__(self, config: T5Config, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, vb=vb.pp(_embedding_table(vb)))
        self.encoder = T5Stack(config, vb.pp("encoder"), decoder=False, progress=progress)

    @property
    def device(self):
        return self.shared.weight.device

    def forward(self, input_ids, attention_mask=None) -> c.Tensor:
        return self.encoder.encode(self.shared(self._ids(input_ids)), attention_mask)


class T5ForConditionalGeneration(_Pretrained, nn.Module):
    """Encoder, decoder and output layer. ``model(input_ids, decoder_input_ids, attention_mask)`` gives
    the logits (batch, decoder length, vocab) in one call; generation encodes once (``encode``),
    makes a cache from the encoder's states (``new_cache``) and feeds the decoder token by token
    (``decode``): see :func:`candle_models.seq2seq.generate_seq2seq_ids`. With tied embeddings the
    table lives in the output layer, transposed for decoding."""

    is_encoder_decoder = True

    def __init__(self, config: T5Config, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        tied = not vb.contains_tensor("lm_head.weight")
        table = vb.pp(_embedding_table(vb))
        self.shared = None if tied else nn.Embedding(config.vocab_size, config.d_model, vb=table)
        self.encoder = T5Stack(config, vb.pp("encoder"), decoder=False, progress=progress)
        self.decoder = T5Stack(config, vb.pp("decoder"), decoder=True, progress=progress)
        self.lm_head = TransposedLinear(table if tied else vb.pp("lm_head"), config.d_model, (config.vocab_size,),
                                        False)
        self.output_scale = config.d_model ** -0.5 if config.scale_decoder_outputs else None

    @property
    def dtype(self):
        return self.lm_head.weight_t.dtype

    @property
    def device(self):
        return self.lm_head.weight_t.device

    def embed(self, ids: c.Tensor) -> c.Tensor:
        return self.shared(ids) if self.shared is not None else F.embedding(ids, self.lm_head.weight_t.t())

    def encode(self, input_ids, attention_mask=None) -> c.Tensor:
        """The encoder's last hidden states (batch, length, d_model)."""
        return self.encoder.encode(self.embed(self._ids(input_ids)), attention_mask)

    def new_cache(self, encoder_hidden: c.Tensor, attention_mask=None, capacity: int = 256) -> T5Cache:
        """A decoder cache for the encoded inputs: the cross-attention keys and values of every layer
        are computed here, once."""
        b, s, _ = encoder_hidden.shape
        keep = kept_keys(attention_mask, b, s)
        mask = None if keep is None else c.from_numpy(keep.astype(np.uint8)).to_device(self.device)
        cross = [block.cross_attn.keys_values(encoder_hidden) for block in self.decoder.block]
        return T5Cache(KVCache(self.config, b, capacity, self.dtype, self.device), cross, mask)

    def decode(self, decoder_input_ids, cache: T5Cache, last_only: bool = False) -> c.Tensor:
        """Logits for the decoder ids (batch, length) after the positions the cache holds; ``last_only``
        computes the last position's only (batch, 1, vocab)."""
        ids = self._ids(decoder_input_ids)
        if ids.shape[0] != cache.self_attn.shape[0]:
            raise ShapeError(f"decoder ids for {ids.shape[0]} sequences, a cache of {cache.self_attn.shape[0]} "
                             "encoded inputs")
        x = self.decoder.decode(self.embed(ids), cache)
        if last_only:
            x = x.narrow(1, x.shape[1] - 1, 1)
        x = self.decoder.final_layer_norm(x)
        if self.output_scale is not None:
            x = x * self.output_scale
        return self.lm_head(x)

    def forward(self, input_ids, decoder_input_ids, attention_mask=None) -> c.Tensor:
        encoded = self.encode(input_ids, attention_mask)
        ids = self._ids(decoder_input_ids)
        return self.decode(ids, self.new_cache(encoded, attention_mask, capacity=ids.shape[1]))
