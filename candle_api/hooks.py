"""What a plugin implements: the hook specs and the objects hooks return.

A plugin is a module (or object) registered under the entry point group
``candle_api``::

    [project.entry-points.candle_api]
    mybackend = "my_package.plugin"

and implementing any of the hooks below with the :data:`hookimpl` marker.
Importing the plugin module must be cheap and must not open native libraries:
candle-api imports it on the first device or format query, and calls the
hooks only when their answer is needed.

Hook API versions only ever grow: a new version adds hooks or optional fields,
never changes an existing one. A plugin written for a newer version than the
installed candle-api sets ``CANDLE_API_HOOK_VERSION`` and is refused with a
message saying so, instead of failing obscurely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pluggy

from .contract.opdef import OpDef  # noqa: F401  (what candle_api_custom_ops defines)

#: The hook API this candle-api implements. 2 added BackendSpec.contract_version
#: and BackendSpec.dtypes (a plugin using them sets CANDLE_API_HOOK_VERSION = 2),
#: and made OpDef the one op definition (candle_api.contract.opdef); 3 added
#: BackendSpec.aliases, BackendSpec.variants and KernelSet.description; 4 added
#: KernelSet.aliasing.
HOOK_API_VERSION = 4

hookspec = pluggy.HookspecMarker("candle_api")
hookimpl = pluggy.HookimplMarker("candle_api")


@dataclass(frozen=True)
class BackendSpec:
    """A device type a plugin provides.

    ``open(index)`` returns the backend device object (see
    docs/backend-contract.md) and may raise BackendUnavailableError;
    ``availability()`` returns ``(True, "")`` or ``(False, reason)`` and is what
    ``candle info`` shows; neither may be slow on a machine without the device.
    ``details()``, asked only of available backends, describes the running
    backend (instruction set, threads, GPU model...). ``contract_version`` is
    the version of the kernel table (:mod:`candle_api.contract`) the backend
    implements, and ``dtypes`` the dtypes it holds: the required rows of that
    version must have a kernel for each of their dtypes among these. bool needs
    no listing and no kernels: a backend that holds u8 holds bool, served by its
    u8 kernels (see :mod:`candle_api.contract.table`).
    ``aliases()`` returns other device type names that mean this one (the
    wgpu backend answers its adapter's API, ``metal`` on a Mac): ``metal:0``
    then resolves to the same device as ``wgpu:0``. It is asked only for a
    name no backend has, and may probe the hardware.
    ``variants()`` names the code paths the backend can take on this machine,
    each with the environment variables that select it, the default first
    (the cpu plugin's instruction sets): ``candle bench`` measures each.
    """

    name: str
    open: Callable[[int], Any]
    availability: Callable[[], tuple[bool, str]]
    device_count: Callable[[], int] = lambda: 1
    priority: int = 0
    description: str = ""
    details: Callable[[], str] = lambda: ""
    api_version: int = HOOK_API_VERSION
    contract_version: int = 1
    dtypes: tuple = ("u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64")
    aliases: Callable[[], tuple] = lambda: ()
    variants: Callable[[], dict] = lambda: {}


@dataclass(frozen=True)
class KernelSet:
    """Kernels for one device type: ``{(op, dtype name): kernel}``.

    For every (op, dtype) the kernel of the highest ``priority`` among all
    plugins wins, so a plugin can override some kernels of another (an MKL
    plugin returning faster "matmul" kernels for "cpu", say) and add new ops.
    ``description`` says what serves them (a library and its version, its
    threads, why these kernels and not others) for ``candle info``.
    ``aliasing`` declares that its kernels of the rows with an ``alias``
    (:mod:`candle_api.contract.table`: elementwise rows) give the same result
    when ``out`` is one of those inputs' own storage, as in-place ops pass it.
    """

    kernels: Mapping[tuple[str, str], Callable]
    priority: int = 0
    description: str = ""
    aliasing: bool = False


@dataclass(frozen=True)
class FormatSpec:
    """A file format a plugin reads and/or writes (see docs/plugins.md).

    ``sniff(head, path)`` says whether the file is this format from its first
    bytes (``head``, up to :data:`candle_api.io.HEAD_BYTES`; it may look into
    the file, e.g. a zip directory). Formats claiming a file by its magic bytes
    win over those matching its extension only. ``load(path)`` returns a
    :class:`candle_api.io.TensorFile` (``load(path, mmap=False)``, asked only
    when the caller wants it, reads the file into memory instead of mapping
    it; open files with :func:`candle_api.io.open_regular`, which refuses
    FIFOs and devices); ``save(tensors, path, metadata)``
    writes a mapping of names to tensors. A malformed file raises
    :class:`candle_api.errors.FormatError`, never anything else.
    """

    name: str
    extensions: tuple[str, ...] = ()
    sniff: Callable[[bytes, Any], bool] | None = None
    load: Callable[[Any], Any] | None = None
    save: Callable[[Mapping, Any, Mapping | None], None] | None = None
    priority: int = 0
    description: str = ""
    api_version: int = HOOK_API_VERSION


class HookSpecs:
    """The hooks (version 1)."""

    @hookspec
    def candle_api_backends(self) -> list[BackendSpec]:
        """Device types this plugin provides."""

    @hookspec
    def candle_api_kernels(self, device_type: str) -> KernelSet | None:
        """Kernels for ``device_type``, or None. Called once per device type
        and cached; called again when a plugin registers."""

    @hookspec
    def candle_api_formats(self) -> list[FormatSpec]:
        """File formats this plugin reads and writes (see candle_api.io)."""

    @hookspec(historic=True)
    def candle_api_custom_ops(self, registry) -> None:
        """Define custom ops with ``registry.define(OpDef(...))``. Historic, so
        it reaches op plugins and backends whatever their load order."""
