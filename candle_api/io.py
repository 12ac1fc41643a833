"""The front door to files: ``candle_api.load`` and ``candle_api.save``.

Formats are plugins (hook ``candle_api_formats``, see :class:`FormatSpec`). A
file is given to the format that recognizes its first bytes; only when no
format does is its extension used, and a file nobody claims gets an error that
lists the installed format plugins.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator

from .errors import FormatError
from .hooks import FormatSpec
from .registry import registry

if TYPE_CHECKING:
    from .tensor import Tensor

#: How many leading bytes a format's ``sniff`` receives.
HEAD_BYTES = 4096
#: What a path that is not a regular file is, by its ``ls -l`` letter.
_NOT_REGULAR = {"d": "a directory", "p": "a FIFO", "s": "a socket", "c": "a character device", "b": "a block device"}


class TensorFile(Mapping):
    """name -> Tensor (or QTensor) of one file, read lazily.

    ``entries`` maps each name to a function returning its tensor; a tensor is
    read on first access and kept. ``metadata`` is the file's metadata (a
    safetensors ``__metadata__``, GGUF key/values...), ``format`` the name of
    the format that read it.
    """

    def __init__(self, entries: Mapping[str, Callable[[], Any]], metadata: Mapping | None = None,
                 format: str = "", path: str | os.PathLike = ""):
        self._entries = dict(entries)
        self._loaded: dict[str, Any] = {}
        self.metadata = dict(metadata or {})
        self.format = format
        self.path = str(path)

    def __getitem__(self, name: str):
        tensor = self._loaded.get(name)
        if tensor is None:
            tensor = self._loaded[name] = self._entries[name]()
        return tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"TensorFile({self.path!r}, format={self.format!r}, {len(self)} tensors)"

    def converted(self, convert: Callable[[Any], Any]) -> "TensorFile":
        """The same entries with ``convert`` applied to each tensor as it is read."""
        entries = {name: (lambda name=name: convert(self[name])) for name in self._entries}
        return TensorFile(entries, self.metadata, self.format, self.path)


def formats() -> list[tuple[FormatSpec, str]]:
    """(spec, plugin) of every installed format."""
    return registry().formats()


def _installed() -> str:
    names = [f"{spec.name} ({plugin})" for spec, plugin in formats()]
    return ", ".join(names) or "none: install candle-formats"


def _writers() -> str:
    """The installed formats that write files, with the extensions that choose them."""
    names = [f"{spec.name} ({', '.join(spec.extensions)})" for spec, _ in formats() if spec.save is not None]
    return "formats that write: " + (", ".join(names) or "none: install candle-formats")


def _by_name(name: str, need: str) -> FormatSpec:
    for spec, _plugin in formats():
        if spec.name == name and getattr(spec, need) is not None:
            return spec
    known = _writers() if need == "save" else f"installed formats: {_installed()}"
    raise FormatError(name, None, f"no installed format {name!r} can {need} ({known})")


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading, or FormatError unless it is a regular
    file: reading a FIFO or a device would block or never end. The open does
    not block (O_NONBLOCK, which regular files ignore) and the check is made
    on the open file, so a FIFO swapped in meanwhile is refused too."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise FormatError(path, None, f"cannot open: {getattr(exc, 'strerror', None) or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = _NOT_REGULAR.get(stat.filemode(mode)[0], "an unknown kind of file")
        raise FormatError(path, None, f"cannot read: {kind}, not a regular file")
    return os.fdopen(fd, "rb")


def format_for(path: str | os.PathLike) -> FormatSpec:
    """The format that reads ``path``: magic bytes first, extension second."""
    path = Path(path)
    with open_regular(path) as f:
        head = f.read(HEAD_BYTES)
    readers = [spec for spec, _ in formats() if spec.load is not None]
    for spec in readers:
        if spec.sniff is not None and spec.sniff(head, path):
            return spec
    name = path.name.lower()
    for spec in readers:
        if any(name.endswith(ext) for ext in spec.extensions):
            return spec
    raise FormatError(path, 0, f"no installed format recognizes this file (installed formats: {_installed()})")


def load(path: str | os.PathLike, device=None, dtype=None, format: str | None = None,
         mmap: bool = True) -> TensorFile:
    """Reads a tensor file: a lazy name -> Tensor mapping (quantized GGUF
    tensors stay QTensor). ``device`` and ``dtype`` convert each tensor as it
    is read; on cpu with no conversion, formats that can map the file share
    its memory instead of copying. A mapped file must not shrink while its
    tensors live (another program truncating it kills the process with
    SIGBUS when a lost page is read): ``mmap=False`` reads the file into
    memory when it is loaded instead, for files other programs may rewrite."""
    spec = _by_name(format, "load") if format else format_for(path)
    # plugins older than the option keep working with the default
    tensors = spec.load(Path(path)) if mmap else spec.load(Path(path), mmap=False)
    if device is None and dtype is None:
        return tensors
    from .device import get_device
    from .dtype import get_dtype
    from .tensor import Tensor

    dev = get_device(device) if device is not None else None
    dt = get_dtype(dtype) if dtype is not None else None

    def convert(t):
        if not isinstance(t, Tensor):
            return t  # quantized tensors keep their format
        if dt is not None and t.dtype.is_float and t.dtype is not dt:
            t = t.to_dtype(dt)
        return t.to_device(dev) if dev is not None else t

    return tensors.converted(convert)


def save(tensors: Mapping | Tensor, path: str | os.PathLike, metadata: Mapping | None = None,
         format: str | None = None) -> None:
    """Writes a name -> Tensor mapping, or one tensor (named ``arr_0``, NumPy's
    name for an unnamed array, as a loaded .npy names it); the format comes
    from ``format`` or the file's extension."""
    path = Path(path)
    if not isinstance(tensors, Mapping):
        tensors = {"arr_0": tensors}
    if format:
        spec = _by_name(format, "save")
    else:
        name = path.name.lower()
        match = [spec for spec, _ in formats() if spec.save is not None and any(name.endswith(e) for e in spec.extensions)]
        if not match:
            raise FormatError(path, None, f"no installed format writes files named like {path.name!r} "
                                          f"({_writers()})")
        spec = match[0]
    try:
        spec.save(tensors, path, metadata)
    except OSError as exc:  # a full disk, a missing folder, a folder in the way...
        raise FormatError(path, None, f"cannot write: {exc.strerror or exc}") from None
