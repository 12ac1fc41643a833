"""One short GPU run for the SDPA kernels (csrc/attention.cu): each case's
output against PyTorch's SDPA (in f32) on the same inputs,
then the time of the tensor-core kernel (bf16/f16) and of the f32
thread-per-row kernel, with PyTorch's beside them::

    python backends/cuda/tools/sdpa_check.py            # on a GPU machine, PyTorch installed

Prints a line per case and ends with "sdpa_check: N failed"; exits 1 when
any case's maximum error is past its bound (bf16 2e-2, f16 4e-3, f32 2e-5,
absolute, on outputs of about unit size) or a case did not take the kernel
it should. Takes under a minute on an H200.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import candle_api as c
import candle_api.functional as CF

BOUND = {"bf16": 2e-2, "f16": 4e-3, "f32": 2e-5}


def timed(fn, sync, min_time=0.2) -> float:
    fn()
    sync()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or n >= 1 << 12:
            return elapsed / n
        n *= 2


def main() -> int:
    import torch
    import torch.nn.functional as F
    from candle_backend_cuda import launch

    dev = c.get_device("cuda:0")
    tdev = torch.device("cuda", 0)
    names: list[str] = []
    original = launch.Function.launch

    def record(self, *args, **kwargs):
        names.append(self.name)
        return original(self, *args, **kwargs)

    launch.Function.launch = record
    print(f"device: {dev.backend.gpu.describe()}; torch {torch.__version__}")
    g = torch.Generator(device=tdev).manual_seed(0)
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    failed = 0

    def tensors(shape, dtype):
        """(candle tensor, torch tensor) of the same values, through the host as the benchmark does."""
        t = torch.randn(*shape, generator=g, device=tdev, dtype=tdt[dtype])
        return c.Tensor(t.float().cpu().numpy(), device=dev).to_dtype(dtype), t

    cases = []  # (dtype, b, h, l, s, e, causal, mask kind, kernel expected)
    for dtype in ("bf16", "f16"):
        for e in (32, 64, 128):
            for causal in (False, True):
                cases.append((dtype, 2, 8, 1000, 1000, e, causal, None, f"flash_attention_e{e}_{dtype}"))
        cases.append((dtype, 2, 8, 333, 777, 64, False, "u8", f"flash_attention_e64_{dtype}"))
        cases.append((dtype, 2, 8, 333, 777, 128, False, "add", f"flash_attention_e128_{dtype}"))
        cases.append((dtype, 1, 4, 900, 500, 128, True, None, f"flash_attention_e128_{dtype}"))
    for e in (32, 64):
        cases.append(("f32", 32, 12, 128, 128, e, False, "u8", f"attention_tiled_e{e}_f32"))
        cases.append(("f32", 2, 4, 700, 700, e, True, None, f"attention_tiled_e{e}_f32"))
    for dtype, b, h, length, s, e, causal, mask_kind, kernel in cases:
        (q, tq), (k, tk), (v, tv) = (tensors((b, h, n, e), dtype) for n in (length, s, s))
        mask = tmask = None
        if mask_kind == "u8":
            tkeep = torch.rand(b, 1, length, s, generator=g, device=tdev) > 0.3
            tkeep[:, :, 5] = False  # a row that sees no key: candle gives zeros (torch NaN), compared apart
            mask, tmask = c.Tensor(tkeep.cpu().numpy().astype(np.uint8), device=dev), tkeep
        elif mask_kind == "add":
            mask, tmask = tensors((1, h, length, s), dtype)
            tmask = tmask.float()
        names.clear()
        got = CF.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        dev.synchronize()
        took = kernel in names
        want = F.scaled_dot_product_attention(tq.float(), tk.float(), tv.float(), attn_mask=tmask,
                                              is_causal=causal)
        got_t = torch.from_numpy(got.to_dtype("f32").numpy()).to(tdev)
        if mask_kind == "u8":
            empty_ok = bool((got_t[:, :, 5] == 0).all())
            got_t[:, :, 5] = 0
            want[:, :, 5] = 0
        else:
            empty_ok = True
        err = (got_t - want).abs().max().item()
        nan = bool(torch.isnan(got_t).any())
        ok = took and empty_ok and not nan and err <= BOUND[dtype]
        failed += not ok
        line = f"{dtype} b{b} h{h} L{length} S{s} E{e} causal={causal} mask={mask_kind}: max err {err:.3g}"
        print(f"{'ok  ' if ok else 'FAIL'} {line}{'' if took else f' (ran {names}, not {kernel})'}"
              f"{'' if empty_ok else ' (empty row not zeros)'}{' (NaN)' if nan else ''}", flush=True)

    sync = lambda: torch.cuda.synchronize(tdev)  # noqa: E731
    print("\ntimes (causal as half the work):")
    for dtype, b, h, length, e, causal in [("bf16", 4, 32, 2048, 128, True), ("bf16", 4, 32, 2048, 128, False),
                                           ("f16", 4, 32, 2048, 64, True), ("bf16", 4, 32, 4096, 128, True),
                                           ("f32", 32, 12, 128, 32, False)]:
        (q, tq), (k, tk), (v, tv) = (tensors((b, h, length, e), dtype) for _ in range(3))
        flops = 4 * b * h * length * length * e / (2 if causal else 1)
        ours = timed(lambda: CF.scaled_dot_product_attention(q, k, v, is_causal=causal), dev.synchronize)
        theirs = timed(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal), sync)
        print(f"  {dtype} {b}x{h}x{length}x{e} causal={causal}: candle {flops / ours / 1e12:.1f} TFLOP/s "
              f"({ours * 1e3:.3f} ms), torch {flops / theirs / 1e12:.1f} TFLOP/s, ratio {theirs / ours:.2f}",
              flush=True)
    print(f"sdpa_check: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
