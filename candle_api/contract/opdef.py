"""The op definition: one class for built-in ops and for the custom ops that
plugins define (through the ``candle_api_custom_ops`` hook). How an op runs
is :func:`candle_api.ops.dispatch.apply`."""

from __future__ import annotations

from typing import Callable

from ..errors import PluginError


class OpDef:
    """An op: what it computes, and how it reaches a kernel.

    - ``name``: the op's name, which is also its kernel's name: the kernel
      tables are keyed by ``(name, dtype of the key input)``.
    - ``infer(*inputs, **params) -> (shape, dtype)``: the output's shape and
      dtype. Enough for a custom op, whose kernel is called as
      ``k(out, [(storage, layout), ...], params)``.
    - ``prepare(*inputs, **params) -> (shape, dtype, args)``: what built-in
      ops give instead of ``infer``: the shape and dtype, and the arguments
      that follow ``out`` in the kernel's call (the contract row's ``call``).
      A shape of None marks an in-place op: the kernel is called with
      ``args`` alone and :func:`apply` returns None.
    - ``backward(inputs, out, grad, **params)``: one gradient (or None) per
      input, ``out`` the output detached. Without it, a gradient that reaches
      the op raises instead of being dropped.
    - ``decompose(*inputs, **params)``: the op from other ops, run on a device
      without the kernel (autograd then follows those ops).
    - ``key``: which input's dtype keys the kernel (0: the first).
    - ``scalars``: for built-in ops whose kernel is ``k(out, x, lx, scalars...)``,
      the names of those params, in order (the fast path passes them by position).
    - ``writes``: for an in-place op, the inputs it writes into (each must be
      writable memory).
    """

    __slots__ = ("name", "infer", "prepare", "backward", "decompose", "key", "scalars", "writes", "doc")

    def __init__(self, name: str, infer: Callable | None = None, *, prepare: Callable | None = None,
                 backward: Callable | None = None, decompose: Callable | None = None, key: int = 0,
                 scalars: tuple = (), writes: tuple = (0,), doc: str = ""):
        if not isinstance(name, str) or not name.isidentifier():
            raise PluginError(f"an op name must be an identifier, got {name!r}")
        if (infer is None) == (prepare is None):
            raise PluginError(f"op {name!r}: give it infer (custom ops) or prepare (built-in calls), not both")
        self.name, self.infer, self.backward, self.decompose, self.key, self.scalars, self.writes, self.doc = (
            name, infer, backward, decompose, key, scalars, writes, doc)
        self.prepare = prepare if prepare is not None else self._custom_prepare

    def _custom_prepare(self, *inputs, **params):
        shape, dtype = self.infer(*inputs, **params)
        return tuple(shape), dtype, ([(t._storage, t._layout) for t in inputs], params)

    def __repr__(self) -> str:
        return f"OpDef({self.name!r})"

    def __call__(self, *inputs, **params):
        from ..ops.dispatch import apply

        return apply(self, *inputs, **params)
