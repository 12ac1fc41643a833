"""``candle embed``: sentence embeddings and the cosine similarity of every
pair of texts, or the vectors as JSON (see ``candle embed --help``; the core's
command line reports the errors raised here)."""

from __future__ import annotations

import json
import sys

from candle_api.errors import ArgumentError

from .cli import model_path
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


def read_texts(texts: list[str], stdin) -> list[str]:
    """``texts`` with each ``-`` replaced by the lines of ``stdin`` (a binary stream), blank ones
    skipped. Bytes that are not UTF-8 are kept as Python keeps them in argv, so both are refused
    alike, naming the byte."""
    if "-" not in texts:
        return texts
    lines = stdin.read().decode("utf-8", "surrogateescape").split("\n")
    lines = [line.removesuffix("\r") for line in lines if line.strip()]
    return [line for text in texts for line in (lines if text == "-" else [text])]


def main(args) -> int:
    if args.batch_size < 1:
        raise ArgumentError(f"--batch-size must be at least 1, got {args.batch_size}")
    texts = read_texts(args.texts, sys.stdin.buffer)
    if not texts:
        raise ArgumentError("no text to embed: stdin has no lines")
    embedder = SentenceEmbedder.from_pretrained(model_path(args.model, "embed"), device=args.device, progress=True)
    vectors = embedder.embed(texts, batch_size=args.batch_size, normalize=not args.no_normalize, progress=True)
    if args.json:  # a list, not an object keyed by text: a text given twice keeps both rows
        rows = zip(texts, vectors.numpy().tolist())
        print(json.dumps([{"text": text, "embedding": vector} for text, vector in rows]))
    else:
        print(similarity_table(texts, vectors))
    return 0
