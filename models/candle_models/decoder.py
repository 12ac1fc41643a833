"""What the causal language models share around their layers: the KV cache,
the ids they take, the context check, which keys each query sees, and the
positions whose logits they compute. Each family subclasses :class:`DecoderLM` and says which weight its
activations follow (``_anchor``). A config gives the cache its shape through
``num_hidden_layers``, ``num_key_value_heads``, ``head_dim`` and
``context_length``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.errors import ArgumentError, ShapeError
from candle_api.ops.shape import copy_into

from .batch_cache import BatchKVCache, visible_keys


class KVCache:
    """Keys and values of every layer, (batch, kv_heads, capacity, head_dim)
    buffers written in place: a decoding step copies one position per layer
    instead of concatenating the whole cache. Grows by doubling, so memory
    follows the positions cached, up to ``max_length`` (the model's context
    length), which it never passes."""

    def __init__(self, config, batch: int = 1, capacity: int = 256, dtype="f32", device="cpu"):
        self.max_length = config.context_length
        self.shape = (batch, config.num_key_value_heads, min(max(capacity, 1), self.max_length), config.head_dim)
        self.dtype, self.device = dtype, device
        self.keys = [c.zeros(self.shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.values = [c.zeros(self.shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.length = 0

    def _grow(self, needed: int) -> None:
        b, h, cap, d = self.shape
        self.shape = (b, h, max(needed, min(2 * cap, self.max_length)), d)
        for buffers in (self.keys, self.values):
            for i, old in enumerate(buffers):
                new = c.zeros(self.shape, dtype=self.dtype, device=self.device)
                copy_into(new, new.narrow(2, 0, cap)._layout, old)
                buffers[i] = new

    def update(self, layer: int, k: c.Tensor, v: c.Tensor) -> tuple[c.Tensor, c.Tensor]:
        """Writes this step's keys/values after the cached ones; returns views of all of them."""
        t = k.shape[2]
        end = self.length + t
        if end > self.shape[2]:
            self._grow(end)
        keys, values = self.keys[layer], self.values[layer]
        copy_into(keys, keys._layout.narrow(2, self.length, t), k)
        copy_into(values, values._layout.narrow(2, self.length, t), v)
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)

    def advance(self, t: int) -> None:
        self.length += t


def attention_mask(q_len: int, offset: int, window: int | None, device) -> c.Tensor:
    """u8 (q_len, offset + q_len): what the new positions offset .. offset + q_len - 1 see."""
    keep = visible_keys(np.arange(offset, offset + q_len), offset + q_len, window)
    return c.from_numpy(keep.astype(np.uint8)).to_device(device)


def causal_attention(q: c.Tensor, k: c.Tensor, v: c.Tensor, cache=None, **options) -> c.Tensor:
    """Attention of q's new positions over the keys (the cached ones, then theirs): one query sees every
    key, a prompt alone is causal, and new positions after cached ones take a mask; in a
    :class:`BatchKVCache` each sequence sees its own positions. ``options`` go to
    scaled_dot_product_attention."""
    t, s = q.shape[2], k.shape[2]
    if isinstance(cache, BatchKVCache):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=cache.mask(None), **options)
    if t == 1 or s == t:
        return F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, **options)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask(t, s - t, None, q.device), **options)


@dataclass(frozen=True)
class Positions:
    """Where a forward's ``length`` tokens sit: after ``offset`` cached positions (every sequence alike),
    or, decoding a :class:`BatchKVCache`, one token per sequence at its own position (``rows``)."""

    offset: int
    length: int
    rows: tuple | None = None

    def rope(self, rotary) -> tuple:
        """A rotary embedding's cos/sin tables for these positions."""
        return rotary.cos_sin_at(self.rows) if self.rows is not None else rotary.cos_sin(self.offset, self.length)

    def ids(self, device) -> c.Tensor:
        """The positions as u32: (batch, 1) for a batch cache's rows, else (length,)."""
        if self.rows is not None:
            return c.tensor([[p] for p in self.rows], dtype="u32", device=device)
        return c.arange(self.offset, self.offset + self.length, dtype="u32", device=device)


def prepare(model, input_ids, cache) -> tuple[c.Tensor, int, int]:
    """(ids as a (batch, seq) tensor on the model's device, seq, the cached positions before them),
    refusing a forward that would pass the context length."""
    ids = input_ids if isinstance(input_ids, c.Tensor) else c.tensor(input_ids, dtype="u32", device=model.device)
    if ids.rank != 2:
        raise ValueError(f"input_ids must be (batch, seq), got shape {ids.shape}")
    t = ids.shape[1]
    offset = cache.length if cache is not None else 0
    limit = model.config.context_length
    if offset + t > limit:
        raise ArgumentError(f"{offset + t} positions ({offset} cached + {t} new) exceed the model's "
                            f"context length of {limit}")
    return ids, t, offset


def finish(x: c.Tensor, cache, t: int, last_only: bool) -> c.Tensor:
    """The hidden states whose logits are wanted, once the cache has taken this forward's positions."""
    if cache is not None:
        cache.advance(t)
    return x.narrow(1, t - 1, 1) if last_only else x


class DecoderLM(nn.Module):
    """``model(ids)`` gives the logits (batch, seq, vocab); with a :class:`KVCache` (``model.new_cache()``)
    the positions continue after the cached ones, and ``last_only`` computes the last position's only."""

    def _anchor(self) -> c.Tensor:
        raise NotImplementedError

    @property
    def dtype(self):
        return self._anchor().dtype

    @property
    def device(self):
        return self._anchor().device

    def new_cache(self, batch: int = 1, capacity: int = 256) -> KVCache:
        return KVCache(self.config, batch, capacity, self.dtype, self.device)

    def new_batch_cache(self, max_batch: int) -> BatchKVCache:
        """A cache for continuous batching: sequences prefilled one by one (``admit``), then decoded
        together, one token each per forward of (batch, 1) ids."""
        return BatchKVCache(self.config, max_batch, self.dtype, self.device)

    def start(self, input_ids, cache) -> tuple[c.Tensor, Positions]:
        """(ids as a (batch, seq) tensor, their positions), refusing a forward that would pass the context
        length or, with a batch cache, that is not one token per sequence."""
        if isinstance(cache, BatchKVCache):
            rows = tuple(cache.begin_step())
            ids, t, _ = prepare(self, input_ids, None)
            if ids.shape != (cache.batch, 1):
                raise ShapeError(f"a batch cache of {cache.batch} sequences takes ids of shape ({cache.batch}, 1), "
                                 f"got {ids.shape}")
            return ids, Positions(0, t, rows)
        ids, t, offset = prepare(self, input_ids, cache)
        return ids, Positions(offset, t)

    @classmethod
    def from_pretrained(cls, repo_or_path: str | os.PathLike, dtype=None, device="cpu", progress=None,
                        revision: str | None = None):
        """From a GGUF file, a folder with config.json and safetensors (or PyTorch) weights, or a Hugging
        Face repo id (offline from the cache). ``dtype`` None keeps a GGUF's quantized weights in their
        blocks (f32 activations) and loads other checkpoints in f32; a dtype dequantizes (or converts)
        every weight to it. ``progress`` (a :class:`~candle_models.progress.Progress`-like object with
        ``update``) advances once per layer built."""
        from .gguf_models import find_gguf, gguf_checkpoint
        from .hub import resolve
        from .pretrained import load_folder

        path = resolve(repo_or_path, revision=revision)
        gguf = find_gguf(path)
        if gguf is not None:
            cfg, tensors = gguf_checkpoint(gguf, quantized=dtype is None)
            vb = nn.VarBuilder.from_tensors(tensors, dtype or "f32", device)
        else:
            _, cfg, vb = load_folder(path, dtype or "f32", device)
        config = cls.config_class.from_dict(cfg)
        if progress is not None:
            progress.total = config.num_hidden_layers
        with c.no_grad():
            return cls(config, vb, progress).eval()
