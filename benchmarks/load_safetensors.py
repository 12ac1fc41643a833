"""Loading a 1 GiB safetensors file: candle-api against the safetensors package, same run.

Writes a 1 GiB file (four 256 MiB f32 tensors) with candle-api into a temporary
folder, then measures each variant in a fresh child process, three times,
interleaved:

- candle-api open:   ``candle_api.load(path)`` and every tensor made, no data touched
                     (zero-copy views of a memory map);
- candle-api read:   the same, then ``t.numpy().sum()`` of every tensor (every page read);
- safetensors load:  ``safetensors.numpy.load_file(path)`` (copies every tensor);
- safetensors read:  the same, then the same sums.

For each it prints the median time, the growth of the child's peak RSS
(``resource.getrusage`` ru_maxrss, over its baseline after imports) and of its
anonymous memory (RssAnon: memory that is a copy, not the file's pages), then
the ratios safetensors / candle-api for opening and for reading (above 1:
candle-api is faster or smaller). The file stays in the page cache, so reads
are warm; mapped file pages count in RSS once read, copies count twice.

    python benchmarks/load_safetensors.py               # 1 GiB, about 30 s
    python benchmarks/load_safetensors.py --mib 256     # a smaller file
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("candle-api open", "candle-api read", "safetensors load", "safetensors read")
REPS = 3


def write_file(path: Path, mib: int) -> None:
    import numpy as np

    import candle_api as c

    rng = np.random.default_rng(0)
    n = mib * (1 << 20) // 4 // 4  # four f32 tensors
    tensors = {f"layer.{i}.weight": c.from_numpy(rng.random(n, dtype=np.float32).reshape(-1, 1024)) for i in range(4)}
    c.save(tensors, path)


def rss_anon_mib() -> float:
    """Anonymous resident memory (Linux), 0 elsewhere."""
    try:
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith("RssAnon:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return 0.0


def measure(variant: str, path: str) -> dict:
    """Runs in a fresh child process: one timed load of ``path``."""
    import resource
    import time

    from safetensors.numpy import load_file

    import candle_api as c

    c.ones(1)  # plugins and the backend loaded before the baseline
    peak0, anon0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rss_anon_mib()
    t0 = time.perf_counter()
    if variant.startswith("candle-api"):
        arrays = [t.numpy() for t in c.load(path).values()]
    else:
        arrays = list(load_file(path).values())
    if variant.endswith("read"):
        total = sum(float(a.sum()) for a in arrays)
        assert total > 0
    seconds = time.perf_counter() - t0
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak0) / 1024
    return {"seconds": seconds, "peak_mib": peak, "anon_mib": rss_anon_mib() - anon0}


def run_child(args: list[str]) -> dict | None:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="file size in MiB (default 1024)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--write", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child)))
        return 0
    if args.write:
        write_file(Path(args.write), args.mib)
        return 0
    sys.path.insert(0, str(HERE))
    import harness

    harness.header(f"loading a {args.mib} MiB safetensors file: candle-api vs the safetensors package")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        # A child writes the file: ru_maxrss passes from parent to child through
        # fork and exec, so a parent that held the tensors would mask the children's peaks.
        run_child(["--write", str(path), "--mib", str(args.mib)])
        runs = {v: [] for v in VARIANTS}
        for _ in range(REPS):
            for variant in VARIANTS:
                runs[variant].append(run_child(["--child", variant, str(path)]))
    median = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in runs.items()}
    print(f"{'variant':18s} {'time':>10s} {'peak RSS':>11s} {'anon RSS':>11s}   (medians of {REPS} fresh processes)")
    for v, m in median.items():
        print(f"{v:18s} {m['seconds'] * 1e3:7.1f} ms {m['peak_mib']:7.0f} MiB {m['anon_mib']:7.0f} MiB")
    for what, ours, theirs in (("open", "candle-api open", "safetensors load"),
                               ("read", "candle-api read", "safetensors read")):
        a, b = median[ours], median[theirs]
        print(f"{what}: safetensors / candle-api = {b['seconds'] / a['seconds']:.1f}x time, "
              f"peak RSS {_ratio(b['peak_mib'], a['peak_mib'])}, anonymous {_ratio(b['anon_mib'], a['anon_mib'])}")
    return 0


def _ratio(theirs: float, ours: float) -> str:
    """theirs / ours, or both sizes when ours is under 1 MiB (a ratio to ~0 says nothing)."""
    return f"{theirs / ours:.1f}x" if ours >= 1 else f"{theirs:.0f} MiB vs {ours:.0f} MiB"


if __name__ == "__main__":
    sys.exit(main())
