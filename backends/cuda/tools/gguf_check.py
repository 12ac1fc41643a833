"""``candle generate --device cuda`` on GGUF weights kept quantized, checked
against the cpu device: the seeded random Llama folder of
tests/models/test_quantize_command.py (byte-level BPE tokenizer, chat
template) written as GGUF files by ``candle quantize``; for each type, the
GPU memory the loaded model holds against its f32 size, and its logits and
greedy text (``candle generate``) on the GPU against the cpu's with the
weights dequantized to f32 (the GPU's kernels decode the blocks and
multiply f32 activations: the same arithmetic, up to order; the cpu's
quantized kernels round the activations to 8 bits as llama.cpp's do, about
1% of the logits on these random weights, also shown). Exits non-zero when
the logits differ by more than rounding.

    python backends/cuda/tools/gguf_check.py [--device cuda:0]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests" / "models")]

import candle_api as c  # noqa: E402
from candle_models.llama import LlamaForCausalLM  # noqa: E402
from test_quantize_command import IDS, bpe_tokenizer, llama_folder, run_cli  # noqa: E402

TYPES = ("q4_0", "q4k", "q8_0")


def generate(path: Path, device: str, *dtype: str) -> str:
    cmd = [sys.executable, "-m", "candle_api.cli", "generate", "--model", str(path), "--device", device,
           "--temperature", "0", "--max-tokens", "24", *dtype, "What is the capital of France?"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    dev = c.get_device(args.device)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = llama_folder(Path(tmp) / "llama", bpe_tokenizer(), hidden_size=512, intermediate_size=1536,
                              num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4)
        f32 = 4 * sum(t.numel() for shard in folder.glob("*.safetensors") for t in c.load(shard).values())
        for qtype in TYPES:
            path = Path(tmp) / f"model-{qtype}.gguf"
            code, _, err = run_cli(str(folder), str(path), "--type", qtype)
            if code:
                raise SystemExit(f"candle quantize --type {qtype} failed: {err}")
            with c.no_grad():
                want = LlamaForCausalLM.from_pretrained(path, dtype="f32").forward(c.from_numpy(IDS)).numpy()
                blocks = LlamaForCausalLM.from_pretrained(path).forward(c.from_numpy(IDS)).numpy()
                dev.backend.empty_cache()
                before = dev.backend.memory_stats()["allocated"]
                model = LlamaForCausalLM.from_pretrained(path, device=args.device)
                held = dev.backend.memory_stats()["allocated"] - before
                got = model.forward(c.Tensor(IDS, device=dev)).numpy()
            err, err_blocks = (float(np.abs(got - ref).max() / np.abs(ref).max()) for ref in (want, blocks))
            ours, cpu = generate(path, args.device), generate(path, "cpu", "--dtype", "f32")
            failed += err > 1e-4
            print(f"{qtype}: {held / 2**20:.1f} MiB on the GPU (f32 weights: {f32 / 2**20:.1f} MiB); largest logit "
                  f"error / largest logit {err:.1e} against the cpu's dequantized, {err_blocks:.1e} against its "
                  f"quantized kernels; greedy text {'the same' if ours == cpu else 'DIFFERS'}: {ours!r}"
                  + ("" if ours == cpu else f" (cpu: {cpu!r})"))
            del model
    print("ok" if not failed else f"{failed} of {len(TYPES)} types failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
