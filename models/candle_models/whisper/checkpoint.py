"""Where a Whisper model's config, weights and generation settings come from:
a transformers folder (config.json, generation_config.json, safetensors or
PyTorch weights) or a CTranslate2 folder (model.bin and its config.json, as
faster-whisper's models ship), told apart by model.bin's header."""

from __future__ import annotations

import os

from candle_api import nn

from . import ct2
from .model import WhisperConfig


def load_checkpoint(repo_or_path: str | os.PathLike, dtype="f32", device="cpu",
                    revision: str | None = None) -> tuple[WhisperConfig, nn.VarBuilder]:
    """(config, VarBuilder over the weights in transformers' names)."""
    from ..hub import resolve
    from ..pretrained import load_folder

    path = resolve(repo_or_path, revision=revision)
    if ct2.is_ct2_model(path):
        cfg, _, tensors = ct2.load(path)
        vb = nn.VarBuilder.from_tensors(tensors, dtype, device)
    else:
        _, cfg, vb = load_folder(path, dtype, device)
    return WhisperConfig.from_dict(cfg), vb


def generation_settings(repo_or_path: str | os.PathLike, revision: str | None = None) -> dict:
    """generation_config.json's fields (suppress_tokens, begin_suppress_tokens...), from CTranslate2's
    config.json for a CTranslate2 model; {} when the model has none."""
    from ..hub import model_folder, resolve
    from ..tokenizer import read_json_object

    path = resolve(repo_or_path, revision=revision)
    folder = model_folder(path)
    if ct2.is_ct2_model(path):
        return ct2.generation_config(read_json_object(folder / "config.json"))
    return read_json_object(folder / "generation_config.json")
