"""Where candle-api's greedy tokens leave llama.cpp's on a quantized GGUF, and whether it is a near tie.

benchmarks/quantized.py reports how many of the greedy tokens agree; this says why they stop: at the
first step where the two choose differently, the top-2 logit gap of each engine, and how far
candle-api's logits are from llama.cpp's there and on the steps before (candle-api fed llama.cpp's
tokens, so that both see the same history; the shift of the whole vector, which softmax ignores,
removed). A gap under the usual distance between the two engines'
logits is a near tie that rounding decides, not a difference of arithmetic.

    python benchmarks/greedy_divergence.py MODEL.gguf --llama-python /work/benchenv/bin/python

llama.cpp runs through llama-cpp-python in that interpreter (this one when it imports llama_cpp), on
one thread, as the benchmark runs it (n_ctx 1024, greedy from the last logits).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

PROMPT = "How many days are in a week?"  # benchmarks/quantized.py's decode prompt


def llama_steps(model: str, ids: list, n: int) -> dict:
    """llama.cpp's greedy tokens and each step's top-5 (id, logit) (runs in the llama-cpp-python interpreter)."""
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=1, n_threads_batch=1, seed=0,
                          verbose=False)
    vocab = llm.n_vocab()
    llm.eval(ids)
    tokens, tops = [], []
    for step in range(n):
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))
        order = np.argsort(-logits)[:5]
        tokens.append(int(order[0]))
        tops.append([[int(i), float(logits[i])] for i in order])
        if step < n - 1:
            llm.eval([tokens[-1]])
    return {"tokens": tokens, "tops": tops}


def candle_logits(model, ids: list, feed: list):
    """candle-api's last logits after ``ids``, then after each token of ``feed``."""
    import candle_api as c

    with c.no_grad():
        cache = model.new_cache(capacity=len(ids) + len(feed) + 1)
        yield model([ids], cache, last_only=True)[0, 0].numpy()
        for token in feed:
            yield model([[token]], cache, last_only=True)[0, 0].numpy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a GGUF file")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--llama-python", help="an interpreter with llama-cpp-python, when this one lacks it")
    parser.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.llama_worker:
        print(json.dumps(llama_steps(args.model, json.loads(args.ids), args.tokens)))
        return 0

    import numpy as np

    from candle_models import default_model
    from candle_models.llama import LlamaForCausalLM
    from candle_models.tokenizer import Tokenizer

    ids = Tokenizer.from_pretrained(default_model("generate")).encode_chat(PROMPT)
    cmd = [args.llama_python or sys.executable, __file__, args.model, "--llama-worker", "--ids", json.dumps(ids),
           "--tokens", str(args.tokens)]
    ref = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                    env=dict(os.environ, OMP_NUM_THREADS="1")).stdout)
    model = LlamaForCausalLM.from_pretrained(args.model)
    # Fed llama.cpp's tokens, the first step whose choice differs is where the two greedy runs part.
    diverge, worst = None, 0.0
    for step, logits in enumerate(candle_logits(model, ids, ref["tokens"][:-1])):
        top = ref["tops"][step]
        top_ids = [i for i, _ in top]
        gap = logits[top_ids] - np.array([v for _, v in top])
        diff = float(np.abs(gap - gap.mean()).max())  # less the shift of the whole vector, which softmax ignores
        if int(np.argmax(logits)) != top_ids[0]:
            order = np.argsort(-logits)[:2]
            print(f"step {step}: llama.cpp chose {top_ids[0]} over {top_ids[1]} by {top[0][1] - top[1][1]:.3f}; "
                  f"candle-api chose {order[0]} over {order[1]} by {logits[order[0]] - logits[order[1]]:.3f} "
                  f"(llama.cpp's choice {logits[top_ids[0]] - logits[order[0]]:+.3f} from its best); "
                  f"max |candle-api - llama.cpp| over llama.cpp's top 5 (shift removed): {diff:.3f} there, "
                  f"{worst:.3f} on the steps before")
            diverge = step
            break
        worst = max(worst, diff)
    if diverge is None:
        print(f"fed llama.cpp's tokens, candle-api chose llama.cpp's token at every one of {len(ref['tokens'])} steps "
              f"(max |candle-api - llama.cpp| over its top 5, shift removed: {worst:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
