"""Without a driver the plugin still imports, opens nothing, and `candle
info` lists the cuda device as unavailable with the reason: the library
not found, cuInit's error name, or a driver too old for a function the
plugin calls. Runs on every machine (the driver is named through
CANDLE_CUDA_DRIVER, so a machine with a GPU runs these too)."""

import subprocess

import pytest

from candle_backend_cuda.driver import SIGNATURES

INFO = "from candle_api.info import describe; print(describe(show_ops=False))"


def test_importing_the_plugin_opens_no_library(run_python):
    code = ("import candle_backend_cuda, candle_backend_cuda.plugin, candle_api\n"
            "from candle_api.registry import registry\n"
            "registry().backends()\n"  # the plugin modules imported, no device asked about
            "maps = open('/proc/self/maps').read()\n"
            "print([lib for lib in ('libcuda', 'libnvrtc', 'libcublas') if lib in maps])")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_no_driver_is_reported_with_what_was_tried(tmp_path, run_python):
    missing = tmp_path / "libcuda.so.1"
    proc = run_python(INFO, CANDLE_CUDA_DRIVER=missing)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "device cuda:" in line)
    assert "unavailable: libcuda.so.1 not found: no NVIDIA driver is installed" in line
    assert str(missing) in line


def _fake_driver(tmp_path, init_status: int, omit: str = "") -> str:
    """A libcuda with every function the plugin declares: cuInit returns init_status, the error
    names are the driver's; `omit` leaves one out (a driver too old)."""
    lines = ['static const char *name(int c) { return c == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN"; }',
             'static const char *text(int c) { return c == 100 ? "no CUDA-capable device is detected" : "unknown"; }',
             "int cuGetErrorName(int c, const char **out) { *out = name(c); return 0; }",
             "int cuGetErrorString(int c, const char **out) { *out = text(c); return 0; }",
             f"int cuInit(unsigned flags) {{ (void)flags; return {init_status}; }}"]
    for fn in SIGNATURES:
        if fn not in ("cuGetErrorName", "cuGetErrorString", "cuInit", omit):
            lines.append(f"int {fn}(void) {{ return 999; }}")
    src = tmp_path / "fake_cuda.c"
    src.write_text("\n".join(lines) + "\n")
    lib = tmp_path / "libcuda.so.1"
    try:
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs gcc to build a fake driver: {exc}")
    return str(lib)


def test_cuinit_failure_is_reported_by_its_error_name(tmp_path, run_python):
    proc = run_python(INFO, CANDLE_CUDA_DRIVER=_fake_driver(tmp_path, 100))
    assert proc.returncode == 0, proc.stderr
    assert ("device cuda: unavailable: cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
            in proc.stdout)


def test_a_driver_without_a_needed_function_is_too_old(tmp_path, run_python):
    proc = run_python(INFO, CANDLE_CUDA_DRIVER=_fake_driver(tmp_path, 0, omit="cuLaunchKernel"))
    assert proc.returncode == 0, proc.stderr
    assert "has no cuLaunchKernel: the NVIDIA driver is too old" in proc.stdout


def test_asking_for_the_device_raises_with_the_reason(tmp_path, run_python):
    code = ("import candle_api as c\n"
            "try:\n    c.get_device('cuda')\nexcept c.BackendUnavailableError as e:\n    print('raised', e)")
    proc = run_python(code, CANDLE_CUDA_DRIVER=_fake_driver(tmp_path, 100))
    assert "raised device 'cuda:0' (plugin cuda) is not available: cuInit failed: CUDA_ERROR_NO_DEVICE" in proc.stdout
