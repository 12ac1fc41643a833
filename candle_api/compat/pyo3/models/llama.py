"""candle-pyo3's ``candle.models.llama``: a Llama whose weights stay quantized
(``QuantizedLlama(hparams, tensors)``, tensors named as in llama.cpp's old
GGML files: ``tok_embeddings.weight``, ``layers.N.attention.wq.weight``...),
written with the namespace's ``nn``. ``forward(tokens, index_pos)`` runs
tokens (batch, length) placed at ``index_pos`` with the layers' key/value
cache and returns the logits of the last position. The rotary embedding
rotates interleaved pairs, as GGUF/GGML Llama weights are laid out.
``candle_models.llama`` is the full implementation to use in new code."""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

from .... import functional as F
from ....ops.creation import arange
from ....ops.shape import cat
from ....quantized import QTensor
from ....tensor import Tensor
from ..nn import Module, ModuleList


def precompute_freqs_cis(hparams: Dict[str, Any], freq_base: float, max_seq_len: int) -> Tuple[Tensor, Tensor]:
    """(cos, sin) of the rotary angles, each (max_seq_len, head_dim / 2): position
    p turns pair i by p * freq_base ** (-2i / head_dim)."""
    head_dim = hparams["n_embd"] // hparams["n_head"]
    theta = (arange(0, head_dim, 2, dtype="f64") * (-math.log(freq_base) / head_dim)).exp()
    angles = arange(max_seq_len, dtype="f64").unsqueeze(1).matmul(theta.unsqueeze(0))
    return angles.cos().to_dtype("f32"), angles.sin().to_dtype("f32")


class RmsNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight, the weight decoded from its QTensor."""

    def __init__(self, qtensor: QTensor, eps: float = 1e-5):
        super().__init__()
        self.weight = qtensor.dequantize()
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.weight, self.eps)


class QuantizedLayer(Module):
    """One decoder layer: attention with a key/value cache, then SwiGLU."""

    def __init__(self, layer_idx: int, hparams: Dict[str, Any], all_tensors: Dict[str, QTensor],
                 cos_sin: Tuple[Tensor, Tensor]):
        super().__init__()
        p = f"layers.{layer_idx}"
        for name, key in (("attention_wq", "attention.wq"), ("attention_wk", "attention.wk"),
                          ("attention_wv", "attention.wv"), ("attention_wo", "attention.wo"),
                          ("ffw1", "feed_forward.w1"), ("ffw2", "feed_forward.w2"), ("ffw3", "feed_forward.w3")):
            self._quantizable_buffers.add(name)
            setattr(self, name, all_tensors[f"{p}.{key}.weight"])
        eps = hparams.get("rms_norm_eps", 1e-5)
        self.attn_norm = RmsNorm(all_tensors[f"{p}.attention_norm.weight"], eps)
        self.ffn_norm = RmsNorm(all_tensors[f"{p}.ffn_norm.weight"], eps)
        self.n_head = hparams["n_head"]
        self.n_kv_head = hparams.get("n_head_kv", self.n_head)
        self.head_dim = hparams["n_embd"] // self.n_head
        self.kv_cache = None
        self._non_persistent_buffers_set.update(("cos", "sin"))
        self.cos, self.sin = cos_sin

    def forward(self, x: Tensor, mask, index_pos: int) -> Tensor:
        x = x + self.forward_attn(self.attn_norm(x), mask, index_pos)
        h = self.ffn_norm(x)
        return x + self.ffw2.matmul_t(F.silu(self.ffw1.matmul_t(h)) * self.ffw3.matmul_t(h))

    def forward_attn(self, x: Tensor, mask, index_pos: int) -> Tensor:
        b, t, _ = x.shape

        def heads(w, n):
            return w.matmul_t(x).reshape((b, t, n, self.head_dim)).transpose(1, 2)

        q = self.apply_rotary_emb(heads(self.attention_wq, self.n_head), index_pos)
        k = self.apply_rotary_emb(heads(self.attention_wk, self.n_kv_head), index_pos)
        v = heads(self.attention_wv, self.n_kv_head)
        if self.kv_cache is not None and index_pos > 0:
            k, v = cat([self.kv_cache[0], k], 2), cat([self.kv_cache[1], v], 2)
        self.kv_cache = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                           enable_gqa=self.n_kv_head != self.n_head)
        return self.attention_wo.matmul_t(y.transpose(1, 2).reshape((b, t, self.n_head * self.head_dim)))

    def apply_rotary_emb(self, x: Tensor, index_pos: int) -> Tensor:
        """Rotates x's interleaved pairs by the angles of positions index_pos..."""
        t = x.shape[2]
        return F.rope_i(x.contiguous(), self.cos.narrow(0, index_pos, t), self.sin.narrow(0, index_pos, t))


class QuantizedLlama(Module):
    def __init__(self, hparams: Dict[str, Any], all_tensors: Dict[str, QTensor]):
        super().__init__()
        self.tok_embeddings = all_tensors["tok_embeddings.weight"].dequantize()
        self.norm = RmsNorm(all_tensors["norm.weight"], hparams.get("rms_norm_eps", 1e-5))
        self._quantizable_buffers.add("output")
        self.output = all_tensors["output.weight"]
        cos_sin = precompute_freqs_cis(hparams, hparams.get("rope_freq", 10000.0), hparams["context_length"])
        self.layers = ModuleList(QuantizedLayer(i, hparams, all_tensors, cos_sin) for i in range(hparams["n_layer"]))

    def forward(self, token: Tensor, index_pos: int) -> Tensor:
        """Logits (batch, vocab) of the last of tokens (batch, length) placed at index_pos."""
        b, t = token.shape
        x = self.tok_embeddings.embedding(token)
        mask = None  # the first chunk: causal; later chunks see every cached key and the causal part of theirs
        if index_pos > 0:
            rows = arange(index_pos, index_pos + t, dtype="i64").unsqueeze(1)
            mask = arange(index_pos + t, dtype="i64").unsqueeze(0) <= rows
        for layer in self.layers:
            x = layer(x, mask, index_pos)
        return self.output.matmul_t(self.norm(x).narrow(1, t - 1, 1).squeeze(1))
