"""Sentence embeddings with a BERT-family encoder, as sentence-transformers
computes them: tokenize with the model's tokenizer.json, run batches padded
to their longest text, pool the token states over the attention mask (the
model's Pooling config; mean by default) and L2-normalize."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

import candle_api as c
from candle_api.errors import FormatError

from .bert import PREFIXES, BertConfig, BertModel
from .distilbert import DistilBertConfig, DistilBertModel
from .pretrained import load_folder
from .progress import Progress
from .tokenizer import check_text

#: model_type -> (config class, encoder class)
ENCODERS = {**{t: (BertConfig, BertModel) for t in PREFIXES}, "distilbert": (DistilBertConfig, DistilBertModel)}

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens")
#: sentence-transformers' older Pooling config keys, in the order it concatenates their outputs.
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def _read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(path, None, f"not valid JSON: {exc}") from None


def pooling_modes(folder: Path) -> tuple[str, ...]:
    """The pooling of a sentence-transformers folder: its Pooling module's
    config (found through modules.json), or mean pooling without one."""
    modules = folder / "modules.json"
    config = {}
    if modules.exists():
        for module in _read_json(modules):
            if str(module.get("type", "")).endswith("Pooling"):
                config = _read_json(folder / module.get("path", "") / "config.json")
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in LEGACY_POOLING_KEYS.items() if config.get(key)] or ["mean"]
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    unsupported = [m for m in modes if m not in POOLING_MODES]
    if unsupported:
        raise ValueError(f"{folder}: pooling {', '.join(unsupported)} is not supported "
                         f"(supported: {', '.join(POOLING_MODES)})")
    return modes


def pool(hidden: c.Tensor, mask: c.Tensor, modes) -> c.Tensor:
    """Sentence vectors (batch, hidden * len(modes)) from token states
    (batch, length, hidden) and a float mask (batch, length) of 1s and 0s."""
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(hidden[:, 0])
        elif mode == "max":
            out.append(c.where(mask.unsqueeze(-1) != 0, hidden, float("-inf")).amax(1))
        else:
            summed = (mask.unsqueeze(1) @ hidden).squeeze(1)  # the masked sum over tokens as one product
            count = mask.sum_keepdim(1).clamp(min=1e-9)
            out.append(summed / (count if mode == "mean" else count.sqrt()))
    return out[0] if len(out) == 1 else c.cat(out, -1)


def l2_normalize(x: c.Tensor, eps: float = 1e-12) -> c.Tensor:
    """Rows scaled to unit L2 norm (PyTorch's F.normalize)."""
    return x / x.sqr().sum_keepdim(-1).sqrt().clamp(min=eps)


def _max_length(folder: Path, model_limit: int) -> int:
    """sentence-transformers' max_seq_length when the folder sets one, within what the model allows."""
    path = folder / "sentence_bert_config.json"
    configured = _read_json(path).get("max_seq_length") if path.exists() else None
    return min(configured or model_limit, model_limit)


def _tokenizer(folder: Path, max_length: int):
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.exists():
        raise FormatError(path, None, "the model folder has no tokenizer.json (a fast tokenizer file is needed)")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()  # each batch is padded to its own longest text below
    tokenizer.enable_truncation(max_length)
    return tokenizer


class SentenceEmbedder:
    """``SentenceEmbedder.from_pretrained(path).embed(texts)``: one vector per text."""

    def __init__(self, model, tokenizer, pad_id: int, pooling=("mean",)) -> None:
        self.model, self.tokenizer, self.pad_id, self.pooling = model, tokenizer, pad_id, tuple(pooling)

    @classmethod
    def from_pretrained(cls, repo_or_path: str | os.PathLike, *, device="cpu", dtype="f32",
                        revision: str | None = None, progress: bool = False) -> "SentenceEmbedder":
        """From a local folder or a Hugging Face repo (or its cache when
        offline). ``progress`` shows a loading bar on a terminal's stderr."""
        folder, config, vb = load_folder(repo_or_path, dtype, device, revision)
        model_type = config.get("model_type", "bert")
        if model_type not in ENCODERS:
            raise ValueError(f"{folder}: model_type {model_type!r} has no sentence encoder here "
                             f"(supported: {', '.join(ENCODERS)})")
        config_class, model_class = ENCODERS[model_type]
        cfg = config_class.from_dict(config)
        with Progress(cfg.num_layers, "loading", enabled=None if progress else False) as bar:
            model = model_class(cfg, vb, progress=bar).eval()
        return cls(model, _tokenizer(folder, _max_length(folder, cfg.max_tokens)), cfg.pad_token_id,
                   pooling_modes(folder))

    @property
    def dimension(self) -> int:
        hidden = self.model.embeddings.word_embeddings.embedding_dim
        return hidden * len(self.pooling)

    def tokenize(self, texts) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and attention mask (batch, longest text), padded on the right."""
        return self._pad(self.encode(texts))

    def encode(self, texts) -> list[list[int]]:
        """The token ids of each text (truncated to the model's max_seq_length)."""
        texts = [check_text(text, f"texts[{i}]") for i, text in enumerate(texts)]
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def _pad(self, sequences) -> tuple[np.ndarray, np.ndarray]:
        longest = max(len(s) for s in sequences)
        ids = np.full((len(sequences), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(sequences), longest), dtype=np.float32)
        for row, seq in enumerate(sequences):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        return ids, mask

    def embed(self, texts, batch_size: int = 32, normalize: bool = True, progress: bool = False) -> c.Tensor:
        """Vectors (len(texts), dimension) in f32, in the order of ``texts``.
        Texts are batched longest first, so a batch holds texts of similar
        lengths and little padding; ``progress`` shows a bar on a terminal."""
        return self.embed_ids(self.encode([texts] if isinstance(texts, str) else texts), batch_size, normalize,
                              progress)

    def embed_ids(self, sequences, batch_size: int = 32, normalize: bool = True, progress: bool = False) -> c.Tensor:
        """:meth:`embed` for texts already tokenized by :meth:`encode` (so a caller that also needs the
        token counts tokenizes once)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not sequences:
            return c.zeros((0, self.dimension))
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
        device = self.model.embeddings.word_embeddings.weight.device
        chunks = []
        with c.no_grad(), Progress(len(sequences), "embedding", enabled=None if progress else False) as bar:
            for start in range(0, len(order), batch_size):
                ids, mask = self._pad([sequences[i] for i in order[start:start + batch_size]])
                mask = c.from_numpy(mask).to_device(device)
                hidden = self.model(ids, mask).to_dtype("f32")
                vectors = pool(hidden, mask, self.pooling)
                chunks.append(l2_normalize(vectors) if normalize else vectors)
                bar.update(len(ids))
            return c.cat(chunks, 0)[c.from_numpy(np.argsort(order))]

