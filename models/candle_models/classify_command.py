"""``candle classify``: the most likely classes of images with a ViT image classifier, or
the scores as JSON (see ``candle classify --help``; the core's command line reports the
errors raised here)."""

from __future__ import annotations

import json

import numpy as np

import candle_api as c
from candle_api.errors import ArgumentError

from .cli import model_path
from .hub import model_folder
from .image import ImageProcessor, read_image
from .vit import ViTForImageClassification


def top_labels(logits: np.ndarray, labels: list[str], k: int) -> list[list[tuple[str, float]]]:
    """Per image, the k most likely (label, probability) pairs, most likely first."""
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    order = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return [[(labels[i], float(p[i])) for i in row] for row, p in zip(order, probs)]


def main(args) -> int:
    if args.top < 1:
        raise ArgumentError(f"--top must be at least 1, got {args.top}")
    if args.batch_size < 1:
        raise ArgumentError(f"--batch-size must be at least 1, got {args.batch_size}")
    path = model_path(args.model, "classify")
    model = ViTForImageClassification.from_pretrained(path, device=args.device, dtype=args.dtype)
    processor = ImageProcessor.from_folder(model_folder(path))
    results = []
    for start in range(0, len(args.images), args.batch_size):
        names = args.images[start:start + args.batch_size]
        pixels = processor([read_image(name) for name in names])
        with c.no_grad():
            logits = model(c.from_numpy(pixels)).to_dtype("f32").numpy()
        results += zip(names, top_labels(logits, model.config.labels, args.top))
    if args.json:
        print(json.dumps([{"image": name, "labels": [{"label": label, "score": score} for label, score in top]}
                          for name, top in results]))
    else:
        for name, top in results:
            print(name)
            print("\n".join(f"  {score:.4f}  {label}" for label, score in top))
    return 0
