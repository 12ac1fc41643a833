"""Rotary position embeddings of the Llama family: the inverse frequencies
for each ``rope_scaling`` variant (transformers' ``ROPE_INIT_FUNCTIONS``),
and cos/sin tables grown on demand."""

from __future__ import annotations

import math

import numpy as np

import candle_api as c

#: rope types and what they do to the inverse frequencies.
ROPE_TYPES = {
    "default": "none",
    "linear": "positions divided by `factor` (inverse frequencies divided by it)",
    "llama3": "Llama 3.1's: low frequencies divided by `factor`, high ones kept, a smooth ramp between",
    "dynamic": "NTK-aware: the base grows with the sequence once it passes max_position_embeddings",
    "freq_factors": "llama.cpp's per-frequency divisors (a GGUF's rope_freqs tensor)",
}


def _base_inv_freq(base: float, dim: int) -> np.ndarray:
    # float32 throughout, as transformers computes them: the tables then match it to the last bits.
    return (1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))).astype(np.float32)


def _llama3(inv_freq: np.ndarray, scaling: dict) -> np.ndarray:
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None, seq_len: int = 0,
                  max_positions: int = 0) -> np.ndarray:
    """The (head_dim / 2,) inverse frequencies; ``seq_len`` matters only to "dynamic"."""
    kind = (scaling or {}).get("rope_type", "default")
    if kind == "dynamic" and seq_len > max_positions:
        factor = scaling["factor"]
        theta = theta * ((factor * seq_len / max_positions) - (factor - 1)) ** (head_dim / (head_dim - 2))
    inv_freq = _base_inv_freq(theta, head_dim)
    if kind in ("default", "dynamic"):
        return inv_freq
    if kind == "linear":
        return (inv_freq / np.float32(scaling["factor"])).astype(np.float32)
    if kind == "llama3":
        return _llama3(inv_freq, scaling)
    if kind == "freq_factors":
        return (inv_freq / np.asarray(scaling["factors"], dtype=np.float32)).astype(np.float32)
    raise ValueError(f"rope_scaling type {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)})")


class RotaryEmbedding:
    """cos/sin tables of shape (positions, head_dim / 2), in the model's
    dtype, for the fused ``rope`` kernel (which rotates the two halves of
    each head, as transformers' Llama does)."""

    def __init__(self, head_dim: int, theta: float, scaling: dict | None, max_positions: int, dtype, device):
        self.head_dim, self.theta, self.scaling, self.max_positions = head_dim, theta, scaling, max_positions
        self.dtype, self.device = dtype, device
        self.dynamic = (scaling or {}).get("rope_type") == "dynamic"
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling)
        self._cos = self._sin = None

    def _tables(self, positions: np.ndarray, inv_freq: np.ndarray):
        freqs = positions.astype(np.float32)[:, None] * inv_freq[None, :]
        return (c.from_numpy(np.cos(freqs)).to_dtype(self.dtype).to_device(self.device),
                c.from_numpy(np.sin(freqs)).to_dtype(self.dtype).to_device(self.device))

    def cos_sin(self, offset: int, length: int):
        """The tables for positions offset .. offset + length - 1."""
        end = offset + length
        if self.dynamic and end > self.max_positions:
            # transformers recomputes the frequencies for the whole current length: so do we, for these positions.
            inv_freq = rope_inv_freq(self.head_dim, self.theta, self.scaling, end, self.max_positions)
            return self._tables(np.arange(offset, end), inv_freq)
        if self._cos is None or end > self._cos.shape[0]:
            size = max(end, 2 * (self._cos.shape[0] if self._cos is not None else 256))
            self._cos, self._sin = self._tables(np.arange(size), self.inv_freq)
        return self._cos.narrow(0, offset, length), self._sin.narrow(0, offset, length)

    def cos_sin_at(self, positions) -> tuple:
        """Tables (len(positions), 1, head_dim / 2) for one token per sequence, each at its own
        position: the rows ``cos_sin(p, 1)`` gives for each p, for a batch decoded together."""
        if len(positions) == 1:  # a lone sequence: a narrow of the table, as its own forward would take
            cos, sin = self.cos_sin(positions[0], 1)
            return cos.unsqueeze(0), sin.unsqueeze(0)
        end = max(positions) + 1
        if self.dynamic and end > self.max_positions:
            cos, sin = zip(*(self.cos_sin(p, 1) for p in positions))  # each position its own frequencies
            return c.cat(cos, 0).unsqueeze(1), c.cat(sin, 0).unsqueeze(1)
        self.cos_sin(0, end)  # grows the tables to cover every position
        rows = c.tensor(list(positions), dtype="u32", device=self.device)
        return self._cos.index_select(rows, 0).unsqueeze(1), self._sin.index_select(rows, 0).unsqueeze(1)
