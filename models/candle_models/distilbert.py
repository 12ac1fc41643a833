"""DistilBERT: BERT's layers under other names (no token types, no pooler),
with masked-LM, sequence-classification and token-classification heads."""

from __future__ import annotations

from dataclasses import dataclass

import candle_api as c
from candle_api import functional as F
from candle_api import nn

from .bert import ClassificationHead, Embeddings, Encoder, EncoderLayer, MaskedLMHead, SelfAttention, activation
from .bert import as_ids, base_builder
from .config import config_from_dict
from .pretrained import Pretrained

EPS = 1e-12  # transformers' DistilBERT hard-codes its layer norms' epsilon


@dataclass
class DistilBertConfig:
    """The fields of a DistilBERT config.json this code uses (transformers' defaults)."""

    vocab_size: int = 30522
    dim: int = 768
    n_layers: int = 6
    n_heads: int = 12
    hidden_dim: int = 3072
    activation: str = "gelu"
    max_position_embeddings: int = 512
    pad_token_id: int = 0
    model_type: str = "distilbert"
    num_labels: int = 2

    @classmethod
    def from_dict(cls, config: dict) -> "DistilBertConfig":
        cfg = config_from_dict(cls, config)
        if cfg.model_type != "distilbert":
            raise ValueError(f"model_type {cfg.model_type!r} is not DistilBERT (use candle_models.bert for the "
                             "BERT family)")
        if cfg.dim % cfg.n_heads:
            raise ValueError(f"dim {cfg.dim} does not divide into {cfg.n_heads} attention heads")
        activation(cfg.activation)
        return cfg

    @property
    def num_layers(self) -> int:
        return self.n_layers

    @property
    def max_tokens(self) -> int:
        return self.max_position_embeddings


def _layer(config: DistilBertConfig, vb: nn.VarBuilder) -> EncoderLayer:
    dim, att = config.dim, vb.pp("attention")
    return EncoderLayer(
        SelfAttention(dim, config.n_heads, att.pp("q_lin"), att.pp("k_lin"), att.pp("v_lin"), att.pp("out_lin")),
        nn.LayerNorm(dim, EPS, vb=vb.pp("sa_layer_norm")),
        nn.Linear(dim, config.hidden_dim, vb=vb.pp("ffn.lin1")),
        nn.Linear(config.hidden_dim, dim, vb=vb.pp("ffn.lin2")),
        nn.LayerNorm(dim, EPS, vb=vb.pp("output_layer_norm")),
        activation(config.activation),
    )


class DistilBertModel(Pretrained, nn.Module):
    """``model(input_ids, attention_mask)`` gives the last hidden states
    (batch, length, dim). ``progress`` (a Progress) advances once per layer loaded."""

    config_class = DistilBertConfig

    def __init__(self, config: DistilBertConfig, vb: nn.VarBuilder, progress=None) -> None:
        super().__init__()
        self.config = config
        vb = base_builder(vb, "distilbert")
        self.embeddings = Embeddings(config.vocab_size, config.dim, config.max_position_embeddings, 0, EPS,
                                     vb.pp("embeddings"))
        layers = []
        for i in range(config.n_layers):
            layers.append(_layer(config, vb.pp(f"transformer.layer.{i}")))
            if progress is not None:
                progress.update()
        self.transformer = Encoder(layers)

    def forward(self, input_ids, attention_mask=None) -> c.Tensor:
        ids = as_ids(input_ids, self.embeddings.word_embeddings.weight.device)
        return self.transformer(self.embeddings(ids), attention_mask)


class DistilBertForMaskedLM(Pretrained, nn.Module):
    """Logits (batch, length, vocab) over the vocabulary at every position."""

    config_class = DistilBertConfig

    def __init__(self, config: DistilBertConfig, vb: nn.VarBuilder) -> None:
        super().__init__()
        self.distilbert = DistilBertModel(config, vb)
        self.head = MaskedLMHead(config.dim, EPS, activation(config.activation), vb, "vocab_transform",
                                 "vocab_layer_norm", "vocab_projector", "vocab_projector.bias",
                                 self.distilbert.embeddings.word_embeddings.weight)

    def forward(self, input_ids, attention_mask=None) -> c.Tensor:
        return self.head(self.distilbert(input_ids, attention_mask))


class DistilBertForSequenceClassification(Pretrained, nn.Module):
    """Logits (batch, num_labels) from the first token."""

    config_class = DistilBertConfig

    def __init__(self, config: DistilBertConfig, vb: nn.VarBuilder) -> None:
        super().__init__()
        self.distilbert = DistilBertModel(config, vb)
        self.head = ClassificationHead(nn.Linear(config.dim, config.dim, vb=vb.pp("pre_classifier")),
                                       nn.Linear(config.dim, config.num_labels, vb=vb.pp("classifier")), F.relu)

    def forward(self, input_ids, attention_mask=None) -> c.Tensor:
        return self.head(self.distilbert(input_ids, attention_mask))


class DistilBertForTokenClassification(Pretrained, nn.Module):
    """Logits (batch, length, num_labels) at every position."""

    config_class = DistilBertConfig

    def __init__(self, config: DistilBertConfig, vb: nn.VarBuilder) -> None:
        super().__init__()
        self.distilbert = DistilBertModel(config, vb)
        self.classifier = nn.Linear(config.dim, config.num_labels, vb=vb.pp("classifier"))

    def forward(self, input_ids, attention_mask=None) -> c.Tensor:
        return self.classifier(self.distilbert(input_ids, attention_mask))
