"""Compiles the CUDA kernels (candle_backend_cuda/csrc/*.cu) into fatbins, one
per source file, with nvcc. Used by setup.py when the wheel is built, and
runnable on its own::

    python build_fatbin.py --out /tmp/fatbin --archs 90

Each fatbin holds machine code (SASS) for every architecture of
``CANDLE_CUDA_ARCHS`` (default ``80,86,89,90``: A100, A10/A40/RTX 30,
L4/L40/RTX 40, H100/H200) and the PTX of the newest, which the driver can
compile for a GPU newer than all of them. A GPU of another architecture
gets its kernels from NVRTC at run time (nvrtc.py). ``manifest.json``
beside the fatbins records what was built, with which nvcc.

nvcc is found in this order: ``CANDLE_NVCC``; a system one (PATH,
``CUDA_HOME``/``CUDA_PATH``, /usr/local/cuda); the ``nvidia-cuda-nvcc`` wheel
(``nvidia/cu13/bin/nvcc`` in site-packages), which build_backend.py adds to
the build requirements when there is no system nvcc. ``CANDLE_WERROR=1``
makes every nvcc warning (front end and ptxas) an error; CI sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE / "candle_backend_cuda" / "csrc"
DEFAULT_ARCHS = "80,86,89,90"
#: Where the nvidia-cuda-nvcc wheel puts nvcc, under a site-packages folder (CUDA 13, then 12).
WHEEL_NVCC = ("nvidia/cu13/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc")

NVCC_FLAGS = [
    "-std=c++17", "-O3", "--fatbin",
    # IEEE division and square root, denormals kept: the conformance suite's tolerances are those of
    # correctly rounded f32 arithmetic (no --use_fast_math).
    "-ftz=false", "-prec-div=true", "-prec-sqrt=true",
    "-Wno-deprecated-gpu-targets",
    # compressed fatbins (the driver decompresses them at load): about a third of the size in the wheel
    "-Xfatbin=-compress-all",
]


def system_nvcc() -> str | None:
    """An nvcc installed with a CUDA toolkit, or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and Path(root, "bin", "nvcc").is_file():
            return str(Path(root, "bin", "nvcc"))
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


def wheel_nvcc() -> str | None:
    """nvcc from the nvidia-cuda-nvcc wheel in this interpreter's site-packages, or None."""
    roots = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path]
    for root in dict.fromkeys(roots):
        for rel in WHEEL_NVCC:
            path = Path(root or ".", rel)
            if path.is_file():
                return str(path)
    return None


def find_nvcc() -> str:
    found = os.environ.get("CANDLE_NVCC") or system_nvcc() or wheel_nvcc()
    if not found:
        raise RuntimeError("candle-backend-cuda needs nvcc to build its kernels: none on PATH, in CUDA_HOME or "
                           "/usr/local/cuda, nor from the nvidia-cuda-nvcc wheel (`pip install nvidia-cuda-nvcc`), "
                           "and CANDLE_NVCC is not set")
    return found


def parse_archs(text: str | None = None) -> list[int]:
    """``CANDLE_CUDA_ARCHS`` ("80,86,89,90", "90", "8.9 9.0") as compute capabilities times ten."""
    text = text if text is not None else os.environ.get("CANDLE_CUDA_ARCHS", DEFAULT_ARCHS)
    archs = []
    for item in filter(None, re.split(r"[,;\s]+", text.strip())):
        value = item.lower().removeprefix("sm_").removeprefix("compute_")
        number = int(round(float(value) * 10)) if "." in value else int(value)
        if number < 80:
            raise ValueError(f"CANDLE_CUDA_ARCHS={text!r}: sm_{number} is older than sm_80, the oldest these "
                             "kernels are written for (bf16 arithmetic)")
        archs.append(number)
    if not archs:
        raise ValueError(f"CANDLE_CUDA_ARCHS={text!r} names no architecture")
    return sorted(set(archs))


def gencode(archs: list[int]) -> list[str]:
    """SASS for each architecture, PTX for the newest."""
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return flags + [f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"]


def sources() -> list[Path]:
    return sorted(CSRC.glob("*.cu"))


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return match.group(2) if match else out.strip().splitlines()[-1]


def build(out: Path, archs: list[int] | None = None, jobs: int | None = None) -> Path:
    """Compiles every source into out/<name>.fatbin and writes out/manifest.json."""
    nvcc = find_nvcc()
    archs = archs or parse_archs()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    flags = [*NVCC_FLAGS, *gencode(archs), "-I", str(CSRC)]
    if os.environ.get("CANDLE_WERROR") == "1":
        flags += ["--Werror", "all-warnings"]

    def compile_one(src: Path) -> str:
        target = out / f"{src.stem}.fatbin"
        cmd = [nvcc, *flags, str(src), "-o", str(target)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.stderr.strip():
            sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed on {src.name}: {' '.join(cmd)}")
        return target.name

    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        built = list(pool.map(compile_one, sources()))
    manifest = {"archs": [f"sm_{a}" for a in archs], "ptx": f"compute_{archs[-1]}", "nvcc": nvcc_version(nvcc),
                "fatbins": built}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "candle_backend_cuda" / "fatbin")
    parser.add_argument("--archs", help=f"compute capabilities, default CANDLE_CUDA_ARCHS or {DEFAULT_ARCHS}")
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args()
    print(build(args.out, parse_archs(args.archs) if args.archs else None, args.jobs))


if __name__ == "__main__":
    main()
