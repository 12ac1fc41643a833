"""Version counters of storages, so autograd can tell when memory it relies
on was written in place (PyTorch's version counter, kept per storage).

Two counts per storage, both zero until its first in-place write:

- ``writes``: every in-place write (in-place ops, ``x[...] = v``, optimizer
  steps, ``nn.init``, ``load_state_dict``). A node records the writes of the
  tensors its backward is given (its inputs and its output); when the
  backward runs, a tensor written since is passed as a ``_Modified`` tensor,
  which raises :class:`~candle_api.errors.InPlaceError` if the backward reads
  its values (a backward that needs only its shape, as add's, still runs).
- ``rebases``: in-place writes recorded by autograd (an in-place op on a
  tensor it tracks, which gives that tensor a new node). A node records the
  rebases of its output's storage; a tensor still holding a node whose
  storage was rebased since (another view of the same memory, changed in
  place) no longer has the values its graph says, and using it in a recorded
  op, or as the root of a backward pass, raises InPlaceError.

The counts live here, keyed by ``id(storage)``: storages are the backends'
objects, and the core keeps its books on them without asking anything of
them. An entry goes away with its storage where the storage takes weak
references (every in-tree backend's does); otherwise it stays, which is
harmless: a node compares counts it read while holding the storage alive.
A program that never writes in place pays one empty-dict test per recorded op.
"""

from __future__ import annotations

import functools
import weakref

from ..errors import InPlaceError

#: id(storage) -> [writes, rebases]
_COUNTS: dict[int, list] = {}


def _entry(storage) -> list:
    key = id(storage)
    entry = _COUNTS.get(key)
    if entry is None:
        entry = _COUNTS[key] = [0, 0]
        try:
            weakref.finalize(storage, _COUNTS.pop, key, None)
        except TypeError:  # no weak references: the entry outlives the storage (see above)
            pass
    return entry


def writes(t) -> int:
    """How many in-place writes t's storage has had."""
    entry = _COUNTS.get(id(t._storage)) if _COUNTS else None
    return entry[0] if entry is not None else 0


def rebases(storage) -> int:
    entry = _COUNTS.get(id(storage)) if _COUNTS else None
    return entry[1] if entry is not None else 0


def bump(t, rebased: bool = False) -> None:
    """Counts an in-place write into t's storage (``rebased``: one autograd recorded)."""
    entry = _entry(t._storage)
    entry[0] += 1
    if rebased:
        entry[1] += 1


def snapshot(tensors) -> tuple | None:
    """The write counts of tensors (None stands for all zero: nothing was ever written in place)."""
    if not _COUNTS:
        return None
    return tuple(writes(t) if t is not None else 0 for t in tensors)


def check_current(t, what: str) -> None:
    """InPlaceError when t holds a node whose memory was rebased since (see above)."""
    if not _COUNTS:
        return
    node = t._node
    expected = getattr(node, "rebases", None)  # a Node's; leaves and untracked tensors have no graph to go stale
    if expected is not None and expected != rebases(t._storage):
        raise InPlaceError(f"{what}: a tensor of shape {t.shape} ({t.dtype}) was computed by {node.op}, then its "
                           "memory was changed in place through another tensor that shares it (a view, or the "
                           "tensor it is a view of): its values no longer match what autograd recorded. Change "
                           "a .clone() in place, or recompute the tensor after the in-place op")


def guarded(tensors: tuple, saved: tuple | None, op: str) -> tuple:
    """tensors as a backward may read them: one written in place since
    ``saved`` was taken becomes a _Modified, which raises when read."""
    if not _COUNTS:
        return tensors
    out = list(tensors)
    for i, t in enumerate(tensors):
        was = saved[i] if saved is not None else 0
        if t is not None and writes(t) != was:
            out[i] = _modified_class().of(t, f"one of the tensors needed for gradient computation has been modified by an "
                                     f"in-place operation: {'the output' if i == len(tensors) - 1 else f'input {i}'} "
                                     f"of {op}, of shape {t.shape} ({t.dtype}), is at version {writes(t)}; it was at "
                                     f"version {was} when it was saved. Hint: do the in-place op on a .clone(), or "
                                     "use its out-of-place form")
    return tuple(out)


@functools.cache
def _modified_class():
    """The Tensor subclass of saved tensors written in place since (made on first
    use: this module loads before the Tensor class exists)."""
    from ..tensor import Tensor

    class _Modified(Tensor):
        """Shape, dtype and device as the tensor's; reading its values raises InPlaceError."""

        __slots__ = ("_why",)

        @property
        def _storage(self):
            raise InPlaceError(self._why)

        @classmethod
        def of(cls, t, why: str):
            m = object.__new__(cls)
            m._layout, m._dtype, m._device, m._node, m._why = t._layout, t._dtype, t._device, t._node, why
            return m

    return _Modified
