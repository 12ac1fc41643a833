"""``candle embed``: sentence embeddings and the cosine similarity of every
pair of texts, or the vectors as JSON (see ``candle embed --help``; cli.py
reports the errors raised here)."""

from __future__ import annotations

import json

from candle_api.errors import ArgumentError

from .hub import default_model
from .sentence import SentenceEmbedder, l2_normalize


def similarity_table(texts, vectors) -> str:
    """The texts numbered, then their cosine similarity matrix."""
    unit = l2_normalize(vectors)
    sims = (unit @ unit.t()).numpy()
    labels = [f"[{i + 1}]" for i in range(len(texts))]
    width = max(8, max(len(label) for label in labels) + 2)  # room for "-0.123" and a space
    lines = [f"{label} {text}" for label, text in zip(labels, texts)]
    lines += ["", "cosine similarity:", " " * width + "".join(f"{label:>{width}}" for label in labels)]
    lines += [f"{label:<{width}}" + "".join(f"{s:>{width}.3f}" for s in row) for label, row in zip(labels, sims)]
    return "\n".join(lines)


def main(args) -> int:
    if args.batch_size < 1:
        raise ArgumentError(f"--batch-size must be at least 1, got {args.batch_size}")
    model = args.model if args.model is not None else default_model("embed")
    embedder = SentenceEmbedder.from_pretrained(model, device=args.device, progress=True)
    vectors = embedder.embed(args.texts, batch_size=args.batch_size, normalize=not args.no_normalize,
                             progress=True)
    if args.json:
        print(json.dumps(dict(zip(args.texts, vectors.numpy().tolist()))))
    else:
        print(similarity_table(args.texts, vectors))
    return 0
