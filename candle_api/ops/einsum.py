"""einsum from permute, reshape, sum and matmul (so gradients come from theirs).

Subscripts are letters; ``...`` stands for broadcast dims (right-aligned, as
in PyTorch). Without ``->`` the output holds the letters used once, sorted,
after the broadcast dims. Operands are contracted left to right, two at a
time: letters only one operand still needs are summed out first, then the
pair is one batched matmul of (batch, left's own, shared) by (batch, shared,
right's own) letters. A letter repeated within one operand (a diagonal or a
trace) is refused.
"""

from __future__ import annotations

from ..errors import ArgumentError, ShapeError
from ..layout import numel
from ..tensor import Tensor
from .core import check_tensor, same_device, same_dtype
from .linalg import matmul

_ELLIPSIS = "..."


def _letters(text: str) -> bool:
    """ASCII letters only: broadcast dims are named by characters past ASCII."""
    return all(ch.isascii() and ch.isalpha() for ch in text)


def _parse(equation: str, operands: tuple) -> tuple:
    """([subscripts of each operand], output subscripts), ``...`` replaced by one
    private character per broadcast dim."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ArgumentError(f"einsum: {equation!r} has {len(terms)} operands, {len(operands)} given")
    ranks = []
    for term, x in zip(terms, operands):
        letters = term.replace(_ELLIPSIS, "")
        if not _letters(letters) or term.count(_ELLIPSIS) > 1:
            raise ArgumentError(f"einsum: bad subscripts {term!r} (letters and at most one '...')")
        if len(set(letters)) != len(letters):
            raise ArgumentError(f"einsum: {term!r} repeats a letter (diagonals and traces are not supported)")
        if (len(letters) > x.rank) if _ELLIPSIS in term else (len(letters) != x.rank):
            raise ShapeError(f"einsum: subscripts {term!r} do not fit an operand of shape {x.shape}")
        ranks.append(x.rank - len(letters))
    n_ellipsis = max(ranks)
    dots = "".join(chr(0x100 + i) for i in range(n_ellipsis))
    terms = [t.replace(_ELLIPSIS, dots[n_ellipsis - r:]) for t, r in zip(terms, ranks)]
    if arrow:
        if not _letters(out.replace(_ELLIPSIS, "")) or out.count(_ELLIPSIS) > 1:
            raise ArgumentError(f"einsum: bad output subscripts {out!r}")
        out = out.replace(_ELLIPSIS, dots)
        used = set("".join(terms))
        if len(set(out)) != len(out) or not set(out) <= used:
            raise ArgumentError(f"einsum: the output {out!r} repeats a letter or names one no operand has")
    else:
        joined = "".join(terms)
        out = dots + "".join(sorted(ch for ch in set(joined) if joined.count(ch) == 1 and ch not in dots))
    return terms, out


def _sizes(terms: list, operands: tuple) -> dict:
    """Each letter's size; a size-1 dim broadcasts against a larger one."""
    sizes: dict = {}
    for term, x in zip(terms, operands):
        for ch, n in zip(term, x.shape):
            known = sizes.get(ch, 1)
            if known == 1:
                sizes[ch] = n
            elif n not in (1, known):
                raise ShapeError(f"einsum: subscript {ch!r} has sizes {known} and {n}")
    return sizes


def _sum_out(x: Tensor, term: str, keep: set) -> tuple:
    """x summed over the letters of term not in keep."""
    drop = [i for i, ch in enumerate(term) if ch not in keep]
    if drop:
        x = x.sum(drop)
        term = "".join(ch for ch in term if ch in keep)
    return x, term


def _arrange(x: Tensor, term: str, order: str, sizes: dict) -> Tensor:
    """x with its dims permuted to order, size-1 dims broadcast to the letters' sizes."""
    x = x.permute([term.index(ch) for ch in order]) if term != order else x
    shape = tuple(sizes[ch] for ch in order)
    return x.broadcast_as(shape) if x.shape != shape else x


def _contract(a: Tensor, ta: str, b: Tensor, tb: str, keep: set, sizes: dict) -> tuple:
    """The pair as one batched matmul; keep: the letters still needed after it."""
    a, ta = _sum_out(a, ta, keep | set(tb))
    b, tb = _sum_out(b, tb, keep | set(ta))
    batch = "".join(ch for ch in ta if ch in tb and ch in keep)
    shared = "".join(ch for ch in ta if ch in tb and ch not in keep)
    own_a = "".join(ch for ch in ta if ch not in tb)
    own_b = "".join(ch for ch in tb if ch not in ta)
    lengths = [numel(sizes[ch] for ch in part) for part in (batch, own_a, shared, own_b)]
    left = _arrange(a, ta, batch + own_a + shared, sizes).reshape(lengths[0], lengths[1], lengths[2])
    right = _arrange(b, tb, batch + shared + own_b, sizes).reshape(lengths[0], lengths[2], lengths[3])
    out = matmul(left, right).reshape(tuple(sizes[ch] for ch in batch + own_a + own_b))
    return out, batch + own_a + own_b


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation (``einsum("bij,bjk->bik", a, b)``); operands may also be one list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ArgumentError("einsum: needs at least one operand")
    for x in operands:
        check_tensor("einsum", x, "operand")
    same_dtype("einsum", *operands)
    same_device("einsum", *operands)
    terms, out = _parse(equation, operands)
    sizes = _sizes(terms, operands)
    x, term = operands[0], terms[0]
    for i in range(1, len(operands)):
        later = set(out).union(*terms[i + 1:])
        x, term = _contract(x, term, operands[i], terms[i], later, sizes)
    x, term = _sum_out(x, term, set(out))
    return _arrange(x, term, out, sizes)
