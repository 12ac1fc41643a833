"""``candle quantize``: a model folder (config.json, tokenizer.json,
safetensors) of the Llama family, Gemma 3, GPT-2 or Falcon, or a GGUF file,
written as a GGUF file that llama.cpp and ``candle generate`` load, its weight matrices in the GGML type
asked for (arguments: see cli.py, which also reports the errors raised here).

Tensors are converted one at a time as the GGUF writer asks for them, so
memory holds the output and the tensor being converted.
"""

from __future__ import annotations

import sys
import time
from collections import ChainMap, Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import candle_api as c
from candle_api.errors import ArgumentError, DTypeError
from candle_api.io import TensorFile
from candle_api.quantized import GGML_TYPES, GgmlType, QTensor, get_ggml_type

from .config import load_config
from .gguf_export import FILE_TYPES, QUANTIZATION_VERSION, gguf_form, llama_cpp_types, model_metadata, output_types
from .gguf_models import find_gguf, gguf_model_type, load_gguf
from .hub import model_folder, resolve
from .progress import Progress
from .weights import weight_files


@dataclass
class Source:
    """What a GGUF is written from: its metadata, and per tensor (by llama.cpp's name) its shape and a
    function reading its values (an array, or a GGUF's QTensor)."""

    metadata: dict
    tensors: dict[str, tuple[tuple, Callable]]
    skipped: list[str]


def main(args) -> int:
    wanted = output_type(args.type)
    output = writable(Path(args.output))
    start = time.perf_counter()
    path = resolve(args.input)
    gguf = find_gguf(path)
    if gguf is not None:
        source = gguf_source(gguf, wanted)
    else:  # named as given: a repo id's snapshot folder is named by its commit
        name = model_folder(path).resolve().name if Path(args.input).exists() else Path(args.input).name
        source = folder_source(model_folder(path), wanted, name)
    if source.skipped:
        _note(f"skipped the tensors llama.cpp has no place for: {_names(source.skipped)}")
    counts = write(source, output, wanted)
    print(f"{output}: {wanted.name}, {sum(counts.values())} tensors "
          f"({', '.join(f'{n} {name}' for name, n in counts.most_common())}), "
          f"{output.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - start:.1f}s")
    return 0


def writable(output: Path) -> Path:
    """``output``, refused before any work when it cannot be written."""
    if output.is_dir():
        raise ArgumentError(f"cannot write {output}: it is a folder")
    if not output.parent.is_dir():
        raise ArgumentError(f"cannot write {output}: there is no folder {output.parent}")
    return output


def output_type(name: str) -> GgmlType:
    """The GGML type ``--type`` names (candle's spelling or ggml's, "q4k" or "Q4_K")."""
    known = output_types()
    try:
        found = get_ggml_type(name)
    except DTypeError:
        found = None
    if found is None or found.name not in known:
        raise ArgumentError(f"unknown --type {name!r} (known: {', '.join(known)})")
    return found


def folder_source(folder: Path, wanted: GgmlType, model_name: str) -> Source:
    """A Hugging Face folder's tensors under llama.cpp's names, in the layouts it expects."""
    from .causal_lm import family

    config = family(folder).config_class.from_dict(load_config(folder))
    form = gguf_form(config)
    metadata = model_metadata(folder, form, config.vocab_size, wanted, model_name)
    if metadata.get("tokenizer.ggml.pre") == "default":
        _note("tokenizer.json splits text before BPE in a way llama.cpp has no name for: llama.cpp will split it "
              "as its \"default\" pre-tokenizer does, which may tokenize some text otherwise")
    for note in form.notes:
        _note(note)
    weights = ChainMap(*(c.load(str(f)) for f in weight_files(folder)))
    tensors, skipped = {}, []
    for hf in weights:
        name = form.name(hf)
        if name is None:
            skipped.append(hf)
        elif not (name == "output.weight" and form.tied):  # llama.cpp reuses token_embd
            tensors[name] = (form.shape(name, weights[hf].shape),
                             lambda hf=hf, name=name: form.convert(name, weights[hf].numpy().astype(np.float32)))
    tensors |= {name: (values.shape, lambda values=values: values) for name, values in form.extra.items()}
    return Source(metadata, tensors, skipped)


def gguf_source(path: Path, wanted: GgmlType) -> Source:
    """A GGUF's tensors as they are, its metadata with the new file type."""
    gguf_model_type(path)  # refuses the architectures read nowhere here
    file = load_gguf(path)
    metadata = dict(file.metadata) | {"general.file_type": FILE_TYPES[wanted.type_id],
                                      "general.quantization_version": QUANTIZATION_VERSION}
    return Source(metadata, {name: (file[name].shape, lambda name=name: file[name]) for name in file}, [])


def tensor_type(shape: tuple, wanted: GgmlType) -> GgmlType:
    """1-d tensors (norms, biases) stay f32; a matrix gets ``wanted``, or when its rows are not whole
    blocks of it q8_0, or f16 when they are not whole q8_0 blocks either."""
    if len(shape) < 2:
        return GGML_TYPES["f32"]
    return next(t for t in (wanted, GGML_TYPES["q8_0"], GGML_TYPES["f16"]) if shape[-1] % t.block_size == 0)


def write(source: Source, output: Path, wanted: GgmlType) -> Counter:
    """Writes the GGUF; returns how many tensors of each type it holds."""
    types = {name: tensor_type(shape, wanted) for name, (shape, _) in source.tensors.items()}
    fallbacks: dict[str, list[str]] = {}
    for name, t in types.items():
        if t is not wanted and len(source.tensors[name][0]) >= 2:
            fallbacks.setdefault(t.name, []).append(name)
    for t, names in fallbacks.items():
        _note(f"{t} for the matrices whose rows are not whole {wanted.name} blocks of {wanted.block_size} values: "
              f"{_names(names)}")
    with Progress(len(types), "quantizing") as progress:
        def convert(name: str) -> QTensor:
            tensor = _convert(source.tensors[name][1](), types[name])
            progress.update()
            return tensor

        lazy = TensorFile({name: (lambda name=name: convert(name)) for name in types})
        c.save(lazy, output, llama_cpp_types(source.metadata), format="gguf")
    return Counter(t.name for t in types.values())


def _convert(values, target: GgmlType) -> QTensor:
    """``values`` as a QTensor of ``target``: a GGUF's tensor already of that type is copied as it is,
    another is dequantized first."""
    if isinstance(values, QTensor):
        if values.ggml_dtype == target.name:
            return values
        values = values.dequantize()
    return QTensor.quantize(values, target)


def _names(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _note(text: str) -> None:
    print(f"candle quantize: note: {text}", file=sys.stderr)
