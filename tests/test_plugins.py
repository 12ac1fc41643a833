"""Plugin discovery, lazy loading, kernel overrides and custom ops.

Third-party plugins are real distributions here: a package plus a
``.dist-info`` folder with an ``entry_points.txt``, put on ``sys.path`` of a
fresh interpreter, so discovery goes through importlib.metadata exactly as for
an installed wheel.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import candle_api as c
from candle_api.hooks import KernelSet, OpDef, hookimpl
from candle_api.info import kernel_providers
from candle_api.registry import registry

OVERRIDE_PLUGIN = '''
import ctypes
from candle_api.hooks import KernelSet, OpDef, hookimpl

CANDLE_API_HOOK_VERSION = 1


def exp_42(out, x, lx):
    """Overrides the cpu f32 exp: writes 42 everywhere."""
    buf = (ctypes.c_float * lx.numel).from_address(out.ptr)
    for i in range(lx.numel):
        buf[i] = 42.0


def scale(out, inputs, params):
    """A new op: x * factor, for contiguous f32 inputs."""
    (x, lx), = inputs
    src = (ctypes.c_float * lx.numel).from_address(x.ptr + 4 * lx.offset)
    dst = (ctypes.c_float * lx.numel).from_address(out.ptr)
    for i in range(lx.numel):
        dst[i] = src[i] * params.get("factor", 2.0)


@hookimpl
def candle_api_kernels(device_type):
    if device_type == "cpu":
        return KernelSet({("exp", "f32"): exp_42, ("scale", "f32"): scale}, priority=10)


@hookimpl
def candle_api_custom_ops(registry):
    registry.define(OpDef("scale", infer=lambda x, **p: (x.shape, x.dtype),
                          decompose=lambda x, factor=2.0: x * factor))
'''


def make_distribution(root, dist_name, module_name, source, entry_name):
    """Writes an importable 'installed' distribution under root."""
    (root / module_name).mkdir()
    (root / module_name / "__init__.py").write_text(source)
    info = root / f"{dist_name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[candle_api]\n{entry_name} = {module_name}\n")


def run_python(code, path=None, switches=None):
    # A fresh interpreter with only the plugin switches a test names, none that a developer (or
    # backends/mkl/tests' conftest, in the same session) may have set.
    env = {k: v for k, v in os.environ.items() if k not in ("CANDLE_FORCE_PLUGINS", "CANDLE_DISABLE_PLUGINS")}
    env.update(switches or {})
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_import_loads_no_plugin_and_opens_no_library():
    out = run_python("""
        import json, sys
        import candle_api
        maps = lambda: open('/proc/self/maps').read()
        first = {'plugin': 'candle_backend_cpu.plugin' in sys.modules, 'lib': 'libcandle_cpu' in maps()}
        from candle_api.registry import registry
        registry().backends()   # plugins load, hooks answer...
        second = {'plugin': 'candle_backend_cpu.plugin' in sys.modules, 'lib': 'libcandle_cpu' in maps()}
        candle_api.zeros(2)     # ...and the library opens on first use of the device
        third = {'lib': 'libcandle_cpu' in maps()}
        print(json.dumps([first, second, third]))
    """)
    first, second, third = json.loads(out)
    assert first == {"plugin": False, "lib": False}
    assert second == {"plugin": True, "lib": False}
    assert third == {"lib": True}


def test_third_party_plugin_overrides_a_cpu_kernel_and_adds_an_op(tmp_path):
    make_distribution(tmp_path, "candle-override-plugin", "override_plugin", OVERRIDE_PLUGIN, "override")
    out = run_python("""
        import json
        import candle_api as c
        from candle_api.info import kernel_providers, describe
        x = c.Tensor([1.0, 2.0])
        providers = kernel_providers("cpu")
        print(json.dumps({
            "exp_f32": x.exp().values(),
            "exp_f64": [round(v, 6) for v in x.to_dtype("f64").exp().values()],
            "scale": c.custom_op("scale", x, factor=3.0).values(),
            "scale_f64_decomposed": c.custom_op("scale", x.to_dtype("f64"), factor=3.0).values(),
            "provider_exp_f32": providers["exp"]["f32"],
            "provider_exp_f64": providers["exp"]["f64"],
            "plugins": {p.name: [p.distribution, p.version, p.error] for p in c.plugins()},
            "serves": {p.name: p.serves for p in c.plugins()},
            "info": describe(),
        }))
    """, tmp_path)
    result = json.loads(out)
    assert result["exp_f32"] == [42.0, 42.0]
    assert result["exp_f64"] == [2.718282, 7.389056]
    assert result["scale"] == [3.0, 6.0]
    assert result["scale_f64_decomposed"] == [3.0, 6.0]
    assert result["provider_exp_f32"] == "override"
    assert result["provider_exp_f64"] == "cpu"
    assert result["plugins"]["override"] == ["candle-override-plugin", "0.1", ""]
    assert result["plugins"]["cpu"][0] == "candle-backend-cpu"
    assert result["serves"]["override"] == {"cpu": ["exp", "scale"]}
    assert "matmul" in result["serves"]["cpu"]["cpu"] and "exp" in result["serves"]["cpu"]["cpu"]  # f64 exp
    assert "exp: " in result["info"] and "f32 <- override" in result["info"]


def test_broken_and_too_new_plugins_are_reported_not_fatal(tmp_path):
    make_distribution(tmp_path, "candle-broken", "broken_plugin", "raise ImportError('libfoo.so missing')", "broken")
    make_distribution(tmp_path, "candle-future", "future_plugin", "CANDLE_API_HOOK_VERSION = 99\n", "future")
    out = run_python("""
        import json
        import candle_api as c
        from candle_api.info import describe
        print(json.dumps({"errors": {p.name: p.error for p in c.plugins()},
                          "works": (c.Tensor([1.0]) + 1).values(), "info": describe(show_ops=False)}))
    """, tmp_path)
    result = json.loads(out)
    assert "libfoo.so missing" in result["errors"]["broken"]
    assert "needs hook API 99" in result["errors"]["future"]
    assert result["works"] == [2.0]
    assert "broken: candle-broken 0.1  [NOT LOADED: import failed: ImportError: libfoo.so missing]" in result["info"]


class CountingPlugin:
    """Adds a kernel for a new op and counts how often the kernel hook is asked."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def candle_api_custom_ops(self, registry):
        registry.define(OpDef("noop", infer=lambda x: (x.shape, x.dtype)))

    @hookimpl
    def candle_api_kernels(self, device_type):
        self.calls += 1
        return KernelSet({("noop", "f32"): lambda *a: None}, priority=-1)


def test_steady_state_ops_never_call_hooks():
    plugin = CountingPlugin()
    name = c.register_plugin(plugin, "counting")
    try:
        x = c.Tensor([1.0, 2.0, 3.0])
        (x + x).exp().sum_all()
        built = plugin.calls
        assert built >= 1  # the table was rebuilt once the plugin registered
        for _ in range(1000):
            (x + x).exp().sum_all()
        assert plugin.calls == built
        assert kernel_providers("cpu")["noop"] == {"f32": "counting"}
        assert kernel_providers("cpu")["add"]["f32"] == "cpu"
    finally:
        c.unregister_plugin(name)
    assert "noop" not in kernel_providers("cpu")


def test_run_time_override_reaches_existing_devices():
    dev = c.get_device("cpu")
    x = c.Tensor([0.0, 1.0])

    class Override:
        @hookimpl
        def candle_api_kernels(self, device_type):
            if device_type == "cpu":
                return KernelSet({("neg", "f32"): lambda out, t, lt: c.ops.creation.fill_(c.ops.core.make(out, lt, c.f32, dev), 7.0)},
                                 priority=5)

    name = c.register_plugin(Override(), "neg-override")
    try:
        assert (-x).values() == [7.0, 7.0]
    finally:
        c.unregister_plugin(name)
    assert (-x).values() == [-0.0, -1.0]


def test_unknown_device_names_the_installed_types():
    with pytest.raises(c.DeviceError, match=r"no installed plugin provides device type 'nosuchdev'.*cpu"):
        c.zeros(2, device="nosuchdev:0")
    with pytest.raises(c.DeviceError):
        c.get_device("cpu:x")


def test_malformed_plugins_are_refused_and_leave_the_others_working():
    class Bad:
        @hookimpl
        def candle_api_kernels(self, device_type):
            return {"not": "a KernelSet"}

    class Raising:
        @hookimpl
        def candle_api_kernels(self, device_type):
            raise RuntimeError("driver exploded")

    with pytest.raises(c.PluginError, match="'bad' refused: candle_api_kernels returned dict"):
        c.register_plugin(Bad(), "bad")
    with pytest.raises(c.PluginError, match="driver exploded"):
        c.register_plugin(Raising(), "raising")
    assert "bad" not in {p.name for p in c.plugins()}
    assert (c.Tensor([1.0]) * 2).values() == [2.0]


def test_cli_info_lists_the_cpu_device():
    script = Path(sys.executable).with_name("candle")  # pip installs console scripts beside python
    assert script.exists(), f"the `candle` console script is not installed at {script}"
    proc = subprocess.run([str(script), "info"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "device cpu: available" in proc.stdout
    assert "matmul:" in proc.stdout and "<- cpu" in proc.stdout


def test_disabled_plugins_are_listed_and_never_imported(tmp_path):
    make_distribution(tmp_path, "candle-override-plugin", "override_plugin", OVERRIDE_PLUGIN, "override")
    out = run_python("""
        import json, sys
        import candle_api as c
        from candle_api.info import describe, kernel_providers
        x = c.Tensor([1.0, 2.0])
        print(json.dumps({"exp": [round(v, 4) for v in x.exp().values()],
                          "provider": kernel_providers("cpu")["exp"]["f32"],
                          "imported": "override_plugin" in sys.modules,
                          "info": describe(show_ops=False)}))
    """, tmp_path, {"CANDLE_DISABLE_PLUGINS": "override, nonexistent"})
    result = json.loads(out)
    assert result["exp"] == [2.7183, 7.3891] and result["provider"] == "cpu" and not result["imported"]
    assert "override: candle-override-plugin 0.1  [NOT LOADED: disabled by CANDLE_DISABLE_PLUGINS]" in result["info"]
