"""GGUF checkpoints (llama.cpp's layout) of every family read here: which
family a file holds (its ``general.architecture``), its metadata as a
config.json, and its tensors under transformers' names: the quantized
matrices kept in their blocks (QTensors, multiplied as they are), or
dequantized to f32 as they are read.

Each architecture's names, keys and tensor layouts are its family's
(``read_gguf`` of llama_gguf: llama, qwen2, qwen3, phi3, gemma3; of gpt2 and
falcon). Where llama.cpp lays a weight out otherwise than transformers and the
weight may be quantized (rows of blocks cannot be reordered for free), the
config says so and the model reads that layout (``rope_interleaved``,
``linear_weights``, ``qkv_layout``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import candle_api as c
from candle_api.errors import FormatError
from candle_api.quantized import QTensor


_GGUF_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


@dataclass(frozen=True)
class TensorNames:
    """How an architecture names its tensors in llama.cpp's files and in transformers': the blocks'
    (``blk.N.<part>`` and ``<blocks>.N.<name>``) and the others'."""

    blocks: str  # transformers' prefix of the layers ("model.layers")
    block_names: Mapping  # llama.cpp's part -> transformers' name within a layer
    global_names: Mapping  # llama.cpp's name -> transformers'

    def hf(self, gguf_name: str) -> str | None:
        """transformers' name for a llama.cpp tensor name (None for tensors the model does not read)."""
        match = _GGUF_BLOCK.match(gguf_name)
        if match:
            layer, part, kind = match.groups()
            name = self.block_names.get(part)
            return f"{self.blocks}.{layer}.{name}.{kind}" if name else None
        stem, _, kind = gguf_name.rpartition(".")
        return f"{self.global_names[stem]}.{kind}" if stem in self.global_names else None

    def gguf(self, hf_name: str) -> str | None:
        """llama.cpp's name for a transformers tensor name (None for tensors llama.cpp has no place for)."""
        stem, _, kind = hf_name.rpartition(".")
        if stem.startswith(self.blocks + "."):
            layer, _, name = stem[len(self.blocks) + 1:].partition(".")
            part = next((p for p, n in self.block_names.items() if n == name), None)
            return f"blk.{layer}.{part}.{kind}" if part and layer.isdigit() else None
        found = next((g for g, n in self.global_names.items() if n == stem), None)
        return f"{found}.{kind}" if found else None

    def of(self, file) -> dict:
        """transformers' name -> llama.cpp's, for the tensors of ``file`` a model reads."""
        return {hf: g for g in file if (hf := self.hf(g)) is not None}


def gguf_key(metadata: Mapping, arch: str) -> Callable:
    """``key(name, default)``: the metadata value ``<arch>.<name>``; without a default, a ValueError
    naming a key that is missing."""
    def key(name: str, default=KeyError):
        value = metadata.get(f"{arch}.{name}", default)
        if value is KeyError:
            raise ValueError(f"the GGUF metadata has no {arch}.{name}")
        return value

    return key


def vocab_size(file, key: Callable) -> int:
    """The vocabulary size of a GGUF: its ``vocab_size`` key, else the rows of its token embedding; a
    ValueError when it has neither."""
    size = key("vocab_size", None)
    if size is not None:
        return size
    if "token_embd.weight" not in file:
        raise ValueError("the GGUF has no token_embd.weight tensor (and no vocab_size key)")
    return file["token_embd.weight"].shape[0]


def find_gguf(path: Path) -> Path | None:
    """The GGUF file ``path`` names, or the one a folder without config.json holds; None otherwise."""
    path = Path(path)
    if path.is_file():
        with open(path, "rb") as f:
            return path if f.read(4) == b"GGUF" else None
    if (path / "config.json").exists():
        return None
    found = sorted(path.glob("*.gguf"))
    if len(found) > 1:
        raise FormatError(path, None, f"several GGUF files ({', '.join(p.name for p in found)}): name one")
    return found[0] if found else None


class GgufTensors(Mapping):
    """The tensors of a GGUF under transformers' names (``names``: transformers' -> llama.cpp's), each
    passed through ``transform(name, tensor)`` when given. Quantized matrices stay QTensors when
    ``quantized``, else are dequantized to f32 when read; other tensors are read as f32."""

    def __init__(self, file, names: dict, quantized: bool = True, transform: Callable | None = None):
        self._file, self._names, self._quantized, self._transform = file, names, quantized, transform
        self._last = (None, None)  # VarBuilder reads a tensor twice (shape, then values): convert once

    def __getitem__(self, name: str):
        if self._last[0] == name:
            return self._last[1]
        t = self._file[self._names[name]]
        if isinstance(t, QTensor) and not (self._quantized and t.rank == 2):
            t = t.dequantize()
        elif not isinstance(t, QTensor):
            t = t.to_dtype("f32")
        if self._transform is not None:
            t = self._transform(name, t)
        self._last = (name, t)
        return t

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def load_gguf(path: Path):
    """``candle_api.load`` of a GGUF, kept for the next caller while the file is unchanged: a model's family,
    its tokenizer and its weights each read the same file, whose metadata (a 262k-token vocabulary for
    Gemma) takes seconds to parse."""
    stat = Path(path).stat()
    return _load(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _load(path: str, mtime_ns: int, size: int):
    return c.load(path)


def _readers() -> dict:
    """general.architecture -> (config.json model_type, its family's read_gguf)."""
    from . import falcon, gpt2, llama_gguf

    readers = {arch: (model_type, llama_gguf.read_gguf) for arch, model_type in llama_gguf.ARCHITECTURES.items()}
    return readers | {"gpt2": ("gpt2", gpt2.read_gguf), "falcon": ("falcon", falcon.read_gguf)}


def _reader(path: Path, file) -> tuple:
    arch = file.metadata.get("general.architecture")
    readers = _readers()
    if arch not in readers:
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not supported (supported: {', '.join(readers)})")
    return readers[arch]


def gguf_model_type(path: Path) -> str:
    """The config.json model_type of a GGUF's general.architecture; a ValueError listing the
    architectures read here otherwise."""
    return _reader(path, load_gguf(path))[0]


def gguf_checkpoint(path: Path, quantized: bool = True) -> tuple[dict, GgufTensors]:
    """(config.json as a dict, tensors) of a GGUF: quantized matrices kept as QTensors when ``quantized``,
    else dequantized (lazily) to f32."""
    file = load_gguf(path)
    return _reader(path, file)[1](file, quantized)
