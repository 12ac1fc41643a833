"""The recorded graph: which op made a tensor, from which inputs, and how to
send a gradient back through it.

A tensor's ``_node`` is None when no gradient flows through it (the common
case: checking that costs one attribute read per op). A leaf that wants its
gradient (a :class:`~candle_api.Var`, a parameter, ``requires_grad_()``) holds
a :class:`Leaf`, where its accumulated ``.grad`` lives. An op on at least one
such tensor, with grad mode on, gives its output a :class:`Node`.
"""

from __future__ import annotations

import threading
from typing import Callable

from . import versions


class Leaf:
    """The node of a tensor whose gradient is kept: ``grad`` accumulates over
    backward passes until reset (``t.grad = None`` or an optimizer's zero_grad)."""

    __slots__ = ("grad",)
    inputs = ()

    def __init__(self) -> None:
        self.grad = None


class Node:
    """The op that made a tensor: ``backward(grad_out)`` returns one gradient
    (or None) per tensor in ``inputs``, each of that input's shape and dtype.
    ``rebases``: the in-place rebases of the output's memory when the node was
    made (see :mod:`.versions`)."""

    __slots__ = ("op", "inputs", "backward", "rebases")

    def __init__(self, op: str, inputs: tuple, backward: Callable, rebases: int = 0) -> None:
        self.op, self.inputs, self.backward, self.rebases = op, inputs, backward, rebases

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.inputs)} inputs)"


class _Mode(threading.local):
    enabled = True  # per thread, as in PyTorch


_mode = _Mode()


def is_grad_enabled() -> bool:
    return _mode.enabled


def tracks(*tensors) -> bool:
    """True when an op on these tensors must record a node."""
    for t in tensors:
        if t._node is not None:
            return _mode.enabled
    return False


def record(out, op: str, inputs: tuple, backward: Callable):
    """Gives ``out`` the node of ``op`` (call only when :func:`tracks` said so).
    The backward may not read values the inputs held when recorded: it gets
    no protection from in-place writes (views and copies need none)."""
    if versions._COUNTS:
        for t in inputs:
            versions.check_current(t, op)
    out._node = Node(op, inputs, backward, versions.rebases(out._storage))
    return out


class set_grad_enabled:
    """Context manager (and decorator) turning graph recording on or off in this thread."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = bool(enabled)
        self._saved: list[bool] = []

    def __enter__(self):
        self._saved.append(_mode.enabled)
        _mode.enabled = self._enabled
        return self

    def __exit__(self, *exc) -> None:
        _mode.enabled = self._saved.pop()

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(self._enabled):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(set_grad_enabled):
    """No graph is recorded inside (inference, optimizer updates)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    def __init__(self) -> None:
        super().__init__(True)
