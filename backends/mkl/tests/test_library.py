"""Loading libmkl_rt: a missing or broken library gives `candle info` a reason
and leaves the cpu plugin serving every kernel; the switches; the per-machine
choice; threads."""

import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np

import candle_api as c
from candle_api import kernel_choice, utils
from candle_backend_mkl import kernels, library

PROBE = """
import json, candle_api as c
from candle_api.info import describe, kernel_providers
x = c.Tensor([[1.0, 2.0], [3.0, 4.0]])
print(json.dumps({"product": (x @ x).values(), "matmul": kernel_providers("cpu")["matmul"]["f32"],
                  "exp": kernel_providers("cpu")["exp"]["f32"], "info": describe(show_ops=False),
                  "errors": {p.name: p.error for p in c.plugins()}}))
"""


def probe(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("CANDLE_FORCE_PLUGINS", "CANDLE_MKL_LIB")}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=full, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_defaults_without_a_choice():
    """The f32/f64 BLAS products on an Intel CPU, nothing elsewhere (MKL's generic code paths)."""
    result = probe()
    assert result["product"] == [[7.0, 10.0], [15.0, 22.0]]
    intel = "matmul/f32@gemm" in kernels.defaults()
    assert result["matmul"] == ("mkl" if intel else "cpu") and result["exp"] == "cpu"
    if intel:
        assert "kernels for cpu: Intel oneMKL" in result["info"] and "the defaults for GenuineIntel" in result["info"]
    else:
        assert "kernels for cpu: Intel MKL: no kernel served: the defaults for" in result["info"]


def test_forced_serves_every_kernel():
    result = probe(CANDLE_FORCE_PLUGINS="mkl")
    assert result["matmul"] == result["exp"] == "mkl"
    assert "forced by CANDLE_FORCE_PLUGINS" in result["info"]


def test_disabled_plugin_is_listed_and_not_loaded():
    result = probe(CANDLE_DISABLE_PLUGINS="mkl", CANDLE_FORCE_PLUGINS="mkl")
    assert result["matmul"] == result["exp"] == "cpu"
    assert result["errors"]["mkl"] == "disabled by CANDLE_DISABLE_PLUGINS"


def test_a_file_that_is_not_a_library_gives_a_reason(tmp_path):
    fake = tmp_path / "libmkl_rt.so.3"
    fake.write_bytes(b"not an ELF file")
    (tmp_path / "libmkl_core.so.3").write_bytes(b"")
    (tmp_path / "libmkl_intel_thread.so.3").write_bytes(b"")
    result = probe(CANDLE_MKL_LIB=str(fake), CANDLE_FORCE_PLUGINS="mkl")
    assert result["product"] == [[7.0, 10.0], [15.0, 22.0]]
    assert result["matmul"] == result["exp"] == "cpu"
    assert "cannot use Intel MKL" in result["errors"]["mkl"] and str(fake) in result["errors"]["mkl"]
    assert "[NOT LOADED: candle_api_kernels raised BackendUnavailableError: cannot use Intel MKL" in result["info"]


def test_a_library_without_its_parts_gives_a_reason(tmp_path):
    real = library.candidates()[0]
    shutil.copy(real, tmp_path / real.name)  # libmkl_rt alone: MKL would end the process at its first call
    result = probe(CANDLE_MKL_LIB=str(tmp_path / real.name), CANDLE_FORCE_PLUGINS="mkl")
    assert result["matmul"] == "cpu"
    assert "libmkl_core.so.3 is missing beside it" in result["errors"]["mkl"]


def test_a_missing_library_and_a_bad_threading_layer(tmp_path):
    result = probe(CANDLE_MKL_LIB=str(tmp_path / "nowhere.so"), CANDLE_FORCE_PLUGINS="mkl")
    assert "(not found)" in result["errors"]["mkl"] and result["matmul"] == "cpu"
    result = probe(CANDLE_MKL_THREADING="pthreads", CANDLE_FORCE_PLUGINS="mkl")
    assert "CANDLE_MKL_THREADING='pthreads'" in result["errors"]["mkl"] and result["matmul"] == "cpu"


def test_a_fatal_error_after_loading_is_an_exception_not_an_exit(tmp_path):
    """A library whose self-test passes with its parts present, then loses them, is the worst case;
    here the exit handler is checked directly: MKL calls it instead of exit()."""
    library.load()
    library._on_fatal(1)
    try:
        assert library.failed() == "Intel MKL reported fatal error 1 (see stderr)"
    finally:
        library._fatal.clear()


def test_the_choice_file_decides_per_kernel(monkeypatch, tmp_path):
    monkeypatch.setenv("CANDLE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CANDLE_FORCE_PLUGINS")
    monkeypatch.setattr(kernels, "machine", lambda: {"vendor": "GenuineIntel"})
    served, why = kernels.choose()
    assert served == kernels.INTEL_DEFAULTS and why.startswith("the defaults for GenuineIntel CPUs (no ")
    kernel_choice.write("mkl", {"matmul/f32@gemm": {"serve": False}, "exp/f32": {"serve": True}}, "test")
    served, why = kernels.choose()
    assert "exp/f32" in served and "matmul/f32@gemm" not in served
    assert "matmul/f64@gemm" in served  # not measured: its default
    assert why.startswith("chosen by candle bench")
    data = json.loads(kernel_choice.path("mkl").read_text())
    data["machine"]["cpu"] = "another CPU"
    kernel_choice.path("mkl").write_text(json.dumps(data))
    served, why = kernels.choose()
    assert served == kernels.INTEL_DEFAULTS and "measured on another machine" in why
    monkeypatch.setattr(kernels, "machine", lambda: {"vendor": "AuthenticAMD"})
    assert kernels.choose()[0] == frozenset()


def test_the_pool_layer_keeps_mkl_sequential():
    """The default layer runs MKL's sequential functions on the cpu plugin's pool: MKL starts no threads."""
    a = c.Tensor(np.ones((256, 256), np.float32))
    (a @ a).numpy()
    assert library.threading_layer() == "pool" and library.load().MKL_Get_Max_Threads() == 1
    assert "sequential kernels on the cpu plugin's pool" in library.describe()


INTEL = """
import json, numpy as np, candle_api as c
from candle_api import utils
from candle_backend_mkl import library
rng = np.random.default_rng(0)
a, b = rng.standard_normal((3, 200, 150)).astype(np.float32), rng.standard_normal((150, 120)).astype(np.float32)
r, w = rng.standard_normal((1, 500)).astype(np.float32), rng.standard_normal((500, 300)).astype(np.float32)
x = rng.uniform(0.5, 2, 5000).astype(np.float32)
errs, threads = [], []
for n in (1, 3):
    utils.set_num_threads(n)
    errs.append(float(np.abs((c.Tensor(a) @ c.Tensor(b)).numpy() - a @ b).max()))
    errs.append(float(np.abs((c.Tensor(r) @ c.Tensor(w)).numpy() - r @ w).max()))
    errs.append(float(np.abs(c.Tensor(x).log().numpy() - np.log(x)).max()))
    errs.append(float(np.abs((c.Tensor(a).to_dtype("bf16") @ c.Tensor(b).to_dtype("bf16")).to_dtype("f32").numpy()
                             - a @ b).max()))
    threads.append(library.load().MKL_Get_Max_Threads())
print(json.dumps({"errs": errs, "threads": threads, "about": library.describe()}))
"""


def test_mkl_own_threads_follow_the_cpu_thread_count():
    """CANDLE_MKL_THREADING=intel: MKL's threads take the cpu plugin's count at each call (never more than
    there are cores), and the products and vector math give NumPy's answers through MKL's own calls."""
    env = {**os.environ, "CANDLE_MKL_THREADING": "intel"}
    proc = subprocess.run([sys.executable, "-c", INTEL], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    cores = len(os.sched_getaffinity(0))
    assert result["threads"] == [1, min(3, cores)] and "intel threading" in result["about"]
    for i, err in enumerate(result["errs"]):
        assert err < (0.5 if i % 4 == 3 else 1e-3), (i, err)  # the bf16 product rounds its inputs


def test_concurrent_callers_get_right_answers():
    rng = np.random.default_rng(5)
    mats = [rng.standard_normal((200, 200)).astype(np.float32) for _ in range(4)]
    want = [m @ m for m in mats]
    errors = []

    def work(i):
        try:
            t = c.Tensor(mats[i])
            for _ in range(5):
                np.testing.assert_allclose((t @ t).numpy(), want[i], rtol=1e-4, atol=1e-3)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]


def test_candle_info_gives_the_reason_before_any_op(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CANDLE_MKL_LIB"}
    env.update(CANDLE_MKL_LIB=str(tmp_path / "libmkl_rt.so.3"), CANDLE_FORCE_PLUGINS="mkl")
    proc = subprocess.run([sys.executable, "-m", "candle_api.cli", "info"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "mkl: candle-backend-mkl" in proc.stdout and "(not found)" in proc.stdout
    assert "  matmul: bf16 f16 f32 f64 i16 i32 i64 u32 u8 <- cpu" in proc.stdout  # the cpu plugin serves all
