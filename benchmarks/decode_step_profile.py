"""Where a decoding step's time goes (issue 16): the bound step of candle_models.decode_step on a GGUF
model, as the cpu device's one call and as its kernels called one by one from Python, interleaved in
one run, at a fixed context length; then the kernel-by-kernel step's time per kernel.

Per token it prints the wall time and the calling thread's CPU time (time.thread_time, which load from
other processes disturbs less) of both forms, medians of --reps repetitions of --steps steps with
their spread, and their difference: the Python and ctypes work that the one call saves. The
breakdown times each kernel call of the kernel-by-kernel step (a timer around each call adds ~0.3 us a
call): the products by projection, attention, norms, rope, the cache copies, adds, SwiGLU's gate.

    python benchmarks/decode_step_profile.py MODEL.gguf                   # 1 thread
    python benchmarks/decode_step_profile.py MODEL.gguf --threads 2 --context 60
"""

from __future__ import annotations

import argparse
import collections
import os
import time


def step_timer(step, cache, context: int, ids, steps: int, clock):
    """Seconds per token of ``steps`` steps of ``step``, the cache held at ``context`` positions."""
    total = 0.0
    for _ in range(steps):
        cache.length = context
        t0 = clock()
        step(ids)
        total += clock() - t0
    return total / steps


def breakdown(step, cache, context: int, ids, steps: int) -> dict:
    """{part: seconds per token} of the kernel-by-kernel step, each kernel call timed."""
    acc = collections.defaultdict(float)

    def timed(name, fn):
        def call(*args):
            t0 = time.perf_counter()
            fn(*args)
            acc[name] += time.perf_counter() - t0
        return call

    saved = step.kern, step.products, step.head_product
    step.kern = {n: timed(n, fn) for n, fn in step.kern.items()}
    step.products = [[timed(f"product {p}", fn) for p, fn in zip(("qkv", "o", "gate/up", "down"), layer)]
                     for layer in step.products]
    step.head_product = timed("product head", step.head_product)
    try:
        whole = step_timer(step, cache, context, ids, steps, time.perf_counter)
    finally:
        step.kern, step.products, step.head_product = saved
    parts = {n: s / steps for n, s in acc.items()}
    parts["(Python between the calls)"] = whole - sum(parts.values())
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a GGUF file (quantized weights)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=60, help="cached positions each step sees (default 60)")
    parser.add_argument("--steps", type=int, default=30, help="steps a repetition (default 30)")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    os.environ["BENCH_THREADS"] = os.environ["CANDLE_NUM_THREADS"] = str(args.threads)
    import harness
    import candle_api as c
    from candle_models import decode_step as ds
    from candle_models.llama import LlamaForCausalLM

    harness.header(f"decode step profile, {os.path.basename(args.model)}, {args.threads} thread(s), "
                   f"context {args.context}")
    model = LlamaForCausalLM.from_pretrained(args.model)
    with c.no_grad():
        cache = model.new_cache(capacity=args.context + 1)
        model([[1] * args.context], cache, last_only=True)
        plan = ds.plan_for(model)
        one = ds.decode_step(model, cache)
        if one is None or one.one_call is None:
            print("the step is not bound on this model and device: nothing to profile")
            return 0
        by_kernel = ds.DecodeStep(model, cache, plan, one.kern, one_call=False)
        ids = c.tensor([[42]], dtype="u32")
        forms = {"one call": one, "kernel by kernel": by_kernel}
        times = {(f, clock): [] for f in forms for clock in ("wall", "cpu")}
        for _ in range(args.reps):
            for name, step in forms.items():
                times[(name, "wall")].append(step_timer(step, cache, args.context, ids, args.steps, time.perf_counter))
                times[(name, "cpu")].append(step_timer(step, cache, args.context, ids, args.steps, time.thread_time))
        for clock in ("wall", "cpu"):
            row = [f"{name} {harness.median(times[(name, clock)]) * 1e3:.3f} ms (±{harness.spread(times[(name, clock)]):.0f}%)"
                   for name in forms]
            saved = harness.median(times[("kernel by kernel", clock)]) - harness.median(times[("one call", clock)])
            print(f"{clock:4s} per token: {', '.join(row)}; the one call saves {saved * 1e3:.3f} ms")
        parts = breakdown(by_kernel, cache, args.context, ids, args.steps * args.reps)
        whole = sum(parts.values())
        print(f"kernel by kernel, per token ({whole * 1e3:.3f} ms, timers included):")
        for name, s in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {name:28s} {s * 1e6:8.1f} us  {100 * s / whole:5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
