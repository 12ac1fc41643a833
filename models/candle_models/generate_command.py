"""``candle generate``: load a causal LM (the Llama family, Gemma 3, GPT-2, Falcon) or a T5 (text to
text), stream the answer to stdout, and the speed to stderr (arguments: see cli.py; the core's command
line reports the errors raised here)."""

from __future__ import annotations

import secrets
import sys

from candle_api.errors import ArgumentError

from . import causal_lm
from .cli import model_path
from .generation import GenerationStats, Sampler, generate
from .seq2seq import text2text
from .progress import Progress
from .tokenizer import Tokenizer


def main(args) -> int:
    if args.max_tokens < 0:
        raise ArgumentError(f"--max-tokens must be >= 0, got {args.max_tokens}")
    # a new seed each run unless --seed, as llama.cpp and transformers sample
    seed = secrets.randbits(64) if args.seed is None else args.seed
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.repeat_penalty, args.repeat_last_n, seed)
    path = model_path(args.model, "generate")
    family = causal_lm.family(path)  # a model of no family read here is named before any loading
    with Progress(0, "loading") as progress:
        tokenizer = Tokenizer.from_pretrained(path)
        model = family.from_pretrained(path, dtype=args.dtype, device=args.device, progress=progress)
    stats, answered = GenerationStats(), False
    if getattr(model, "is_encoder_decoder", False):  # T5: the prompt is the encoder's input, as it is
        if args.system is not None:
            raise ArgumentError("--system needs a chat model: a T5 takes its task in the prompt itself")
        pieces = text2text(model, tokenizer, args.prompt, args.max_tokens, sampler, stats=stats)
    elif not args.raw and tokenizer.chat_template is None:
        raise ArgumentError("the model has no chat template: pass --raw to continue the prompt as plain text")
    else:
        pieces = generate(model, tokenizer, args.prompt, args.max_tokens, sampler, chat=not args.raw,
                          system=args.system, stats=stats)
    try:
        for piece in pieces:
            answered = True  # first: Ctrl-C may come as soon as the piece is out
            sys.stdout.write(piece)
            sys.stdout.flush()
    finally:
        if answered:  # the answer, whole or cut short by Ctrl-C or an error, ends its line
            sys.stdout.write("\n")
            sys.stdout.flush()
    print(f"{stats.prompt_tokens} prompt tokens: {stats.prompt_tokens_per_second:.1f} tokens/s, "
          f"{stats.generated_tokens} tokens generated: {stats.tokens_per_second:.1f} tokens/s "
          f"({stats.finish_reason})", file=sys.stderr)
    return 0
