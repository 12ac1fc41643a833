"""Where the time of benchmarks/cuda_models.py's rows goes, on a GPU: for the
MiniLM-shaped embeddings (and, with --decode, the SmolLM2-shaped bf16 decode),
each side's wall time per call, the GPU time of each kernel (torch.profiler's
CUPTI trace records every kernel of the process, the cuda plugin's launches
through the driver API too), and the host's Python time by function
(cProfile) for candle-api. A wall time well above the kernels' sum means the
host, not the GPU, sets the pace.

    python backends/cuda/tools/profile_models.py [--decode] [--rows 25]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import candle_api as c  # noqa: E402
from cuda_models import decode_case, embedding_cases, make_folders  # noqa: E402


def wall(fn, sync, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def kernels(torch, fn, sync, rows: int, calls: int = 3) -> None:
    """Per-kernel GPU time over `calls` calls of fn: torch.profiler's table."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        sync()
    launches = sum(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events())
    print(f"  {calls} calls, {launches} kernels and copies in all (the table's last line: their GPU time)")
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=rows, max_name_column_width=60))


def host(fn, rows: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(rows)


def show(name, ours, theirs, torch, sync_ours, sync_theirs, rows) -> None:
    print(f"\n==== {name}")
    for side, fn, sync in (("candle-api", ours, sync_ours), ("torch", theirs, sync_theirs)):
        fn()
        sync()
        print(f"\n-- {side}: wall {wall(fn, sync) * 1e3:.2f} ms per call")
        kernels(torch, fn, sync, rows)
    print("\n-- candle-api host time by function (one call, cProfile)")
    host(ours, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decode", action="store_true", help="also the SmolLM2-shaped bf16 decode (16 tokens)")
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    device = c.get_device(args.device)
    tdev = torch.device("cuda", device.index)
    sync_ours, sync_theirs = device.synchronize, lambda: torch.cuda.synchronize(tdev)
    with tempfile.TemporaryDirectory() as tmp:
        llama, bert = make_folders(Path(tmp), torch, transformers)
        name, _, ours, theirs = embedding_cases(bert, device, tdev, torch, transformers)
        show(name, ours, theirs, torch, sync_ours, sync_theirs, args.rows)
        if args.decode:
            name, _, ours, theirs = decode_case(llama, "bf16", 16, device, tdev, torch, transformers)
            show(name, ours[1], theirs[1], torch, sync_ours, sync_theirs, args.rows)


if __name__ == "__main__":
    main()
