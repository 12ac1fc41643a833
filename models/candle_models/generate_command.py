"""``candle generate``: load a Llama-family model, stream the answer to
stdout, and the speed to stderr (arguments: see cli.py, which also reports
the errors raised here)."""

from __future__ import annotations

import sys

from candle_api.errors import ArgumentError

from .generation import GenerationStats, Sampler, generate
from .hub import default_model
from .llama import LlamaForCausalLM
from .progress import Progress
from .tokenizer import Tokenizer


def main(args) -> int:
    if args.max_tokens < 0:
        raise ArgumentError(f"--max-tokens must be >= 0, got {args.max_tokens}")
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.repeat_penalty, args.repeat_last_n, args.seed)
    model_path = args.model if args.model is not None else default_model("generate")
    with Progress(0, "loading") as progress:
        tokenizer = Tokenizer.from_pretrained(model_path)
        model = LlamaForCausalLM.from_pretrained(model_path, dtype=args.dtype, device=args.device,
                                                 progress=progress)
    if not args.raw and tokenizer.chat_template is None:
        raise ArgumentError("the model has no chat template: pass --raw to continue the prompt as plain text")
    stats = GenerationStats()
    for piece in generate(model, tokenizer, args.prompt, args.max_tokens, sampler, chat=not args.raw,
                          system=args.system, stats=stats):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    print(f"{stats.prompt_tokens} prompt tokens: {stats.prompt_tokens_per_second:.1f} tokens/s, "
          f"{stats.generated_tokens} tokens generated: {stats.tokens_per_second:.1f} tokens/s "
          f"({stats.finish_reason})", file=sys.stderr)
    return 0
