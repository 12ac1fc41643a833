"""config.json of a Hugging Face model folder."""

from __future__ import annotations

import json
from dataclasses import fields
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


def config_from_dict(cls, config: dict):
    """The dataclass ``cls`` from the config.json keys it has fields for (a null
    keeps the default), with num_labels counted from id2label as transformers does."""
    known = {f.name for f in fields(cls)}
    cfg = cls(**{k: v for k, v in config.items() if k in known and v is not None})
    if "id2label" in config and "num_labels" in known:
        cfg.num_labels = len(config["id2label"])
    return cfg
