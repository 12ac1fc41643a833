"""Builds libcuda_emu.so: the kernels of candle_backend_cuda/csrc compiled for
the host with g++, behind an emulated CUDA driver API (driver.cpp, emu.h).
The plugin runs on it when ``CANDLE_CUDA_DRIVER`` names it::

    lib=$(python backends/cuda/emu/build_emu.py)
    CANDLE_CUDA_DRIVER=$lib python -m pytest --pyargs candle_api.testing.conformance --candle-device cuda

A build is cached under ``CANDLE_CUDA_EMU_CACHE`` (default
~/.cache/candle-api/cuda-emu), keyed by a hash of the sources and flags.
g++ needs cuda_fp16.h and cuda_bf16.h (with crt/): from the toolkit of
nvcc, /usr/local/cuda, or the nvidia-cuda-runtime and nvidia-cuda-crt wheels.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE.parent / "candle_backend_cuda" / "csrc"
# -Wno-unknown-pragmas: the kernels' #pragma unroll is nvcc's
FLAGS = ["-std=c++17", "-fPIC", "-O2", "-DCANDLE_EMU", "-fvisibility=hidden", "-fno-strict-aliasing",
         "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-function", "-Wno-unused-variable",
         "-Wno-unknown-pragmas"]


def cuda_include() -> Path:
    """A folder with cuda_fp16.h, cuda_bf16.h and crt/host_defines.h."""
    candidates = [os.environ.get("CANDLE_CUDA_INCLUDE")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        root = Path(nvcc).resolve().parent.parent
        candidates += [root / "include", root / "targets" / "x86_64-linux" / "include"]
    candidates.append("/usr/local/cuda/include")
    candidates += [Path(p, "nvidia", "cu13", "include") for p in sys.path if p]
    for c in candidates:
        if c and Path(c, "cuda_fp16.h").is_file() and Path(c, "crt", "host_defines.h").is_file():
            return Path(c)
    raise RuntimeError("the CUDA emulation needs cuda_fp16.h and crt/host_defines.h: install a CUDA toolkit or "
                       "`pip install nvidia-cuda-runtime nvidia-cuda-crt`, or set CANDLE_CUDA_INCLUDE")


def sources() -> list[Path]:
    return [*sorted(CSRC.glob("*.cu")), HERE / "driver.cpp"]


def digest(extra: list[str]) -> str:
    h = hashlib.sha256(" ".join(FLAGS + extra).encode())
    for path in [*sources(), *sorted(CSRC.glob("*.cuh")), HERE / "emu.h"]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build(sanitize: str | None = None, jobs: int | None = None) -> Path:
    extra = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"] if sanitize else []
    cache = Path(os.environ.get("CANDLE_CUDA_EMU_CACHE", Path.home() / ".cache" / "candle-api" / "cuda-emu"))
    out = cache / digest(extra) / "libcuda_emu.so"
    if out.is_file():
        return out
    include = cuda_include()
    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="candle-cuda-emu-") as tmp:
        def compile_one(src: Path) -> str:
            obj = Path(tmp, src.stem + ".o")
            cmd = [cxx, *FLAGS, *extra, "-x", "c++", "-I", str(HERE), "-I", str(CSRC), "-isystem", str(include),
                   "-c", str(src), "-o", str(obj)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.stderr.strip():
                sys.stderr.write(proc.stderr)
            if proc.returncode:
                raise RuntimeError(f"compiling {src.name} for the CUDA emulation failed: {' '.join(cmd)}")
            return str(obj)

        with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
            objs = list(pool.map(compile_one, sources()))
        partial = out.with_suffix(".tmp")
        subprocess.run([cxx, "-shared", *extra, "-o", str(partial), *objs], check=True)
        partial.replace(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sanitize", help="e.g. address,undefined")
    args = parser.parse_args()
    print(build(args.sanitize))


if __name__ == "__main__":
    main()
