"""The Vision Transformer as transformers' ``ViTModel`` and
``ViTForImageClassification``, from config.json + safetensors (or PyTorch)
weights in the hub's layout (``vit.encoder.layer.N.attention.attention.query``...).

An image (batch, channels, height, width) is cut into patch_size x
patch_size patches, each projected to a token (the patch-embedding
convolution, whose stride is its kernel, is one matrix product over the
flattened patches); a learned CLS token goes first and learned position
embeddings are added; pre-norm encoder layers follow, then a final
LayerNorm. The classifier reads the CLS token's state; ViTModel's optional
pooler is tanh(dense(CLS)). Another image size works with
``interpolate_pos_encoding=True``: the position embeddings of the patch grid
are resized bicubically as transformers does (PyTorch's ``interpolate``,
a = -0.75, edges clamped). Pixels come from :mod:`candle_models.image`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import candle_api as c
from candle_api import functional as F
from candle_api import nn
from candle_api.errors import ShapeError

from .bert import activation
from .config import config_from_dict
from .llama import TransposedLinear
from .pretrained import Pretrained

#: config.json ``model_type``s this module runs.
MODEL_TYPES = ("vit",)


@dataclass
class ViTConfig:
    """The fields of a ViT config.json this code uses (transformers' defaults)."""

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    image_size: int = 224
    patch_size: int = 16
    num_channels: int = 3
    qkv_bias: bool = True
    pooler_output_size: int | None = None
    pooler_act: str = "tanh"
    model_type: str = "vit"
    num_labels: int = 2
    id2label: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, config: dict) -> "ViTConfig":
        cfg = config_from_dict(cls, config)
        if cfg.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {cfg.model_type!r} is not ViT (supported: {', '.join(MODEL_TYPES)})")
        for name in ("image_size", "patch_size"):
            if not isinstance(getattr(cfg, name), int):
                raise ValueError(f"{name} {getattr(cfg, name)!r} is not supported (only square sizes, one integer)")
        if not 1 <= cfg.patch_size <= cfg.image_size:
            raise ValueError(f"patch_size {cfg.patch_size} must be from 1 to image_size ({cfg.image_size})")
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError(f"hidden_size {cfg.hidden_size} does not divide into {cfg.num_attention_heads} heads")
        activation(cfg.hidden_act)
        return cfg

    @property
    def labels(self) -> list[str]:
        """The class names by index (id2label), ``LABEL_i`` where the config names none."""
        names = {int(k): v for k, v in self.id2label.items()}
        return [names.get(i, f"LABEL_{i}") for i in range(self.num_labels)]


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """PyTorch's bicubic convolution weights of the 4 taps around a point at fraction t: (len(t), 4)."""
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def _bicubic_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out_size, in_size): PyTorch's bicubic upsampling along one axis (align_corners False), taps
    past the edges clamped to the edge."""
    source = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
    first = np.floor(source).astype(np.int64)
    weights = _cubic_weights(source - first)
    matrix = np.zeros((out_size, in_size))
    for k in range(4):
        np.add.at(matrix, (np.arange(out_size), np.clip(first - 1 + k, 0, in_size - 1)), weights[:, k])
    return matrix


def interpolate_positions(grid: np.ndarray, height: int, width: int) -> np.ndarray:
    """Position embeddings of a (side, side, dim) patch grid resized to (height, width, dim)."""
    rows, cols = _bicubic_matrix(grid.shape[0], height), _bicubic_matrix(grid.shape[1], width)
    return np.einsum("hi,wj,ijd->hwd", rows, cols, grid.astype(np.float64)).astype(np.float32)


class ViTEmbeddings(nn.Module):
    """Patch projection, CLS token and position embeddings."""

    def __init__(self, config: ViTConfig, vb: nn.VarBuilder):
        super().__init__()
        d, p, ch = config.hidden_size, config.patch_size, config.num_channels
        self.patch, self.channels = p, ch
        self.grid = config.image_size // p
        self.cls_token = nn.Parameter(vb.get((1, 1, d), "cls_token"))
        self.position_embeddings = nn.Parameter(vb.get((1, self.grid ** 2 + 1, d), "position_embeddings"))
        projection = vb.pp("patch_embeddings.projection")
        # the convolution's kernel (d, c, p, p) as a (c * p * p, d) matrix over flattened patches
        self.projection_t = nn.Parameter(projection.get((d, ch, p, p), "weight").reshape(d, ch * p * p).t()
                                         .contiguous())
        self.projection_bias = nn.Parameter(projection.get((d,), "bias"))
        self._resized = {}  # (rows, cols) -> interpolated position embeddings

    def positions(self, rows: int, cols: int) -> c.Tensor:
        if (rows, cols) == (self.grid, self.grid):
            return self.position_embeddings
        if (rows, cols) not in self._resized:
            table = self.position_embeddings.numpy()[0]
            grid = table[1:].reshape(self.grid, self.grid, -1)
            patches = interpolate_positions(grid, rows, cols).reshape(rows * cols, -1)
            resized = np.concatenate([table[:1], patches])[None]
            self._resized[(rows, cols)] = c.from_numpy(resized).to_dtype(self.position_embeddings.dtype).to_device(
                self.position_embeddings.device)
        return self._resized[(rows, cols)]

    def forward(self, pixel_values: c.Tensor, interpolate_pos_encoding: bool = False) -> c.Tensor:
        if pixel_values.rank != 4 or pixel_values.shape[1] != self.channels:
            raise ShapeError(f"pixel values must be (batch, {self.channels}, height, width), "
                             f"got shape {pixel_values.shape}")
        b, ch, h, w = pixel_values.shape
        p = self.patch
        rows, cols = h // p, w // p
        if not interpolate_pos_encoding and (rows * p, cols * p, h) != (self.grid * p,) * 3:
            raise ShapeError(f"the model takes {self.grid * p} x {self.grid * p} images, got {h} x {w} "
                             "(resize them, or pass interpolate_pos_encoding=True)")
        if rows == 0 or cols == 0:
            raise ShapeError(f"an image of {h} x {w} pixels holds no {p} x {p} patch")
        x = pixel_values.narrow(2, 0, rows * p).narrow(3, 0, cols * p)
        patches = x.reshape(b, ch, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, ch * p * p)
        tokens = patches.matmul(self.projection_t) + self.projection_bias
        cls = self.cls_token.broadcast_as((b, 1, self.cls_token.shape[-1]))
        return c.cat([cls, tokens], 1) + self.positions(rows, cols)


class ViTLayer(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + fc2(act(fc1(norm(x))))."""

    def __init__(self, config: ViTConfig, vb: nn.VarBuilder):
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.heads = config.num_attention_heads
        self.layernorm_before = nn.LayerNorm(d, eps, vb=vb.pp("layernorm_before"))
        self.qkv = TransposedLinear(vb.pp("attention.attention"), d, (d, d, d), config.qkv_bias,
                                    ("query", "key", "value"))
        self.out = TransposedLinear(vb.pp("attention.output.dense"), d, (d,), True)
        self.layernorm_after = nn.LayerNorm(d, eps, vb=vb.pp("layernorm_after"))
        self.fc1 = TransposedLinear(vb.pp("intermediate.dense"), d, (config.intermediate_size,), True)
        self.fc2 = TransposedLinear(vb.pp("output.dense"), config.intermediate_size, (d,), True)
        self.act = activation(config.hidden_act)

    def forward(self, x: c.Tensor) -> c.Tensor:
        b, n, d = x.shape
        h = self.heads
        qkv = self.qkv(self.layernorm_before(x)).reshape(b, n, 3 * h, d // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(qkv.narrow(1, 0, h), qkv.narrow(1, h, h), qkv.narrow(1, 2 * h, h))
        x = x + self.out(y.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(self.act(self.fc1(self.layernorm_after(x))))


class ViTModel(Pretrained, nn.Module):
    """``model(pixel_values)`` gives the last hidden states (batch, 1 + patches, hidden), the CLS
    token's first; ``model.pool(hidden)`` the pooler's output, when the checkpoint has a pooler
    (or ``add_pooling_layer`` asks for one). Loads a base model's checkpoint or one with a head
    (weights under ``vit.``)."""

    config_class = ViTConfig

    def __init__(self, config: ViTConfig, vb: nn.VarBuilder, add_pooling_layer: bool | None = None):
        super().__init__()
        self.config = config
        if not vb.contains_tensor("embeddings.cls_token") and vb.contains_tensor("vit.embeddings.cls_token"):
            vb = vb.pp("vit")
        self.embeddings = ViTEmbeddings(config, vb.pp("embeddings"))
        self.layers = nn.ModuleList([ViTLayer(config, vb.pp("encoder.layer").pp(i))
                                     for i in range(config.num_hidden_layers)])
        self.layernorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, vb=vb.pp("layernorm"))
        pooler = vb.pp("pooler.dense")
        if add_pooling_layer is None:
            add_pooling_layer = pooler.contains_tensor("weight")
        size = config.pooler_output_size or config.hidden_size
        self.pooler = nn.Linear(config.hidden_size, size, vb=pooler) if add_pooling_layer else None
        self.pooler_act = F.tanh if config.pooler_act == "tanh" else activation(config.pooler_act)

    @property
    def device(self):
        return self.embeddings.cls_token.device

    def forward(self, pixel_values, interpolate_pos_encoding: bool = False) -> c.Tensor:
        if not isinstance(pixel_values, c.Tensor):
            pixel_values = c.from_numpy(np.ascontiguousarray(pixel_values, dtype=np.float32))
        x = pixel_values.to_dtype(self.embeddings.cls_token.dtype).to_device(self.device)
        x = self.embeddings(x, interpolate_pos_encoding)
        for layer in self.layers:
            x = layer(x)
        return self.layernorm(x)

    def pool(self, hidden: c.Tensor) -> c.Tensor:
        if self.pooler is None:
            raise ValueError("this model was loaded without a pooler (the checkpoint has no pooler.dense)")
        return self.pooler_act(self.pooler(hidden[:, 0]))


class ViTForImageClassification(Pretrained, nn.Module):
    """Logits (batch, num_labels) from the CLS token's last state; ``config.labels`` names the classes."""

    config_class = ViTConfig

    def __init__(self, config: ViTConfig, vb: nn.VarBuilder):
        super().__init__()
        self.config = config
        self.vit = ViTModel(config, vb, add_pooling_layer=False)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels, vb=vb.pp("classifier"))

    def forward(self, pixel_values, interpolate_pos_encoding: bool = False) -> c.Tensor:
        return self.classifier(self.vit(pixel_values, interpolate_pos_encoding)[:, 0])

