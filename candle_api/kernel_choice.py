"""Which kernels a kernel plugin serves on this machine.

A kernel plugin overrides some kernels of a device's own plugin (mkl over
cpu). It should serve a kernel by default only where it is faster on the
machine at hand, and ``candle bench`` is what measures that: it times each
benchmark case with the plugin forced on and with it off, and writes the
verdict per kernel to a file of this machine's cache that the plugin reads
when its kernels are built. Two switches go over any verdict:
``CANDLE_FORCE_PLUGINS=mkl`` serves every kernel of the named plugins (the
conformance suite runs so, to test kernels that lose here too), and
``CANDLE_DISABLE_PLUGINS=mkl`` does not load them at all (see the registry).

A verdict's key is ``op/dtype`` or ``op/dtype@kind`` where a plugin tells
shapes apart (``matmul/f32@gemv``). The file is
``<cache>/kernel-choice/<plugin>.json``, the cache being ``$CANDLE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/candle-api``, else ``~/.cache/candle-api``; a file
written on another machine (another CPU model, core count or instruction
set) is ignored.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

ENV_FORCE = "CANDLE_FORCE_PLUGINS"
FORMAT = 1


def forced(plugin: str) -> bool:
    """True when CANDLE_FORCE_PLUGINS names the plugin (or is ``all``)."""
    from .registry import env_names

    names = env_names(ENV_FORCE)
    return plugin in names or "all" in names


def cache_dir() -> Path:
    if os.environ.get("CANDLE_CACHE_DIR"):
        return Path(os.environ["CANDLE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "candle-api"


def path(plugin: str) -> Path:
    return cache_dir() / "kernel-choice" / f"{plugin}.json"


_ISA_FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "avx2", "fma", "amx_tile", "neon", "asimd")


def machine() -> dict:
    """What a choice depends on: the CPU's vendor and model, its logical cores and instruction set
    extensions."""
    model, vendor, flags = platform.processor() or platform.machine(), "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id":
                vendor = value.strip()
            elif key.strip() == "model name":
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags = set(value.split())
                break
    except OSError:
        pass
    return {"cpu": model, "vendor": vendor, "cores": os.cpu_count(), "isa": [f for f in _ISA_FLAGS if f in flags]}


def read(plugin: str) -> tuple[dict | None, str]:
    """({kernel key: serve?} or None, where the verdicts come from or why there are none)."""
    file = path(plugin)
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return None, f"no {file}: run `candle bench` to choose"
    except (OSError, ValueError) as exc:
        return None, f"{file} is unreadable ({exc}): run `candle bench` again"
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("kernels"), dict):
        return None, f"{file} is not a kernel choice of format {FORMAT}: run `candle bench` again"
    if data.get("machine") != machine():
        return None, f"{file} was measured on another machine ({data.get('machine')}): run `candle bench` again"
    verdicts = {k: bool(v.get("serve")) for k, v in data["kernels"].items() if isinstance(v, dict)}
    return verdicts, f"{file} ({data.get('written', '?')})"


def write(plugin: str, kernels: dict, command: str) -> Path:
    """Writes {kernel key: {"serve": bool, "ratio": base time / plugin time, ...}} for this machine."""
    file = path(plugin)
    file.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, "plugin": plugin, "machine": machine(), "command": command,
            "written": datetime.datetime.now().isoformat(timespec="seconds"), "kernels": kernels}
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(file)
    return file
