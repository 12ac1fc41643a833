"""T5 and ViT at their real sizes, candle-api against transformers in the
same run (interleaved repetitions, medians and spreads, 1 and 2 threads).
No real T5 or ViT weights are on PyPI, so both sides load the same seeded
random checkpoint, written here in the hub's layout:

- ViT-B/16 (google/vit-base-patch16-224's shape: 12 layers of 768, 1000
  classes) images/s, a batch of 8 images of 224 x 224, against transformers'
  ViTForImageClassification with its sdpa and its eager attention;
- T5-small's shape (6 + 6 layers of 512, vocabulary 32128, tied output)
  greedy decode tokens/s: 64 tokens after a 32-token input, with the KV cache
  (the first step, which runs the encoder, not counted), against
  transformers' T5ForConditionalGeneration decoding the same way.

Reported with the ratios; no target (the issue sets none for these
families).

    python benchmarks/t5_vit.py

The transformers numbers need torch and transformers in the same
environment (pip install torch==2.13.0 transformers).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import harness  # noqa: F401  (before numpy: pins thread pools)
import numpy as np
from models import _torch, interleaved_runs, throughputs

import candle_api as c
from candle_api import nn
from candle_models.generation import GenerationStats, Sampler
from candle_models.seq2seq import generate_seq2seq_ids
from candle_models.t5 import T5Config, T5ForConditionalGeneration
from candle_models.vit import ViTConfig, ViTForImageClassification

VIT_CONFIG = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 768,
              "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
              "layer_norm_eps": 1e-12, "image_size": 224, "patch_size": 16, "num_channels": 3, "qkv_bias": True,
              "id2label": {str(i): f"class {i}" for i in range(1000)}}
T5_CONFIG = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "vocab_size": 32128,
             "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
             "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
             "feed_forward_proj": "relu", "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1,
             "dropout_rate": 0.0}
VIT_BATCH, VIT_REPS = 8, 5
INPUT_TOKENS, DECODE_TOKENS, DECODE_REPS = 32, 64, 3


def write_checkpoint(folder: Path, config: dict, build) -> Path:
    """The checkpoint a model builds from an empty VarMap (every name and shape it asks for), filled
    with seeded random values: norms near 1, biases small, matrices scaled by their fan-in."""
    varmap = nn.VarMap()
    build(nn.VarBuilder.from_varmap(varmap, "f32", "cpu"), varmap)
    rng = np.random.default_rng(0)
    for name, var in varmap.data().items():
        shape = var.shape
        if "norm" in name and len(shape) == 1:
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            value = 0.02 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:])) if not name.endswith(("shared.weight", "relative_attention_bias.weight",
                                                                   "cls_token", "position_embeddings")) else 1
            value = rng.standard_normal(shape) / np.sqrt(fan_in)
        var.set(c.from_numpy(value.astype(np.float32)))
    folder.mkdir(parents=True, exist_ok=True)
    varmap.save(folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def vit_checkpoint(folder: Path) -> Path:
    def build(vb, varmap):
        varmap.get((1, 1, 768), "vit.embeddings.cls_token")  # so the model puts its weights under vit.
        ViTForImageClassification(ViTConfig.from_dict(VIT_CONFIG), vb)

    return write_checkpoint(folder, VIT_CONFIG, build)


def t5_checkpoint(folder: Path) -> Path:
    def build(vb, _):
        T5ForConditionalGeneration(T5Config.from_dict(T5_CONFIG), vb)

    return write_checkpoint(folder, T5_CONFIG, build)


def vit_images_per_second(folder: Path, threads: int) -> dict:
    torch = _torch()
    pixels = np.random.default_rng(1).standard_normal((VIT_BATCH, 3, 224, 224)).astype(np.float32)
    c.utils.set_num_threads(threads)
    model = ViTForImageClassification.from_pretrained(folder)

    def candle_run():
        with c.no_grad():
            return model(c.from_numpy(pixels)).numpy()

    variants = {"candle-api": candle_run}
    if torch is not None:
        from transformers import ViTForImageClassification as Reference

        torch.set_num_threads(threads)
        for attention in ("sdpa", "eager"):
            ref = Reference.from_pretrained(str(folder), attn_implementation=attention).eval()

            def torch_run(ref=ref):
                with torch.inference_mode():
                    return ref(pixel_values=torch.from_numpy(pixels)).logits.numpy()

            variants[f"transformers ({attention})"] = torch_run
    return throughputs(variants, VIT_BATCH, VIT_REPS, "transformers")


def t5_decode_tokens_per_second(folder: Path, threads: int) -> dict:
    torch = _torch()
    input_ids = np.random.default_rng(2).integers(3, 32000, INPUT_TOKENS).tolist()
    c.utils.set_num_threads(threads)
    model = T5ForConditionalGeneration.from_pretrained(folder)

    def candle_run():
        stats = GenerationStats()
        tokens = list(generate_seq2seq_ids(model, input_ids, DECODE_TOKENS, Sampler(temperature=0), (), stats))
        return stats.decode_seconds, tokens

    variants = {"candle-api": candle_run}
    if torch is not None:
        from transformers import T5ForConditionalGeneration as Reference

        torch.set_num_threads(threads)
        ref = Reference.from_pretrained(str(folder)).eval()

        def torch_run():
            tokens, cache, decode = [], None, 0.0
            step = torch.tensor([[T5_CONFIG["decoder_start_token_id"]]])
            with torch.inference_mode():
                encoded = ref.get_encoder()(input_ids=torch.tensor([input_ids]))
                for i in range(DECODE_TOKENS):
                    t0 = time.perf_counter()
                    out = ref(encoder_outputs=encoded, decoder_input_ids=step, cache=cache, use_cache=True)
                    cache = out.cache
                    tokens.append(int(out.logits[0, -1].argmax()))
                    step = torch.tensor([[tokens[-1]]])
                    decode += time.perf_counter() - t0 if i else 0.0  # as candle-api's: steps after the first
            return decode, tokens

        variants["transformers"] = torch_run
    for run in variants.values():
        run()  # warm up
    runs = interleaved_runs(variants, DECODE_REPS)
    result = {name: (DECODE_TOKENS - 1) / harness.median([r[0] for _, r in rs]) for name, rs in runs.items()}
    result["spread %"] = {name: harness.spread([r[0] for _, r in rs]) for name, rs in runs.items()}
    if torch is not None:
        result["same tokens"] = runs["candle-api"][0][1][1] == runs["transformers"][0][1][1]
        result["ratio"] = result["candle-api"] / result["transformers"]
    return result


def _line(threads: int, r: dict, unit: str) -> str:
    names = [k for k in r if k not in ("spread %", "max |diff|", "ratio", "same tokens")]
    return f"{threads} thread(s): " + ", ".join(f"{n} {r[n]:.1f}{unit} (±{r['spread %'][n]:.0f}%)" for n in names)


def main() -> int:
    if _torch() is None:
        print("PyTorch/transformers are not installed: candle-api's numbers only")
    with tempfile.TemporaryDirectory() as tmp:
        vit, t5 = vit_checkpoint(Path(tmp) / "vit"), t5_checkpoint(Path(tmp) / "t5")
        harness.header(f"ViT-B/16 images/s (batch {VIT_BATCH}, 224 x 224, random weights)")
        for threads in (1, 2):
            r = vit_images_per_second(vit, threads)
            print(_line(threads, r, "/s"))
            if "ratio" in r:
                print(f"  candle-api / fastest transformers: {r['ratio']:.2f}x, logits agree to {r['max |diff|']:.1e}")
        harness.header(f"T5-small shape greedy decode tokens/s ({INPUT_TOKENS} input tokens, {DECODE_TOKENS} "
                       "generated, random weights)")
        for threads in (1, 2):
            r = t5_decode_tokens_per_second(t5, threads)
            print(_line(threads, r, " tok/s"))
            if "ratio" in r:
                print(f"  candle-api / transformers: {r['ratio']:.2f}x (same tokens: {r['same tokens']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
