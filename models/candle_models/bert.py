"""The BERT family: BERT, RoBERTa and XLM-RoBERTa through one code path
(RoBERTa differs only in its position ids and weight names), with masked-LM,
sequence-classification and token-classification heads. Loads checkpoints
saved by transformers, with or without the ``bert.``/``roberta.`` prefix.

The encoder keeps activations as (batch * length, hidden) matrices, so every
projection is one GEMM over all tokens; q, k and v come from one fused
projection and go to the fused attention kernel as strided views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.errors import DTypeError, ShapeError
from candle_api.nn.functional import linear
from candle_api.nn.var_builder import get_parameter

from .config import config_from_dict
from .pretrained import Pretrained

#: transformers' activation names; its "gelu" is the exact (erf) one.
ACTIVATIONS = {
    "gelu": F.gelu_erf,
    "gelu_new": F.gelu,
    "gelu_pytorch_tanh": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}

#: model_type -> the prefix of the base model's weights in checkpoints with a head.
PREFIXES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta"}


def activation(name: str):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unsupported activation {name!r} (supported: {', '.join(ACTIVATIONS)})") from None


@dataclass
class BertConfig:
    """The fields of a BERT-family config.json this code uses (transformers' defaults)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    model_type: str = "bert"
    position_embedding_type: str = "absolute"
    num_labels: int = 2

    @classmethod
    def from_dict(cls, config: dict) -> "BertConfig":
        cfg = config_from_dict(cls, config)
        if cfg.model_type not in PREFIXES:
            raise ValueError(f"model_type {cfg.model_type!r} is not in the BERT family "
                             f"({', '.join(PREFIXES)}); DistilBERT has its own classes")
        if cfg.position_embedding_type != "absolute":
            raise ValueError(f"position_embedding_type {cfg.position_embedding_type!r} is not supported "
                             "(only 'absolute')")
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError(f"hidden_size {cfg.hidden_size} does not divide into "
                             f"{cfg.num_attention_heads} attention heads")
        activation(cfg.hidden_act)
        return cfg

    @property
    def num_layers(self) -> int:
        return self.num_hidden_layers

    @property
    def is_roberta(self) -> bool:
        """RoBERTa's positions count from padding_idx + 1, skipping padding."""
        return PREFIXES[self.model_type] == "roberta"

    @property
    def prefix(self) -> str:
        return PREFIXES[self.model_type]

    @property
    def max_tokens(self) -> int:
        """The longest input the position table allows."""
        if self.is_roberta:
            return self.max_position_embeddings - self.pad_token_id - 1
        return self.max_position_embeddings


# ---- inputs ------------------------------------------------------------------------------------

def as_ids(ids, device) -> c.Tensor:
    """Token ids (batch, length) as an integer tensor on ``device`` (numpy arrays and lists accepted)."""
    if not isinstance(ids, c.Tensor):
        array = np.asarray(ids)
        if array.size and array.dtype.kind not in "iu":  # 1.5 would silently become token 1
            raise DTypeError(f"token ids must be integers, got {array.dtype}")
        ids = c.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
    if ids.dtype.is_float:
        raise DTypeError(f"token ids must be integers, got {ids.dtype}")
    if ids.rank != 2:
        raise ShapeError(f"token ids must be (batch, length), got shape {ids.shape}")
    return ids.to_device(device)


def key_mask(attention_mask, batch: int, length: int, device) -> c.Tensor | None:
    """The attention mask (batch, length), nonzero for real tokens, as the u8
    (batch, 1, 1, length) key mask of scaled_dot_product_attention; None when
    nothing is masked (attention then skips the mask)."""
    if attention_mask is None:
        return None
    mask = attention_mask
    if not isinstance(mask, c.Tensor):
        mask = c.from_numpy(np.ascontiguousarray(mask))
    if mask.shape != (batch, length):
        raise ShapeError(f"attention_mask has shape {mask.shape}, the token ids {(batch, length)}")
    keep = mask.to_device(device) != 0
    return None if keep.min_all().item() else keep.reshape(batch, 1, 1, length)


def roberta_position_ids(ids: c.Tensor, padding_idx: int) -> c.Tensor:
    """transformers' create_position_ids_from_input_ids: real tokens count from
    padding_idx + 1, padding tokens take padding_idx."""
    real = (ids != padding_idx).to_dtype("i64")
    return real.cumsum(1) * real + padding_idx


# ---- layers shared by the family (and DistilBERT) -----------------------------------------------

class Embeddings(nn.Module):
    """Word + position (+ token type) embeddings, then a layer norm."""

    def __init__(self, vocab_size: int, hidden: int, max_positions: int, type_vocab_size: int, eps: float,
                 vb: nn.VarBuilder, padding_idx: int | None = None, max_tokens: int | None = None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, vb=vb.pp("word_embeddings"))
        self.position_embeddings = nn.Embedding(max_positions, hidden, vb=vb.pp("position_embeddings"))
        self.token_type_embeddings = (nn.Embedding(type_vocab_size, hidden, vb=vb.pp("token_type_embeddings"))
                                      if type_vocab_size else None)
        self.LayerNorm = nn.LayerNorm(hidden, eps, vb=vb.pp("LayerNorm"))
        self.padding_idx = padding_idx  # set: RoBERTa's positions
        self.max_tokens = max_tokens or max_positions

    def forward(self, ids: c.Tensor, token_type_ids=None) -> c.Tensor:
        length = ids.shape[1]
        if length > self.max_tokens:
            raise ShapeError(f"the input has {length} tokens, more than the {self.max_tokens} positions "
                             "the model has: truncate it")
        x = self.word_embeddings(ids)
        if self.padding_idx is None:
            x = x + self.position_embeddings.weight[:length]
        else:
            x = x + self.position_embeddings(roberta_position_ids(ids, self.padding_idx))
        if self.token_type_embeddings is not None:
            if token_type_ids is None:  # all type 0: one row, broadcast
                x = x + self.token_type_embeddings.weight[0]
            else:
                x = x + self.token_type_embeddings(as_ids(token_type_ids, ids.device))
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    """Multi-head self-attention over (batch * length, hidden) rows. The q, k
    and v projections are concatenated into one at load time."""

    def __init__(self, hidden: int, heads: int, query: nn.VarBuilder, key: nn.VarBuilder, value: nn.VarBuilder,
                 out: nn.VarBuilder) -> None:
        super().__init__()
        self.heads = heads
        parts = (query, key, value)
        fused = {"weight": c.cat([p.get((hidden, hidden), "weight") for p in parts], 0),
                 "bias": c.cat([p.get(hidden, "bias") for p in parts], 0)}
        self.qkv = nn.Linear(hidden, 3 * hidden, vb=nn.VarBuilder.from_tensors(fused, out.dtype, out.device))
        self.out = nn.Linear(hidden, hidden, vb=out)

    def forward(self, x: c.Tensor, batch: int, mask: c.Tensor | None) -> c.Tensor:
        rows, hidden = x.shape
        length = rows // batch
        # (rows, 3 * hidden) -> (3, batch, heads, length, head_dim): views, read in place by the kernel.
        qkv = self.qkv(x).reshape(batch, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=mask)
        return self.out(context.transpose(1, 2).reshape(rows, hidden))


class EncoderLayer(nn.Module):
    """A post-norm transformer layer: x = norm(x + attention(x)), then x = norm(x + ffn(x))."""

    def __init__(self, attention: SelfAttention, attention_norm: nn.LayerNorm, ffn_in: nn.Linear,
                 ffn_out: nn.Linear, ffn_norm: nn.LayerNorm, act) -> None:
        super().__init__()
        self.attention, self.attention_norm = attention, attention_norm
        self.ffn_in, self.ffn_out, self.ffn_norm = ffn_in, ffn_out, ffn_norm
        self.act = act

    def forward(self, x: c.Tensor, batch: int, mask: c.Tensor | None) -> c.Tensor:
        x = self.attention_norm(x + self.attention(x, batch, mask))
        return self.ffn_norm(x + self.ffn_out(self.act(self.ffn_in(x))))


class Encoder(nn.Module):
    """The stack of layers, on (batch, length, hidden) with an optional (batch, length) attention mask."""

    def __init__(self, layers) -> None:
        super().__init__()
        self.layer = nn.ModuleList(layers)

    def forward(self, x: c.Tensor, attention_mask=None) -> c.Tensor:
        batch, length, hidden = x.shape
        mask = key_mask(attention_mask, batch, length, x.device)
        x = x.reshape(batch * length, hidden)
        for layer in self.layer:
            x = layer(x, batch, mask)
        return x.reshape(batch, length, hidden)


def base_builder(vb: nn.VarBuilder, prefix: str) -> nn.VarBuilder:
    """Where a checkpoint keeps the base model's weights: at the root (a base
    model's checkpoint, such as all-MiniLM-L6-v2's) or under ``prefix`` (one
    saved with a head)."""
    probe = "embeddings.word_embeddings.weight"
    if not vb.contains_tensor(probe) and vb.pp(prefix).contains_tensor(probe):
        return vb.pp(prefix)
    return vb  # a missing tensor is reported by the layer that asks for it


class MaskedLMHead(nn.Module):
    """dense -> activation -> layer norm -> decoder. The decoder's weight is
    the word embeddings (tied) unless the checkpoint has its own."""

    def __init__(self, hidden: int, eps: float, act, vb: nn.VarBuilder, dense: str, norm: str, decoder: str,
                 bias: str, tied: c.Tensor) -> None:
        super().__init__()
        vocab = tied.shape[0]
        self.dense = nn.Linear(hidden, hidden, vb=vb.pp(dense))
        self.norm = nn.LayerNorm(hidden, eps, vb=vb.pp(norm))
        self.act = act
        self.decoder_weight = (get_parameter(vb.pp(decoder), (vocab, hidden), "weight", None)
                               if vb.pp(decoder).contains_tensor("weight") else tied)
        self.decoder_bias = get_parameter(vb, vocab, bias if vb.contains_tensor(bias) else f"{decoder}.bias",
                                             None)

    def forward(self, hidden: c.Tensor) -> c.Tensor:
        return linear(self.norm(self.act(self.dense(hidden))), self.decoder_weight, self.decoder_bias)


class ClassificationHead(nn.Module):
    """out(act(dense(first token))): BERT's pooler + classifier, RoBERTa's
    classification head, DistilBERT's pre_classifier + classifier."""

    def __init__(self, dense: nn.Linear, out: nn.Linear, act) -> None:
        super().__init__()
        self.dense, self.out, self.act = dense, out, act

    def forward(self, hidden: c.Tensor) -> c.Tensor:
        return self.out(self.act(self.dense(hidden[:, 0])))


# ---- models -------------------------------------------------------------------------------------

def _bert_layer(config: BertConfig, vb: nn.VarBuilder) -> EncoderLayer:
    hidden, eps = config.hidden_size, config.layer_norm_eps
    names = vb.pp("attention.self")
    return EncoderLayer(
        SelfAttention(hidden, config.num_attention_heads, names.pp("query"), names.pp("key"), names.pp("value"),
                      vb.pp("attention.output.dense")),
        nn.LayerNorm(hidden, eps, vb=vb.pp("attention.output.LayerNorm")),
        nn.Linear(hidden, config.intermediate_size, vb=vb.pp("intermediate.dense")),
        nn.Linear(config.intermediate_size, hidden, vb=vb.pp("output.dense")),
        nn.LayerNorm(hidden, eps, vb=vb.pp("output.LayerNorm")),
        activation(config.hidden_act),
    )


class BertModel(Pretrained, nn.Module):
    """BERT, RoBERTa or XLM-RoBERTa (config.model_type decides):
    ``model(input_ids, attention_mask, token_type_ids)`` gives the last hidden
    states (batch, length, hidden). The pooler (``model.pool(hidden)``) is
    loaded when ``add_pooling_layer`` is True, or None and the checkpoint has
    one. ``progress`` (a Progress) advances once per layer loaded."""

    config_class = BertConfig

    def __init__(self, config: BertConfig, vb: nn.VarBuilder, add_pooling_layer: bool | None = None,
                 progress=None) -> None:
        super().__init__()
        self.config = config
        vb = base_builder(vb, config.prefix)
        self.embeddings = Embeddings(config.vocab_size, config.hidden_size, config.max_position_embeddings,
                                     config.type_vocab_size, config.layer_norm_eps, vb.pp("embeddings"),
                                     config.pad_token_id if config.is_roberta else None, config.max_tokens)
        layers = []
        for i in range(config.num_hidden_layers):
            layers.append(_bert_layer(config, vb.pp(f"encoder.layer.{i}")))
            if progress is not None:
                progress.update()
        self.encoder = Encoder(layers)
        pooler = vb.pp("pooler.dense")
        if add_pooling_layer is None:
            add_pooling_layer = pooler.contains_tensor("weight")
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size, vb=pooler) if add_pooling_layer else None

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> c.Tensor:
        ids = as_ids(input_ids, self.embeddings.word_embeddings.weight.device)
        return self.encoder(self.embeddings(ids, token_type_ids), attention_mask)

    def pool(self, hidden: c.Tensor) -> c.Tensor:
        """BERT's pooled output: tanh(dense(first token))."""
        if self.pooler is None:
            raise ValueError("this model was loaded without a pooler (the checkpoint has no pooler.dense)")
        return F.tanh(self.pooler(hidden[:, 0]))


class BertForMaskedLM(Pretrained, nn.Module):
    """Logits (batch, length, vocab) over the vocabulary at every position."""

    config_class = BertConfig

    def __init__(self, config: BertConfig, vb: nn.VarBuilder) -> None:
        super().__init__()
        self.bert = BertModel(config, vb, add_pooling_layer=False)
        hidden, eps, tied = config.hidden_size, config.layer_norm_eps, self.bert.embeddings.word_embeddings.weight
        if config.is_roberta:  # transformers' RobertaLMHead always uses the exact gelu
            self.head = MaskedLMHead(hidden, eps, F.gelu_erf, vb.pp("lm_head"), "dense", "layer_norm", "decoder",
                                     "bias", tied)
        else:
            self.head = MaskedLMHead(hidden, eps, activation(config.hidden_act), vb.pp("cls.predictions"),
                                     "transform.dense", "transform.LayerNorm", "decoder", "bias", tied)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> c.Tensor:
        return self.head(self.bert(input_ids, attention_mask, token_type_ids))


class BertForSequenceClassification(Pretrained, nn.Module):
    """Logits (batch, num_labels) from the first token."""

    config_class = BertConfig

    def __init__(self, config: BertConfig, vb: nn.VarBuilder) -> None:
        super().__init__()
        hidden = config.hidden_size
        # BERT classifies the pooler's output; RoBERTa's head has a dense layer of its own.
        self.bert = BertModel(config, vb, add_pooling_layer=not config.is_roberta)
        if config.is_roberta:
            dense = nn.Linear(hidden, hidden, vb=vb.pp("classifier.dense"))
            out = nn.Linear(hidden, config.num_labels, vb=vb.pp("classifier.out_proj"))
        else:
            dense, out = self.bert.pooler, nn.Linear(hidden, config.num_labels, vb=vb.pp("classifier"))
        self.head = ClassificationHead(dense, out, F.tanh)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> c.Tensor:
        return self.head(self.bert(input_ids, attention_mask, token_type_ids))


class BertForTokenClassification(Pretrained, nn.Module):
    """Logits (batch, length, num_labels) at every position."""

    config_class = BertConfig

    def __init__(self, config: BertConfig, vb: nn.VarBuilder) -> None:
        super().__init__()
        self.bert = BertModel(config, vb, add_pooling_layer=False)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels, vb=vb.pp("classifier"))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> c.Tensor:
        return self.classifier(self.bert(input_ids, attention_mask, token_type_ids))


# RoBERTa and XLM-RoBERTa are the same classes: config.json's model_type selects their rules.
RobertaModel = XLMRobertaModel = BertModel
RobertaForMaskedLM = XLMRobertaForMaskedLM = BertForMaskedLM
RobertaForSequenceClassification = XLMRobertaForSequenceClassification = BertForSequenceClassification
RobertaForTokenClassification = XLMRobertaForTokenClassification = BertForTokenClassification
