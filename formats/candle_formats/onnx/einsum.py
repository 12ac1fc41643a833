"""Einsum as diagonals, sums and batched matrix products.

Each operand first loses its repeated letters (diagonals) and the letters no
other operand or the output uses (summed). Operands are then contracted
pairwise, left to right: letters both share and something later needs are
batch dims, letters both share and nothing later needs are the inner dim of
one matmul.
"""

from __future__ import annotations

import math

import candle_api as c

_ELLIPSIS_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Operand and output subscripts with every '...' spelled out as letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"einsum {equation!r} names {len(terms)} operands, got {len(ranks)}")
    spare = [ch for ch in _ELLIPSIS_LETTERS if ch not in eq]
    width = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    fill = "".join(spare[:width])
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - len(term.replace("...", ""))
            term = term.replace("...", fill[width - n:])
        if len(term) != rank:
            raise ValueError(f"einsum {equation!r}: subscripts {term!r} do not match an operand of rank {rank}")
        expanded.append(term)
    if arrow:
        out = rhs.replace("...", fill)
    else:
        counts = {ch: "".join(expanded).count(ch) for ch in "".join(expanded)}
        out = fill + "".join(sorted(ch for ch, k in counts.items() if k == 1 and ch not in fill))
    return expanded, out


def _diagonal(x, letters: str):
    """x with each repeated letter's dims reduced to their diagonal."""
    while True:
        dup = next((ch for i, ch in enumerate(letters) if ch in letters[i + 1:]), None)
        if dup is None:
            return x, letters
        i, j = letters.index(dup), letters.index(dup, letters.index(dup) + 1)
        n = x.shape[i]
        order = [d for d in range(x.rank) if d not in (i, j)] + [i, j]
        flat = x.permute(order).flatten(x.rank - 2, x.rank - 1)
        picks = c.arange(0, n, dtype=c.i64, device=x.device) * (n + 1)
        x = flat.index_select(picks, flat.rank - 1)
        letters = "".join(letters[d] for d in order[:-2]) + dup


def _sum_unused(x, letters: str, needed: str):
    dims = [i for i, ch in enumerate(letters) if ch not in needed]
    if not dims:
        return x, letters
    return x.sum(dims), "".join(ch for ch in letters if ch in needed)


def _contract(a, la: str, b, lb: str, keep: str):
    batch = [ch for ch in la if ch in lb and ch in keep]
    inner = [ch for ch in la if ch in lb and ch not in keep]
    a_only = [ch for ch in la if ch not in lb]
    b_only = [ch for ch in lb if ch not in la]
    size = dict(zip(lb, b.shape))
    for ch, n in zip(la, a.shape):  # a dim of 1 broadcasts against the other operand's
        size[ch] = max(n, size.get(ch, n))
    a = a.permute([la.index(ch) for ch in batch + a_only + inner])
    b = b.permute([lb.index(ch) for ch in batch + inner + b_only])
    bs = [size[ch] for ch in batch]
    a = a.broadcast_as(tuple(bs) + a.shape[len(batch):])
    b = b.broadcast_as(tuple(bs) + b.shape[len(batch):])
    k = math.prod(size[ch] for ch in inner)
    a = a.reshape(tuple(bs) + (math.prod(size[ch] for ch in a_only), k))
    b = b.reshape(tuple(bs) + (k, math.prod(size[ch] for ch in b_only)))
    out = (a @ b).reshape(tuple(bs) + tuple(size[ch] for ch in a_only + b_only))
    return out, "".join(batch + a_only + b_only)


def einsum(equation: str, xs):
    terms, out = parse(equation, [x.rank for x in xs])
    ops = []
    for i, (x, letters) in enumerate(zip(xs, terms)):
        x, letters = _diagonal(x, letters)
        others = out + "".join(t for j, t in enumerate(terms) if j != i)
        ops.append(_sum_unused(x, letters, others))
    x, letters = ops[0]
    for i in range(1, len(ops)):
        keep = out + "".join(t for _, t in ops[i + 1:])
        x, letters = _contract(x, letters, *ops[i], keep)
    x, letters = _sum_unused(x, letters, out)
    return x.permute([letters.index(ch) for ch in out]) if letters != out else x
