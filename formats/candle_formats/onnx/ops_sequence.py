"""Sequences (Python lists of tensors) and optionals (a value, or None when empty)."""

from __future__ import annotations

import candle_api as c

from .helpers import axis, const, ints, scalar
from .ops_control import _body_feeds
from .registry import op


def _position(node, seq: list, pos, insert: bool = False) -> int:
    n = len(seq)
    p = int(scalar(pos)) if pos is not None else (n if insert else n - 1)
    if not -n <= p <= (n if insert else n - 1):
        raise node.fail(f"position {p} is out of range for a sequence of {n}")
    return p + n if p < 0 else p


@op("SequenceEmpty", since=11)
def sequence_empty(node):
    return []


@op("SequenceConstruct", since=11)
def sequence_construct(node, *xs):
    return list(xs)


@op("SequenceAt", since=11)
def sequence_at(node, seq, pos):
    return seq[_position(node, seq, pos)]


@op("SequenceInsert", since=11)
def sequence_insert(node, seq, x, pos=None):
    p = _position(node, seq, pos, insert=True)
    return seq[:p] + [x] + seq[p:]


@op("SequenceErase", since=11)
def sequence_erase(node, seq, pos=None):
    p = _position(node, seq, pos)
    return seq[:p] + seq[p + 1:]


@op("SequenceLength", since=11)
def sequence_length(node, seq):
    return const(len(seq), c.i64, node.device)


@op("SplitToSequence", since=11)
def split_to_sequence(node, x, split=None):
    a = axis(node.get("axis", 0), x.rank, node)
    if split is None:  # pieces of 1, the split dim squeezed away when keepdims=0
        parts = x.split(1, a)
        return parts if node.get("keepdims", 1) else [p.squeeze(a) for p in parts]
    sizes = ints(split)
    if split.rank == 0:  # one size: equal pieces, the last one shorter
        n, k = x.shape[a], sizes[0]
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
    return list(x.split(sizes, a))


@op("ConcatFromSequence", since=11)
def concat_from_sequence(node, seq):
    if node.get("new_axis", 0):
        return c.stack(seq, axis(node["axis"], seq[0].rank + 1, node))
    return c.cat(seq, axis(node["axis"], seq[0].rank, node))


@op("SequenceMap", since=17)
def sequence_map(node, *args):
    (seq, *extra), outer = node.split_captures(args)
    body = node["body"]
    results = [[] for _ in body.outputs]
    for i in range(len(seq)):
        feeds = [seq[i]] + [v[i] if isinstance(v, list) else v for v in extra]
        for out, value in zip(results, body.run(_body_feeds(body, feeds), outer)):
            out.append(value)
    return results[0] if len(results) == 1 else tuple(results)


@op("Optional", since=15)
def optional(node, x=None):
    return x


@op("OptionalHasElement", since=15)
def optional_has_element(node, x=None):
    return const(x is not None, c.u8, node.device)


@op("OptionalGetElement", since=15)
def optional_get_element(node, x):
    if x is None:
        raise node.fail("the optional is empty")
    return x
