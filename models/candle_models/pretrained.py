"""``from_pretrained`` for models built as ``cls(config, vb)``: the model's
folder (a local path, or a Hugging Face repo through the hub or its cache),
its config.json and a VarBuilder over its weights."""

from __future__ import annotations

import os
from pathlib import Path

from candle_api import nn

from .config import load_config
from .hub import model_folder, resolve
from .weights import var_builder


def load_folder(repo_or_path: str | os.PathLike, dtype="f32", device="cpu",
                revision: str | None = None) -> tuple[Path, dict, nn.VarBuilder]:
    """(folder, config.json as a dict, VarBuilder over the weights) of a model.
    ``repo_or_path`` may also be a weight file inside its folder."""
    path = resolve(repo_or_path, revision=revision)
    folder = model_folder(path)
    return folder, load_config(folder), var_builder(path, dtype, device)


class Pretrained:
    """Mixin: ``Model.from_pretrained(repo_or_path, device=..., dtype=...)``
    for a module class whose constructor is ``cls(config, vb)`` and whose
    ``config_class`` has ``from_dict``."""

    config_class: type

    @classmethod
    def from_pretrained(cls, repo_or_path: str | os.PathLike, *, device="cpu", dtype="f32",
                        revision: str | None = None):
        _, config, vb = load_folder(repo_or_path, dtype, device, revision)
        return cls(cls.config_class.from_dict(config), vb).eval()
