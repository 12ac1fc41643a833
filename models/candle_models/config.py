"""config.json of a Hugging Face model folder."""

from __future__ import annotations

import json
from pathlib import Path

from candle_api.errors import FormatError


def load_config(folder: Path) -> dict:
    path = Path(folder) / "config.json"
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise FormatError(path, None, "the model folder has no config.json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(path, None, f"not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise FormatError(path, 0, "config.json must hold an object")
    return config
