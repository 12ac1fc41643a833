"""The causal language model a checkpoint holds, whatever its family: chosen
from config.json's ``model_type`` (or ``architectures``) or a GGUF's
``general.architecture``; or the encoder-decoder (T5) that generates text
from text, which ``candle generate`` runs too."""

from __future__ import annotations

import os

from .falcon import FalconForCausalLM
from .gemma3 import Gemma3ForCausalLM
from .gpt2 import GPT2LMHeadModel
from .llama import MODEL_TYPES as LLAMA_TYPES
from .llama import LlamaForCausalLM
from .t5 import T5ForConditionalGeneration

#: model_type -> the class that runs it.
FAMILIES = {**{t: LlamaForCausalLM for t in LLAMA_TYPES}, "gemma3_text": Gemma3ForCausalLM, "gpt2": GPT2LMHeadModel,
            "falcon": FalconForCausalLM}
#: Encoder-decoder families that generate text too (text to text: candle_models.seq2seq), by model_type.
TEXT2TEXT = {"t5": T5ForConditionalGeneration}
#: Families of other tasks, by model_type: what runs them.
ELSEWHERE = {"vit": "ViTForImageClassification: candle classify"}
#: config.json ``architectures`` entries, for configs without a model_type.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3", "Phi3ForCausalLM": "phi3", "Gemma3ForCausalLM": "gemma3_text",
                 "GPT2LMHeadModel": "gpt2", "FalconForCausalLM": "falcon", "T5ForConditionalGeneration": "t5"}


def family(repo_or_path: str | os.PathLike, revision: str | None = None) -> type:
    """The class of the model at ``repo_or_path``; a ValueError listing the supported families otherwise."""
    from .config import load_config
    from .hub import model_folder, resolve
    from .gguf_models import find_gguf, gguf_model_type

    path = resolve(repo_or_path, revision=revision)
    gguf = find_gguf(path)
    if gguf is not None:
        kind = gguf_model_type(gguf)
    else:
        cfg = load_config(model_folder(path))
        kind = cfg.get("model_type") or next((ARCHITECTURES[a] for a in cfg.get("architectures", ())
                                              if a in ARCHITECTURES), None)
        if kind is None:
            raise ValueError(f"{path}: config.json names no model_type, and none of its architectures "
                             f"{cfg.get('architectures')} is supported (supported: {', '.join(ARCHITECTURES)})")
    if kind in TEXT2TEXT:
        return TEXT2TEXT[kind]
    if kind not in FAMILIES:
        elsewhere = f"; {kind} models run as {ELSEWHERE[kind]}" if kind in ELSEWHERE else ""
        raise ValueError(f"model_type {kind!r} is not a supported causal language model "
                         f"(supported: {', '.join(FAMILIES)}; text to text: {', '.join(TEXT2TEXT)}){elsewhere}")
    return FAMILIES[kind]


def from_pretrained(repo_or_path: str | os.PathLike, dtype=None, device="cpu", progress=None,
                    revision: str | None = None):
    """The model at ``repo_or_path``, loaded by its family's ``from_pretrained``."""
    return family(repo_or_path, revision).from_pretrained(repo_or_path, dtype=dtype, device=device,
                                                          progress=progress, revision=revision)
