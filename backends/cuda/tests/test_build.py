"""What the wheel build made: a fatbin per kernel source holding machine
code for every architecture asked for (CANDLE_CUDA_ARCHS) and the PTX of
the newest, checked with cuobjdump (the nvidia-cuda-cuobjdump wheel); every
kernel's parameters as nvcc laid them out equal to what the host packs
(kernels/signatures.py); and NVRTC compiling a source for an architecture
the fatbins lack. Needs no GPU."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from candle_backend_cuda import modules
from candle_backend_cuda.kernels.signatures import SIGNATURES, family
from candle_backend_cuda.launch import param_layout, param_struct

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from build_fatbin import DEFAULT_ARCHS, parse_archs  # noqa: E402

MANIFEST = modules.manifest()
needs_fatbins = pytest.mark.skipif(not MANIFEST["archs"], reason="the fatbins are not built (pip install the plugin)")


def cuobjdump() -> str:
    found = os.environ.get("CANDLE_CUOBJDUMP") or shutil.which("cuobjdump")
    if not found:
        for root in sys.path:
            path = Path(root or ".", "nvidia", "cu13", "bin", "cuobjdump")
            if path.is_file():
                found = str(path)
                break
    if not found:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    return found


def dump(*args) -> str:
    return subprocess.run([cuobjdump(), *map(str, args)], capture_output=True, text=True, check=True).stdout


def kernel_params(path, sizes: dict | None = None) -> dict:
    """{(arch, kernel): [(offset, size) by parameter ordinal]} from cuobjdump -elf; sizes, when
    given, gets {(arch, kernel): the bytes of its parameter buffer} (EIATTR_CBANK_PARAM_SIZE)."""
    out, arch, kernel, attr = {}, None, None, None
    for line in dump("-elf", path).splitlines():
        if m := re.match(r"arch = (sm_\d+)", line.strip()):
            arch = m.group(1)
        elif m := re.match(r"\.nv\.info\.(\w+)$", line.strip()):
            kernel = m.group(1)
            out[(arch, kernel)] = {}
        elif m := re.search(r"Ordinal : 0x([0-9a-f]+)\s+Offset\s+: 0x([0-9a-f]+)\s+Size\s+: 0x([0-9a-f]+)", line):
            out[(arch, kernel)][int(m.group(1), 16)] = (int(m.group(2), 16), int(m.group(3), 16))
        elif m := re.match(r"Attribute:\s+(\w+)", line.strip()):
            attr = m.group(1)
        elif (m := re.match(r"Value:\s+0x([0-9a-f]+)$", line.strip())) and attr == "EIATTR_CBANK_PARAM_SIZE":
            if sizes is not None:
                sizes[(arch, kernel)] = int(m.group(1), 16)
    return {key: [params[i] for i in sorted(params)] for key, params in out.items()}


@needs_fatbins
def test_the_manifest_holds_the_architectures_asked_for():
    asked = parse_archs(os.environ.get("CANDLE_CUDA_ARCHS", DEFAULT_ARCHS))
    assert MANIFEST["archs"] == [f"sm_{a}" for a in asked]
    assert MANIFEST["ptx"] == f"compute_{asked[-1]}"
    assert sorted(MANIFEST["fatbins"]) == sorted(f"{m}.fatbin" for m in SIGNATURES)


@needs_fatbins
@pytest.mark.parametrize("module", sorted(SIGNATURES))
def test_each_fatbin_holds_every_architecture_and_the_ptx(module):
    path = modules.FATBIN_DIR / f"{module}.fatbin"
    elfs = re.findall(r"\.(sm_\d+)\.cubin", dump("--list-elf", path))
    ptx = re.findall(r"\.(sm_\d+)\.ptx", dump("--list-ptx", path))
    assert sorted(elfs) == sorted(MANIFEST["archs"])
    assert ptx == [MANIFEST["ptx"].replace("compute_", "sm_")]


@needs_fatbins
@pytest.mark.parametrize("module", sorted(SIGNATURES))
def test_kernel_parameters_match_what_the_host_packs(module):
    sizes = {}
    params = kernel_params(modules.FATBIN_DIR / f"{module}.fatbin", sizes)
    families = set()
    for (arch, kernel), members in params.items():
        fam = family(kernel)
        assert fam in SIGNATURES[module], f"{kernel} ({arch}) has no signature in kernels/signatures.py"
        assert members == param_layout(SIGNATURES[module][fam])[1], f"{kernel} ({arch}): {members}"
        # the driver refuses a parameter buffer of another size (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
        assert param_struct(SIGNATURES[module][fam]).size == sizes[(arch, kernel)], f"{kernel} ({arch})"
        families.add(fam)
    assert families == set(SIGNATURES[module]), "a signature without a kernel"


def test_nvrtc_compiles_a_source_for_an_architecture_the_fatbins_lack(tmp_path, monkeypatch):
    from candle_api.errors import BackendUnavailableError
    from candle_backend_cuda import nvrtc

    try:
        nvrtc.load()
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("CANDLE_CUDA_CACHE", str(tmp_path / "cache"))
    arch = 120 if nvrtc.version() >= (12, 8) else 89  # sm_120 (Blackwell workstation) is in no fatbin
    cubin = nvrtc.compile_cubin("memory", arch)
    assert cubin[:4] == b"\x7fELF"
    path = tmp_path / "memory.cubin"
    path.write_bytes(cubin)
    params = kernel_params(path)
    assert {kernel for _arch, kernel in params} == {f"{f}_{b}" for f in ("copy", "fill") for b in (8, 16, 32, 64)}
    for (_arch, kernel), members in params.items():
        assert members == param_layout(SIGNATURES["memory"][family(kernel)])[1]
    assert nvrtc.compile_cubin("memory", arch) == cubin  # from the cache
    assert len(list((tmp_path / "cache").glob("memory-sm_*.cubin"))) == 1


@pytest.mark.skipif(os.environ.get("CANDLE_CUDA_NVRTC_ALL") != "1",
                    reason="NVRTC over every source takes minutes: set CANDLE_CUDA_NVRTC_ALL=1")
@pytest.mark.parametrize("module", sorted(SIGNATURES))
def test_nvrtc_compiles_every_source(module, tmp_path, monkeypatch):
    from candle_backend_cuda import nvrtc

    monkeypatch.setenv("CANDLE_CUDA_CACHE", str(tmp_path))
    path = tmp_path / f"{module}.cubin"
    path.write_bytes(nvrtc.compile_cubin(module, 120))
    for (_arch, kernel), members in kernel_params(path).items():
        assert members == param_layout(SIGNATURES[module][family(kernel)])[1], kernel
