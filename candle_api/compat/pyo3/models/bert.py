"""candle-pyo3's ``candle.models.bert``: BERT written with the namespace's
``nn``, under candle-pyo3's class names, with transformers' weight names
(``BertModel(config).load_state_dict(load_safetensors(path))``). Linear
weights may be QTensors (they stay quantized). The fuller BERT family of
candle-models (``candle_models.bert``) is the one to use in new code."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .... import functional as F
from ....ops.creation import arange, zeros
from ....ops.elementwise import where
from ....tensor import Tensor
from ..nn import Embedding, LayerNorm, Linear, Module, ModuleList

#: transformers' activation names ("gelu" is the exact, erf form).
ACTIVATIONS = {"gelu": F.gelu_erf, "gelu_new": F.gelu, "gelu_pytorch_tanh": F.gelu, "relu": F.relu, "silu": F.silu}


@dataclass
class Config:
    """A BERT config.json's fields (transformers' defaults)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    use_cache: bool = True
    classifier_dropout: Optional[float] = None
    model_type: Optional[str] = "bert"


class BertSelfAttention(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = Linear(config.hidden_size, config.hidden_size)
        self.key = Linear(config.hidden_size, config.hidden_size)
        self.value = Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x: Tensor) -> Tensor:
        """(batch, length, hidden) -> (batch, heads, length, head size)."""
        return x.reshape(x.shape[:-1] + (self.num_attention_heads, self.attention_head_size)).transpose(1, 2)

    def forward(self, hidden_states: Tensor, attention_mask=None) -> Tensor:
        q, k, v = (self.transpose_for_scores(layer(hidden_states)) for layer in (self.query, self.key, self.value))
        scores = q.matmul(k.t()) * (1.0 / math.sqrt(self.attention_head_size))
        if attention_mask is not None:  # additive, (batch, length): 0 for a token, -inf for padding
            scores = scores.broadcast_add(attention_mask.reshape((scores.shape[0], 1, 1, scores.shape[-1])))
        context = F.softmax(scores, -1).matmul(v)
        return context.transpose(1, 2).flatten_from(-2)


class BertSelfOutput(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(hidden_states) + input_tensor)


class BertAttention(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states: Tensor, attention_mask=None) -> Tensor:
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACTIVATIONS[config.hidden_act]

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.dense = Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(hidden_states) + input_tensor)


class BertLayer(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states: Tensor, attention_mask=None) -> Tensor:
        attended = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.layer = ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states: Tensor, attention_mask=None) -> Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class BertEmbeddings(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = arange(input_ids.shape[-1], dtype="u32", device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x.broadcast_add(self.position_embeddings(positions)))


class BertPooler(Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return F.tanh(self.dense(hidden_states[:, 0]))


class BertModel(Module):
    """``forward(input_ids, token_type_ids, attention_mask=None)`` ->
    ``(last hidden states, pooled output or None)``; attention_mask is 1 for a
    token and 0 for padding."""

    def __init__(self, config: Config, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """As Module's; transformers' ``embeddings.position_ids`` (the range the
        positions are) is not state here, and is skipped when a checkpoint has it."""
        return super().load_state_dict({k: v for k, v in state_dict.items() if k != "embeddings.position_ids"},
                                       strict, assign)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask=None):
        if attention_mask is not None:
            keep = zeros(attention_mask.shape, dtype=self.embeddings.LayerNorm.weight.dtype, device=input_ids.device)
            attention_mask = where(attention_mask, keep, float("-inf"))
        hidden = self.encoder(self.embeddings(input_ids, token_type_ids), attention_mask)
        return hidden, (self.pooler(hidden) if self.pooler is not None else None)
