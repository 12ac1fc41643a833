"""Backward passes over the recorded graph."""

from __future__ import annotations

from ..errors import CandleError
from . import versions
from .graph import Leaf, no_grad
from .helpers import ViewGrad


class GradStore:
    """Gradients by tensor, as Candle's GradStore: ``get(t)``, ``insert(t, g)``,
    ``remove(t)``, ``get_ids()``; also ``store[t]``, ``t in store``, ``len``."""

    def __init__(self) -> None:
        self._grads: dict[int, tuple] = {}

    def get(self, tensor):
        entry = self._grads.get(id(tensor))
        return entry[1] if entry is not None else None

    def insert(self, tensor, grad) -> None:
        self._grads[id(tensor)] = (tensor, grad)

    def remove(self, tensor):
        entry = self._grads.pop(id(tensor), None)
        return entry[1] if entry is not None else None

    def get_ids(self) -> list[int]:
        return list(self._grads)

    def tensors(self) -> list:
        return [t for t, _ in self._grads.values()]

    def items(self):
        return list(self._grads.values())

    def __getitem__(self, tensor):
        grad = self.get(tensor)
        if grad is None:
            raise KeyError("no gradient for this tensor")
        return grad

    def __contains__(self, tensor) -> bool:
        return id(tensor) in self._grads

    def __len__(self) -> int:
        return len(self._grads)


def _topological(root) -> list:
    """Tensors reachable from root through nodes, each after every tensor
    that uses it (so a gradient is complete before it is passed on)."""
    order, seen = [], {id(root)}
    stack = [(root, iter(root._node.inputs))]
    while stack:
        tensor, inputs = stack[-1]
        for inp in inputs:
            if inp._node is not None and id(inp) not in seen:
                seen.add(id(inp))
                stack.append((inp, iter(inp._node.inputs)))
                break
        else:
            stack.pop()
            order.append(tensor)
    order.reverse()
    return order


def _accumulate(grads: dict, tensor, grad) -> None:
    """Adds grad to tensor's entry [gradient, owned]: a buffer the engine made
    itself (owned) takes view gradients in place; others are never written."""
    key = id(tensor)
    entry = grads.get(key)
    if entry is None:
        grads[key] = [grad, False]
        return
    current, owned = entry
    if isinstance(grad, ViewGrad):
        if not owned:
            current = current.dense() if isinstance(current, ViewGrad) else current.copy()
        grad.add_into(current)
        grads[key] = [current, True]
    else:
        grads[key] = [(current.dense() if isinstance(current, ViewGrad) else current) + grad, True]


def _dense(entry):
    grad = entry[0]
    return grad.dense() if isinstance(grad, ViewGrad) else grad


def run_backward(roots: list, grad_outputs: list, keep: list | None = None) -> dict:
    """Propagates grad_outputs from roots; returns {id(tensor): (tensor, grad)}
    for the leaves reached and for the tensors in ``keep``."""
    from ..tensor import Tensor

    grads: dict[int, object] = {}
    for root, g in zip(roots, grad_outputs):
        versions.check_current(root, "backward")
        _accumulate(grads, root, g)
    wanted = {id(t) for t in keep or ()}
    order, seen = [], set()
    for root in roots:
        for t in _topological(root):
            if id(t) not in seen:
                seen.add(id(t))
                order.append(t)
    result: dict[int, tuple] = {}
    with no_grad():
        for tensor in order:
            key = id(tensor)
            entry = grads.pop(key, None)
            if entry is None:
                continue
            g = _dense(entry)
            node = tensor._node
            if isinstance(node, Leaf) or key in wanted:
                result[key] = (tensor, g)
            if isinstance(node, Leaf):
                continue
            for inp, ig in zip(node.inputs, node.backward(g)):
                if ig is None or inp._node is None:
                    continue
                if not isinstance(ig, (Tensor, ViewGrad)) or ig.shape != inp.shape:
                    raise CandleError(f"backward of {node.op} gave a gradient of shape "
                                      f"{getattr(ig, 'shape', None)} for an input of shape {inp.shape}")
                _accumulate(grads, inp, ig)
    return result


def backward(root, grad=None) -> GradStore:
    """Gradients of ``root`` with respect to every leaf it depends on
    (``Tensor.backward``). Each leaf's ``.grad`` accumulates them; the returned
    GradStore holds this pass's gradients."""
    from ..ops.creation import ones_like

    if root._node is None:
        raise CandleError("backward: this tensor does not depend on any tensor that requires a gradient "
                          "(make the inputs Vars, or call requires_grad_())")
    if grad is None:
        if root.numel() != 1:
            raise CandleError(f"backward: give the gradient of a non-scalar output of shape {root.shape}")
        grad = ones_like(root)
    elif grad.shape != root.shape:
        raise CandleError(f"backward: gradient of shape {grad.shape} for an output of shape {root.shape}")
    store = GradStore()
    for tensor, g in run_backward([root], [grad.detach()]).values():
        leaf = tensor._node
        if isinstance(leaf, Leaf):
            store.insert(tensor, g)
            leaf.grad = g if leaf.grad is None else leaf.grad + g
    return store


def grad(outputs, inputs, grad_outputs=None) -> tuple:
    """Gradients of ``outputs`` with respect to ``inputs`` (any tensors of the
    graph, leaves or not), without touching any ``.grad``; None for an input
    the outputs do not depend on. As ``torch.autograd.grad``."""
    from ..ops.creation import ones_like

    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    single = not isinstance(inputs, (list, tuple))
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None:
        grad_outputs = [ones_like(o) for o in outputs]
    elif not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs]
    for o in outputs:
        if o._node is None:
            raise CandleError("grad: an output does not depend on any tensor that requires a gradient")
    grads = run_backward(outputs, [g.detach() for g in grad_outputs], keep=inputs)
    result = tuple(grads[id(t)][1] if id(t) in grads else None for t in inputs)
    return result[0] if single else result
