"""Paths that are not regular files, or not files at all: FIFOs with no
writer, folders, devices, links that loop or dangle, names the OS refuses.
Loading one must raise FormatError promptly, whatever format is asked for."""

from __future__ import annotations

import os

from ..case import pick

FORMATS = [None, "safetensors", "npy", "npz", "gguf", "ggml", "pytorch", "onnx"]
NAMES = ["model.safetensors", "a.npy", "a.npz", "model.gguf", "model.pt", "model.onnx", "noext"]


def _fifo(folder, name):
    os.mkfifo(folder / name)
    return folder / name


def _folder(folder, name):
    (folder / name).mkdir()
    return folder / name


def _loop(folder, name):
    (folder / name).symlink_to(folder / name)
    return folder / name


def _dangling(folder, name):
    (folder / name).symlink_to(folder / "nowhere")
    return folder / name


def _empty(folder, name):
    (folder / name).write_bytes(b"")
    return folder / name


KINDS = {
    "fifo": _fifo, "folder": _folder, "link loop": _loop, "dangling link": _dangling, "empty file": _empty,
    "/dev/null": lambda folder, name: "/dev/null", "/dev/zero": lambda folder, name: "/dev/zero",
    "/dev/urandom": lambda folder, name: "/dev/urandom", "/proc/self/maps": lambda folder, name: "/proc/self/maps",
    "missing": lambda folder, name: folder / name, "too long": lambda folder, name: folder / ("x" * 5000),
    "NUL in the name": lambda folder, name: f"{folder}/a\0b.safetensors",
}


def make(rng, folder):
    """(path, format to ask for, what)."""
    kind, name, fmt = pick(rng, list(KINDS)), pick(rng, NAMES), pick(rng, FORMATS)
    return KINDS[kind](folder, name), fmt, f"special: {kind} named {name}, format {fmt}"
