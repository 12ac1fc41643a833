"""Small pieces backward rules share."""

from __future__ import annotations


def sum_to(g, shape: tuple):
    """g summed over the dims that broadcasting added or stretched, so it has
    ``shape`` (the input's shape before broadcasting)."""
    if g.shape == shape:
        return g
    lead = g.rank - len(shape)
    dims = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1]
    if dims:
        g = g.sum(dims, keepdim=True)
    return g.reshape(shape)


def where_or_zero(mask, g):
    """g where mask is nonzero, else 0."""
    from ..ops.elementwise import where

    return where(mask, g, 0.0)


class ViewGrad:
    """The gradient of a view that picks elements of its base without
    repeating any (narrow, select, strided slices, flips): ``g`` at the
    positions ``relayout`` (the view's layout change) picks in a tensor of
    ``shape``, zeros elsewhere. Kept in this form until needed, so the
    engine can add many of them into one buffer (a tensor sliced once per
    time step) instead of adding full-size tensors."""

    __slots__ = ("shape", "relayout", "g")

    def __init__(self, shape: tuple, relayout, g):
        self.shape, self.relayout, self.g = shape, relayout, g

    def add_into(self, buf) -> None:
        """Adds this gradient into ``buf`` (a tensor the engine owns) in place."""
        from ..ops.core import view
        from ..ops.shape import copy_into

        lay = self.relayout(buf._layout)
        copy_into(buf, lay, view(buf, lay) + self.g)

    def dense(self):
        from ..ops.creation import zeros
        from ..ops.shape import copy_into

        z = zeros(self.shape, dtype=self.g.dtype, device=self.g.device)
        copy_into(z, self.relayout(z._layout), self.g)
        return z


def scatter_view(x, relayout, g) -> ViewGrad:
    """x's gradient from the gradient g of a view of x (see ViewGrad)."""
    return ViewGrad(x.shape, relayout, g)
