"""Compiles csrc/ into libcandle_cpu.so, a plain C library loaded with ctypes.

Used by setup.py at ``pip install`` time and runnable on its own for development
and sanitizer builds::

    python build_native.py --out /tmp/asan/libcandle_cpu.so --sanitize address,undefined

The sources are csrc/runtime, csrc/kernels, csrc/arch/generic and the folder
of this machine's architecture (csrc/arch/x86); headers are included by their
path from csrc/. Sources named ``*_avx2.c`` or ``*_avx512.c`` are compiled for
that instruction set only; the library picks one at run time, so one build
runs on any x86-64.
Set CANDLE_WERROR=1 to turn warnings into errors (CI does).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
LIB_NAME = "libcandle_cpu.so"

BASE_FLAGS = [
    "-std=c11", "-fPIC", "-fvisibility=hidden", "-pthread",
    # Signed overflow wraps as in Candle; no errno from libm, so sqrt & co inline.
    "-fwrapv", "-fno-math-errno", "-fno-trapping-math",
    # `#pragma omp simd` (vectorized reductions) without linking an OpenMP runtime.
    "-fopenmp-simd",
    # ISO C mode turns FMA contraction off; a*b+c in one rounding is what we want.
    "-ffp-contract=fast",
    "-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes",
    # Kernels are generated for signed and unsigned types from one expression.
    "-Wno-type-limits",
]
#: platform.machine() -> the folder under csrc/arch with its instruction sets.
ARCH_DIRS = {"x86_64": "x86", "amd64": "x86"}
ISA_FLAGS = {
    "_avx2.c": ["-mavx2", "-mfma", "-mf16c"],
    "_avx512.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c",
                  "-mprefer-vector-width=512"],
}
#: Sources whose float operations must round one at a time, as the code they are
#: bit-exact with does (a contracted a*b+c rounds once).
NO_FP_CONTRACT = {"quant_codec.c"}


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise RuntimeError("candle-backend-cpu needs a C compiler (gcc): none found on PATH")
    return cc


def sources() -> list[Path]:
    machine = platform.machine()
    arch = ARCH_DIRS.get(machine.lower())
    if arch is None:
        raise RuntimeError(f"candle-backend-cpu has no kernels for {machine} yet (see csrc/arch/ in its README)")
    folders = ("runtime", "kernels", "arch/generic", f"arch/{arch}")
    return sorted(src for folder in folders for src in (CSRC / folder).glob("*.c"))


def flags_for(src: Path, sanitize: str | None) -> list[str]:
    flags = list(BASE_FLAGS)
    # sanitizer builds: line tables without gcc's variable tracking, which takes minutes over the unrolled
    # depthwise kernels (templates/panels_impl.h) and then gives up on them anyway
    flags += (["-O1", "-g", "-fno-var-tracking-assignments", "-fno-omit-frame-pointer", f"-fsanitize={sanitize}"]
              if sanitize else ["-O3"])
    if os.environ.get("CANDLE_WERROR") == "1":
        flags.append("-Werror")
    for suffix, extra in ISA_FLAGS.items():
        if src.name.endswith(suffix):
            flags += extra
    if src.name in NO_FP_CONTRACT:
        flags.append("-ffp-contract=off")
    return flags


def build(out: Path, sanitize: str | None = None, jobs: int | None = None) -> Path:
    cc = compiler()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="candle-cpu-build-") as tmp:
        def compile_one(src: Path) -> Path:
            obj = Path(tmp) / (src.relative_to(CSRC).with_suffix(".o").as_posix().replace("/", "-"))
            cmd = [cc, *flags_for(src, sanitize), "-I", str(CSRC), "-c", str(src), "-o", str(obj)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or proc.stderr.strip():
                sys.stderr.write(proc.stderr)
            if proc.returncode != 0:
                raise RuntimeError(f"compiling {src.name} failed: {' '.join(cmd)}")
            return obj

        with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
            objs = list(pool.map(compile_one, sources()))
        link = [cc, "-shared", "-pthread", *(f"-fsanitize={sanitize}" for _ in [0] if sanitize),
                "-o", str(out), *map(str, objs), "-lm"]
        subprocess.run(link, check=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "candle_backend_cpu" / LIB_NAME)
    parser.add_argument("--sanitize", help="e.g. address,undefined")
    args = parser.parse_args()
    print(build(args.out, args.sanitize))


if __name__ == "__main__":
    main()
