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


def scatter_view(x, relayout, g):
    """The gradient of a view that picks elements of x without repeating any
    (narrow, select, strided slices, flips): g written into zeros of x's shape
    at the positions ``relayout`` (the view's layout change) picks."""
    from ..ops.creation import zeros
    from ..ops.shape import copy_into

    z = zeros(x.shape, dtype=g.dtype, device=g.device)
    copy_into(z, relayout(z._layout), g)
    return z
