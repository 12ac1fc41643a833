"""Images for vision models: reading image files (through Pillow, the
optional extra ``candle-models[vision]``) and preprocessing as transformers'
ViTImageProcessor does it, from a model folder's preprocessor_config.json:
resize, rescale to [0, 1], normalize by mean and std, channels first.

The resize is Pillow's (Resample.c), computed here in NumPy so that arrays
need no Pillow: a separable filter stretched over the source pixels each
output pixel covers (so a reduction averages rather than skips), its weights
rounded to 22-bit fixed point, the first pass rounded to 8 bits before the
second. It gives Pillow's (13) pixels exactly, which transformers' processor
feeds the model.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from candle_api.errors import ArgumentError, DTypeError, FormatError, ShapeError

_PRECISION_BITS = 32 - 8 - 2  # Pillow's: 8 bits of result, 2 of headroom for negative lobes and overshoot


def _bilinear(x):
    return np.maximum(1.0 - np.abs(x), 0.0)


def _bicubic(x, a=-0.5):
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _sinc(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(x == 0.0, 1.0, np.sin(x * math.pi) / (x * math.pi))


def _lanczos(x):
    return np.where((-3.0 <= x) & (x < 3.0), _sinc(x) * _sinc(x / 3), 0.0)


def _box(x):
    return ((x > -0.5) & (x <= 0.5)).astype(np.float64)


def _hamming(x):
    x = np.abs(x) * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        # Pillow's constants are C floats: 0.54f and 0.46f
        value = np.sin(x) / x * (float(np.float32(0.54)) + float(np.float32(0.46)) * np.cos(x))
    return np.where(x == 0.0, 1.0, np.where(x >= math.pi, 0.0, value))


#: Pillow's resampling filters by their numbers (PIL.Image.Resampling): (filter, support).
RESAMPLE = {1: (_lanczos, 3.0), 2: (_bilinear, 1.0), 3: (_bicubic, 2.0), 4: (_box, 0.5), 5: (_hamming, 1.0)}
RESAMPLE_NAMES = {1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _coefficients(in_size: int, out_size: int, resample: int) -> tuple[np.ndarray, np.ndarray]:
    """(first source pixel of each output pixel (out,), fixed-point weights (out, taps)) as Pillow's
    precompute_coeffs and normalize_coeffs_8bpc make them; weights past a pixel's last source are 0."""
    filt, support = RESAMPLE[resample]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support *= filterscale
    taps = math.ceil(support) * 2 + 1
    center = (np.arange(out_size) + 0.5) * scale
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    count = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64) - first
    x = np.arange(taps)
    weights = filt((x[None, :] + first[:, None] - center[:, None] + 0.5) * (1.0 / filterscale))
    weights = np.where(x[None, :] < count[:, None], weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=weights, where=total != 0)
    fixed = np.trunc(weights * (1 << _PRECISION_BITS) + np.where(weights < 0, -0.5, 0.5)).astype(np.int64)
    return first, fixed


def _resample_axis(image: np.ndarray, out_size: int, axis: int, resample: int) -> np.ndarray:
    """One pass of Pillow's resize along ``axis`` (0 rows, 1 columns) of an (H, W, C) uint8 image."""
    in_size = image.shape[axis]
    first, fixed = _coefficients(in_size, out_size, resample)
    pixels = image.astype(np.int64)
    acc = np.full(image.shape[:axis] + (out_size,) + image.shape[axis + 1:], 1 << (_PRECISION_BITS - 1),
                  dtype=np.int64)
    shape = (-1, 1, 1) if axis == 0 else (1, -1, 1)
    for k in range(fixed.shape[1]):  # one tap at a time: memory stays the size of the output
        source = np.minimum(first + k, in_size - 1)  # past-the-end taps have weight 0
        acc += np.take(pixels, source, axis=axis) * fixed[:, k].reshape(shape)
    return np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)


def resize(image: np.ndarray, height: int, width: int, resample: int = 2) -> np.ndarray:
    """An (H, W, C) uint8 image resized to (height, width) exactly as Pillow's ``Image.resize`` does
    with ``resample`` (a PIL.Image.Resampling number: 1 lanczos, 2 bilinear, 3 bicubic, 4 box,
    5 hamming)."""
    if resample not in RESAMPLE:
        raise ArgumentError(f"resample {resample!r} is not supported (supported: "
                            + ", ".join(f"{k} ({v})" for k, v in RESAMPLE_NAMES.items()) + ")")
    if height < 1 or width < 1:
        raise ArgumentError(f"cannot resize to {height} x {width} pixels")
    in_height, in_width = image.shape[:2]
    # Pillow 13 runs the vertical pass first when the height shrinks by more than twice the width's
    # shrinking (the first pass then has fewer rows to filter); the order decides some roundings.
    # (Pillow 12 and older always start with the horizontal pass.)
    passes = [(width, 1), (height, 0)]
    if in_height > height and in_height - height > 2 * (in_width - width):
        passes.reverse()
    for size, axis in passes:
        if image.shape[axis] != size:
            image = _resample_axis(image, size, axis, resample)
    return image


def as_rgb(image) -> np.ndarray:
    """Pixels as an (H, W, 3) uint8 array: from (H, W, 3), (H, W, 4) (alpha dropped) or (H, W) gray uint8
    arrays, or a file path (read by Pillow)."""
    if isinstance(image, (str, os.PathLike)):
        return read_image(image)
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise DTypeError(f"image pixels must be uint8 (0-255), got {image.dtype}")
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] not in (3, 4) or 0 in image.shape:
        raise ShapeError(f"an image must be (height, width), (height, width, 3) or (height, width, 4), "
                         f"got shape {image.shape}")
    return image[:, :, :3]


def read_image(path: str | os.PathLike) -> np.ndarray:
    """An image file (PNG, JPEG and every format Pillow reads) as (H, W, 3) uint8 RGB pixels."""
    try:
        from PIL import Image, UnidentifiedImageError
        from PIL.Image import DecompressionBombError
    except ImportError:
        raise ImportError("reading image files needs Pillow: pip install 'candle-models[vision]' "
                          "(or pass the pixels as a uint8 array)") from None
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except FileNotFoundError:
        raise
    except (UnidentifiedImageError, DecompressionBombError, OSError, ValueError, SyntaxError) as exc:  # "broken"
        raise FormatError(Path(path), None, f"not an image Pillow can read: {exc}") from None


@dataclass
class ImageProcessor:
    """transformers' ViTImageProcessor: resize to (height, width), rescale, normalize; ``__call__``
    gives the (batch, 3, height, width) float32 pixel values a ViT takes."""

    height: int = 224
    width: int = 224
    resample: int = 2
    do_resize: bool = True
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: list = field(default_factory=lambda: [0.5, 0.5, 0.5])
    image_std: list = field(default_factory=lambda: [0.5, 0.5, 0.5])

    @classmethod
    def from_dict(cls, cfg: dict) -> "ImageProcessor":
        """From a preprocessor_config.json; steps it does not perform (a center crop, a resize by the
        shortest edge) are refused by name rather than skipped."""
        for step in ("do_center_crop", "do_pad", "do_reduce_labels"):
            if cfg.get(step):
                raise ValueError(f"preprocessor_config.json asks for {step}, which this ViT processor does not do")
        size = cfg.get("size", {"height": 224, "width": 224})
        if isinstance(size, int):
            size = {"height": size, "width": size}
        if set(size) != {"height", "width"}:
            raise ValueError(f"preprocessor_config.json's size {size} is not supported (only height and width)")
        resample = cfg.get("resample", 2)
        if resample not in RESAMPLE:
            raise ValueError(f"resample {resample!r} is not supported (supported: {sorted(RESAMPLE)})")
        known = {k: cfg[k] for k in ("do_resize", "do_rescale", "rescale_factor", "do_normalize", "image_mean",
                                     "image_std") if cfg.get(k) is not None}
        return cls(height=int(size["height"]), width=int(size["width"]), resample=resample, **known)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "ImageProcessor":
        """From the folder's preprocessor_config.json; ViT's defaults without one."""
        from .tokenizer import read_json_object

        return cls.from_dict(read_json_object(Path(folder) / "preprocessor_config.json"))

    def __call__(self, images) -> np.ndarray:
        """Pixel values (batch, 3, height, width) float32 for a list of images (uint8 arrays or file
        paths); a single image gives a batch of one. The images must share a size unless resized."""
        if isinstance(images, (str, os.PathLike)) or (isinstance(images, np.ndarray) and images.ndim in (2, 3)):
            images = [images]
        out = [self.pixels(as_rgb(image)) for image in images]
        if not out:
            raise ArgumentError("no images given")
        if len({p.shape for p in out}) > 1:
            raise ShapeError(f"images of different sizes {sorted({p.shape[1:] for p in out})} do not make a batch "
                             "(resize them, or pass them one at a time)")
        return np.stack(out)

    def pixels(self, image: np.ndarray) -> np.ndarray:
        """One (H, W, 3) uint8 image as (3, height, width) float32 values."""
        if self.do_resize:
            image = resize(image, self.height, self.width, self.resample)
        values = image.astype(np.float64) * self.rescale_factor if self.do_rescale else image
        values = values.astype(np.float32)
        if self.do_normalize:
            values = (values - np.asarray(self.image_mean, np.float32)) / np.asarray(self.image_std, np.float32)
        return np.ascontiguousarray(values.transpose(2, 0, 1))
