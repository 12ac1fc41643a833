"""Whisper's encoder-decoder, as transformers' WhisperForConditionalGeneration
(its weight names; from CTranslate2's model.bin through :mod:`.ct2`).

The encoder runs once per 30 s window: two convolutions (the second halves
the 3000 mel frames to 1500 positions), sinusoidal positions, pre-norm
transformer layers. The decoder runs once per token with a KV cache for its
self-attention; the cross-attention keys and values depend only on the audio,
so :meth:`WhisperForConditionalGeneration.cross_kv` computes them once per
window and every decoding step (every beam) reads them.

Projections keep their weights transposed, (in, out) contiguous, as
:class:`candle_models.llama.TransposedLinear` does for decoding speed, and
fuse q/k/v (self-attention) and k/v (cross-attention) into one product.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.errors import ArgumentError, DTypeError, IndexOutOfRangeError, ShapeError

from ..config import config_from_dict
from ..decoder import KVCache, causal_attention

#: config.json ``activation_function``s (transformers' names; its "gelu" is the exact one).
ACTIVATIONS = {"gelu": F.gelu_erf, "gelu_new": F.gelu, "relu": F.relu}


@dataclass
class WhisperConfig:
    """The fields of a Whisper config.json this code uses (transformers' defaults, tiny's sizes)."""

    vocab_size: int = 51865
    num_mel_bins: int = 80
    d_model: int = 384
    encoder_layers: int = 4
    encoder_attention_heads: int = 6
    encoder_ffn_dim: int = 1536
    decoder_layers: int = 4
    decoder_attention_heads: int = 6
    decoder_ffn_dim: int = 1536
    max_source_positions: int = 1500
    max_target_positions: int = 448
    activation_function: str = "gelu"
    scale_embedding: bool = False
    model_type: str = "whisper"

    @classmethod
    def from_dict(cls, config: dict) -> "WhisperConfig":
        cfg = config_from_dict(cls, config)
        if cfg.model_type != "whisper":
            raise ValueError(f"model_type {cfg.model_type!r} is not Whisper")
        if cfg.activation_function not in ACTIVATIONS:
            raise ValueError(f"activation_function {cfg.activation_function!r} is not supported "
                             f"(supported: {', '.join(ACTIVATIONS)})")
        for heads in (cfg.encoder_attention_heads, cfg.decoder_attention_heads):
            if cfg.d_model % heads:
                raise ValueError(f"d_model {cfg.d_model} does not divide into {heads} attention heads")
        return cfg

    # What decoder.KVCache reads: the decoder's shape.
    @property
    def num_hidden_layers(self) -> int:
        return self.decoder_layers

    @property
    def num_key_value_heads(self) -> int:
        return self.decoder_attention_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.decoder_attention_heads

    @property
    def context_length(self) -> int:
        return self.max_target_positions

    @property
    def n_frames(self) -> int:
        """Mel frames of one window: the second convolution halves them to max_source_positions."""
        return 2 * self.max_source_positions


class Projection(nn.Module):
    """x @ W^T + b with W kept transposed; ``parts`` (a VarBuilder, out size, has a bias) are fused into one
    product, a part without a bias contributing zeros to the fused bias."""

    def __init__(self, in_features: int, parts):
        super().__init__()
        self.weight_t = nn.Parameter(c.cat([vb.get((n, in_features), "weight").t() for vb, n, _ in parts], 1))
        biased = [has_bias for _, _, has_bias in parts]
        self.bias = None
        if any(biased):
            dtype, device = parts[0][0].dtype, parts[0][0].device
            self.bias = nn.Parameter(c.cat([vb.get((n,), "bias") if has_bias else c.zeros((n,), dtype=dtype,
                                                                                            device=device)
                                            for vb, n, has_bias in parts], 0))

    def forward(self, x: c.Tensor) -> c.Tensor:
        y = x.matmul(self.weight_t)
        return y + self.bias if self.bias is not None else y


def _heads(x: c.Tensor, heads: int) -> c.Tensor:
    """(batch, length, heads * d) -> (batch, heads, length, d), a view."""
    b, t, width = x.shape
    return x.reshape(b, t, heads, width // heads).transpose(1, 2)


def _merge(y: c.Tensor) -> c.Tensor:
    """(batch, heads, length, d) -> (batch, length, heads * d)."""
    b, h, t, d = y.shape
    return y.transpose(1, 2).reshape(b, t, h * d)


class SelfAttention(nn.Module):
    """Multi-head self-attention, q/k/v in one product (transformers' k_proj has no bias)."""

    def __init__(self, d_model: int, heads: int, vb: nn.VarBuilder):
        super().__init__()
        self.heads, self.d_model = heads, d_model
        self.qkv = Projection(d_model, [(vb.pp("q_proj"), d_model, True), (vb.pp("k_proj"), d_model, False),
                                        (vb.pp("v_proj"), d_model, True)])
        self.out_proj = Projection(d_model, [(vb.pp("out_proj"), d_model, True)])

    def forward(self, x: c.Tensor, cache: KVCache | None = None, layer: int = 0) -> c.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if cache is None:  # the encoder: every position sees every other
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            k, v = cache.update(layer, k, v)
            y = causal_attention(q, k, v)
        return self.out_proj(_merge(y))


class CrossAttention(nn.Module):
    """The decoder's attention over the audio: keys and values made once per window by :meth:`kv`."""

    def __init__(self, d_model: int, heads: int, vb: nn.VarBuilder):
        super().__init__()
        self.heads = heads
        self.q_proj = Projection(d_model, [(vb.pp("q_proj"), d_model, True)])
        self.kv = Projection(d_model, [(vb.pp("k_proj"), d_model, False), (vb.pp("v_proj"), d_model, True)])
        self.out_proj = Projection(d_model, [(vb.pp("out_proj"), d_model, True)])

    def keys_values(self, audio: c.Tensor) -> tuple[c.Tensor, c.Tensor]:
        b, s, d = audio.shape
        kv = self.kv(audio).reshape(b, s, 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return kv[0].contiguous(), kv[1].contiguous()

    def forward(self, x: c.Tensor, k: c.Tensor, v: c.Tensor) -> c.Tensor:
        return self.out_proj(_merge(F.scaled_dot_product_attention(_heads(self.q_proj(x), self.heads), k, v)))


class MLP(nn.Module):
    def __init__(self, d_model: int, ffn: int, act, vb: nn.VarBuilder):
        super().__init__()
        self.fc1 = Projection(d_model, [(vb.pp("fc1"), ffn, True)])
        self.fc2 = Projection(ffn, [(vb.pp("fc2"), d_model, True)])
        self.act = act

    def forward(self, x: c.Tensor) -> c.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def _norm(d_model: int, vb: nn.VarBuilder) -> nn.LayerNorm:
    return nn.LayerNorm(d_model, 1e-5, vb=vb)


class EncoderLayer(nn.Module):
    def __init__(self, config: WhisperConfig, vb: nn.VarBuilder):
        super().__init__()
        d = config.d_model
        self.self_attn_layer_norm = _norm(d, vb.pp("self_attn_layer_norm"))
        self.self_attn = SelfAttention(d, config.encoder_attention_heads, vb.pp("self_attn"))
        self.final_layer_norm = _norm(d, vb.pp("final_layer_norm"))
        self.mlp = MLP(d, config.encoder_ffn_dim, ACTIVATIONS[config.activation_function], vb)

    def forward(self, x: c.Tensor) -> c.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.mlp(self.final_layer_norm(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: WhisperConfig, vb: nn.VarBuilder):
        super().__init__()
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn_layer_norm = _norm(d, vb.pp("self_attn_layer_norm"))
        self.self_attn = SelfAttention(d, heads, vb.pp("self_attn"))
        self.encoder_attn_layer_norm = _norm(d, vb.pp("encoder_attn_layer_norm"))
        self.encoder_attn = CrossAttention(d, heads, vb.pp("encoder_attn"))
        self.final_layer_norm = _norm(d, vb.pp("final_layer_norm"))
        self.mlp = MLP(d, config.decoder_ffn_dim, ACTIVATIONS[config.activation_function], vb)

    def forward(self, x: c.Tensor, cross: tuple, cache: KVCache, layer: int) -> c.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), cache, layer)
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), *cross)
        return x + self.mlp(self.final_layer_norm(x))


def _ids(values, device) -> c.Tensor:
    """Token ids from nested lists or an array, refusing what is not integers (1.5 would become 1)."""
    arr = np.asarray(values)
    if arr.size and arr.dtype.kind not in "iu":
        raise DTypeError(f"token ids must be integers, got {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise IndexOutOfRangeError(f"token id {arr.min()} is negative")
    return c.from_numpy(np.ascontiguousarray(arr, dtype=np.uint32)).to_device(device)


def _stack(layer, n: int, config: WhisperConfig, vb: nn.VarBuilder, progress) -> nn.ModuleList:
    """``n`` layers from ``layers.0`` on; ``progress`` advances once per layer built."""
    layers = []
    for i in range(n):
        layers.append(layer(config, vb.pp("layers").pp(i)))
        if progress is not None:
            progress.update()
    return nn.ModuleList(layers)


class WhisperEncoder(nn.Module):
    def __init__(self, config: WhisperConfig, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        d = config.d_model
        self.conv1 = nn.Conv1d(config.num_mel_bins, d, 3, padding=1, vb=vb.pp("conv1"))
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1, vb=vb.pp("conv2"))
        self.embed_positions = vb.pp("embed_positions").get((config.max_source_positions, d), "weight")
        self.layers = _stack(EncoderLayer, config.encoder_layers, config, vb, progress)
        self.layer_norm = _norm(d, vb.pp("layer_norm"))
        self.act = ACTIVATIONS[config.activation_function]

    def forward(self, mel: c.Tensor) -> c.Tensor:
        """(batch, n_mels, 3000) log-mel frames -> (batch, 1500, d_model) audio features."""
        want = (self.config.num_mel_bins, self.config.n_frames)
        if mel.rank != 3 or mel.shape[1:] != want:
            raise ShapeError(f"the encoder takes log-mel frames of shape (batch, {want[0]}, {want[1]}) "
                             f"(30 s windows), got {mel.shape}")
        x = self.act(self.conv2(self.act(self.conv1(mel.to_dtype(self.embed_positions.dtype)))))
        x = x.transpose(1, 2) + self.embed_positions
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class WhisperDecoder(nn.Module):
    """The decoder stack; its token embeddings live (transposed) in the model's output projection."""

    def __init__(self, config: WhisperConfig, vb: nn.VarBuilder, progress=None):
        super().__init__()
        d = config.d_model
        self.embed_positions = vb.pp("embed_positions").get((config.max_target_positions, d), "weight")
        self.layers = _stack(DecoderLayer, config.decoder_layers, config, vb, progress)
        self.layer_norm = _norm(d, vb.pp("layer_norm"))


class WhisperForConditionalGeneration(nn.Module):
    """``model(mel, decoder_input_ids)`` gives the logits (batch, seq, vocab) as transformers' does; for
    decoding, :meth:`encode` a window once, :meth:`cross_kv` its keys and values once, then
    :meth:`decode` token by token with a cache from :meth:`new_cache`."""

    def __init__(self, config: WhisperConfig, vb: nn.VarBuilder, progress=None):
        super().__init__()
        self.config = config
        if progress is not None:
            progress.total = config.encoder_layers + config.decoder_layers
        self.encoder = WhisperEncoder(config, vb.pp("model.encoder"), progress)
        self.decoder = WhisperDecoder(config, vb.pp("model.decoder"), progress)
        head = vb.pp("proj_out") if vb.contains_tensor("proj_out.weight") else vb.pp("model.decoder.embed_tokens")
        self.proj_out = Projection(config.d_model, [(head, config.vocab_size, False)])

    @property
    def dtype(self):
        return self.proj_out.weight_t.dtype

    @property
    def device(self):
        return self.proj_out.weight_t.device

    def new_cache(self, batch: int = 1, capacity: int = 64) -> KVCache:
        return KVCache(self.config, batch, capacity, self.dtype, self.device)

    def encode(self, mel) -> c.Tensor:
        """Audio features of log-mel windows (batch, n_mels, 3000), a Tensor or an array."""
        if not isinstance(mel, c.Tensor):
            mel = c.from_numpy(mel)
        return self.encoder(mel.to_device(self.device))

    def cross_kv(self, audio: c.Tensor) -> list[tuple[c.Tensor, c.Tensor]]:
        """Each decoder layer's cross-attention keys and values (batch, heads, 1500, head_dim)."""
        return [layer.encoder_attn.keys_values(audio) for layer in self.decoder.layers]

    def decode(self, input_ids, cross: list, cache: KVCache | None = None, last_only: bool = False) -> c.Tensor:
        """Logits (batch, seq, vocab) of the tokens ``input_ids`` (batch, seq) after the ones cached;
        ``cross`` (from :meth:`cross_kv`) may have batch 1 for any batch of tokens."""
        ids = input_ids if isinstance(input_ids, c.Tensor) else _ids(input_ids, self.device)
        if ids.rank != 2:
            raise ShapeError(f"decoder input ids must be (batch, seq), got shape {ids.shape}")
        t = ids.shape[1]
        offset = cache.length if cache is not None else 0
        if offset + t > self.config.max_target_positions:
            raise ArgumentError(f"{offset + t} decoder positions exceed Whisper's {self.config.max_target_positions}")
        if cache is None:
            cache = self.new_cache(ids.shape[0], t)
        dec = self.decoder
        x = F.embedding(ids, self.proj_out.weight_t.t()) + dec.embed_positions.narrow(0, offset, t)
        for i, layer in enumerate(dec.layers):
            x = layer(x, cross[i], cache, i)
        cache.advance(t)
        if last_only:
            x = x.narrow(1, t - 1, 1)
        return self.proj_out(dec.layer_norm(x))

    def forward(self, mel, decoder_input_ids) -> c.Tensor:
        return self.decode(decoder_input_ids, self.cross_kv(self.encode(mel)))

    @classmethod
    def from_pretrained(cls, repo_or_path: str | os.PathLike, dtype="f32", device="cpu", progress=None,
                        revision: str | None = None) -> "WhisperForConditionalGeneration":
        """From a folder of transformers' layout (config.json, safetensors or PyTorch weights), a
        CTranslate2 folder (model.bin, config.json: faster-whisper's models) or a Hugging Face repo id."""
        from .checkpoint import load_checkpoint

        config, vb = load_checkpoint(repo_or_path, dtype, device, revision)
        with c.no_grad():
            return cls(config, vb, progress).eval()
