"""A model folder's weights as a VarBuilder, whatever format they are in."""

from __future__ import annotations

from pathlib import Path

from candle_api import nn
from candle_api.errors import FormatError

# In order of preference: safetensors (mapped, zero-copy), then PyTorch pickles.
_CANDIDATES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
               "pytorch_model.bin")


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a Hugging Face model folder."""
    for name in _CANDIDATES:
        if (folder / name).exists():
            return [folder / name]
    found = sorted(folder.glob("*.safetensors"))
    if found:
        return found
    raise FormatError(folder, None, f"no weights found (looked for {', '.join(_CANDIDATES)} and *.safetensors)")


def var_builder(path: Path, dtype="f32", device="cpu") -> nn.VarBuilder:
    """A VarBuilder over a weight file, or over the weights of a model folder."""
    path = Path(path)
    files = [path] if path.is_file() else weight_files(path)
    return nn.VarBuilder.from_file([str(f) for f in files], dtype, device)
