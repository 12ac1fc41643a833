"""Finding NVIDIA's libraries as cuda-pathfinder does: the order of the
places searched, the first one that loads winning, the message when none
does, and the real wheels (nvidia-cuda-nvrtc, nvidia-cublas) found and
usable without a GPU."""

import subprocess

import pytest

from candle_api.errors import BackendUnavailableError
from candle_backend_cuda import libs

NVRTC = libs.LIBS["nvrtc"]


def test_the_search_order(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    env = {"CONDA_PREFIX": "/conda", "CUDA_HOME": "/cuda"}
    order = [path for path, _ in libs.candidates(NVRTC, env, sites=[a, b])]
    assert order == [
        f"{a}/nvidia/cu13/lib/libnvrtc.so.13", f"{a}/nvidia/cu13/lib/libnvrtc.so.12",
        f"{b}/nvidia/cu13/lib/libnvrtc.so.13", f"{b}/nvidia/cu13/lib/libnvrtc.so.12",
        f"{a}/nvidia/cuda_nvrtc/lib/libnvrtc.so.13", f"{a}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        f"{b}/nvidia/cuda_nvrtc/lib/libnvrtc.so.13", f"{b}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        "/conda/lib/libnvrtc.so.13", "/conda/lib/libnvrtc.so.12",
        "libnvrtc.so.13", "libnvrtc.so.12",  # the dynamic loader's own search
        "/cuda/lib64/libnvrtc.so.13", "/cuda/lib64/libnvrtc.so.12", "/cuda/lib/libnvrtc.so.13",
        "/cuda/lib/libnvrtc.so.12",
    ]


def test_an_override_is_the_only_candidate():
    assert libs.candidates(NVRTC, {"CANDLE_CUDA_NVRTC": "/x/libnvrtc.so"}, sites=["/s"]) == [
        ("/x/libnvrtc.so", "CANDLE_CUDA_NVRTC")]


def test_the_driver_comes_from_the_system_only():
    cands = libs.candidates(libs.LIBS["driver"], {"CUDA_HOME": "/cuda", "CONDA_PREFIX": "/conda"}, sites=["/s"])
    assert cands == [("libcuda.so.1", "the system's library search")]


def _shared_lib(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / "empty.c"
    src.write_text("int candle_test_marker(void) { return 1; }\n")
    try:
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(src)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs gcc: {exc}")


def test_the_first_library_that_loads_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    # names no process has loaded (the real NVRTC may be, which the search would take first)
    _shared_lib(a / "nvidia/cuda_nvrtc/lib/libcandle-test.so.12")  # the CUDA 12 layout in the first site dir
    _shared_lib(b / "nvidia/cu13/lib/libcandle-test.so.13")        # the CUDA 13 layout in the second: searched first
    spec = libs.LibSpec("test", ("libcandle-test.so.13", "libcandle-test.so.12"), NVRTC.wheel_dirs, NVRTC.wheel)
    found = libs._search(spec, libs.candidates(spec, {}, sites=[str(a), str(b)]))
    assert found.path == str(b / "nvidia/cu13/lib/libcandle-test.so.13")
    assert found.via == f"site-packages ({b})"


def test_a_library_found_nowhere_says_what_to_install(tmp_path):
    spec = libs.LibSpec("nothing", ("libcandle-no-such-lib.so.1",), ("nvidia/cu13/lib",), "nvidia-cuda-nvrtc")
    with pytest.raises(BackendUnavailableError) as err:
        libs._search(spec, libs.candidates(spec, {}, sites=[str(tmp_path)]))
    message = str(err.value)
    assert "libcandle-no-such-lib.so.1 not found: `pip install nvidia-cuda-nvrtc` provides it" in message
    assert str(tmp_path / "nvidia/cu13/lib/libcandle-no-such-lib.so.1") in message


def _installed(name: str):
    try:
        return libs.load(name)
    except BackendUnavailableError as exc:
        pytest.skip(f"the {name} wheel is not installed here: {exc}")


def test_nvrtc_from_its_wheel_runs_without_a_gpu():
    from candle_backend_cuda import nvrtc

    found = _installed("nvrtc")
    assert found.via.startswith(("site-packages", "already loaded")), found
    assert nvrtc.version() >= (12, 0)
    assert (nvrtc.include_dir() / "cuda_fp16.h").is_file()  # what NVRTC compiles the kernels with


def test_cublaslt_from_its_wheel_runs_without_a_gpu():
    from candle_backend_cuda import cublaslt

    found = _installed("cublaslt")
    assert found.via.startswith(("site-packages", "already loaded")), found
    assert cublaslt.version() >= 120000


def test_a_copy_already_loaded_is_shared(run_python):
    code = ("import ctypes\nfrom candle_backend_cuda import libs\n"
            "first = libs._search(libs.LIBS['nvrtc'])\n"
            "libs.forget()\n"
            "again = libs.load('nvrtc')\n"
            "print(first.via.split(' (')[0], '|', again.via)")
    proc = run_python(code)
    if "not found" in proc.stderr:
        pytest.skip("nvidia-cuda-nvrtc is not installed here")
    assert proc.stdout.strip() == "site-packages | already loaded in this process", proc.stderr
