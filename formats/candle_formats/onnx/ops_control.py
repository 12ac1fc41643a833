"""Control flow: If, Loop and Scan run their compiled subgraphs (plans).

A node with subgraphs receives, after its own inputs, the enclosing graphs'
values its subgraphs read (``node.split_captures``); they are passed on to
each subgraph run as its ``outer`` values.
"""

from __future__ import annotations

import candle_api as c
from candle_api.ops.shape import select

from .helpers import const, scalar
from .plan import check_iteration
from .registry import op


def _outputs(values: list):
    return values[0] if len(values) == 1 else tuple(values)


def _body_feeds(plan, values) -> dict:
    if len(values) != len(plan.inputs):
        raise ValueError(f"the body takes {len(plan.inputs)} inputs, it is given {len(values)}")
    return dict(zip(plan.inputs, values))


@op("If")
def if_(node, *args):
    (cond,), outer = node.split_captures(args)
    branch = node["then_branch"] if scalar(cond) else node["else_branch"]
    return _outputs(branch.run({}, outer))


def _stack(node, parts: list, out_index: int, axis: int = 0, reverse: bool = False):
    """The per-iteration values of a scan output stacked along a new axis."""
    if not parts:  # no iteration ran: an empty tensor of the declared type
        t = node.out_type(out_index)
        return c.zeros(0, dtype=t.storage if t is not None else c.f32, device=node.device)
    if reverse:
        parts = parts[::-1]
    if isinstance(parts[0], list):  # a sequence per iteration (Loop over sequences stays a list)
        return parts[-1]
    return c.stack(parts, axis)


@op("Loop")
def loop(node, *args):
    (trip_count, cond, *state), outer = node.split_captures(args)
    body = node["body"]
    limit = int(scalar(trip_count)) if trip_count is not None else None
    keep_going = bool(scalar(cond)) if cond is not None else True
    n_state = len(state)
    scans: list[list] = []
    i = 0
    while keep_going and (limit is None or i < limit):
        check_iteration(node, i)
        feeds = [const(i, c.i64, node.device), const(1, c.u8, node.device), *state]
        out = body.run(_body_feeds(body, feeds), outer)
        keep_going = bool(scalar(out[0]))
        state = out[1:1 + n_state]
        if not scans:
            scans = [[] for _ in out[1 + n_state:]]
        for parts, value in zip(scans, out[1 + n_state:]):
            parts.append(value)
        i += 1
    n_scans = node.n_outputs - n_state
    scans = scans or [[] for _ in range(n_scans)]
    stacked = [_stack(node, parts, n_state + k) for k, parts in enumerate(scans)]
    return _outputs([*state, *stacked])


def _scan(node, body, state: list, inputs: list, outer: dict):
    """One Scan-9 pass: ``inputs`` are scanned along their scan axes."""
    m = len(inputs)
    in_axes = [a % max(x.rank, 1) for a, x in zip(node.get("scan_input_axes") or [0] * m, inputs)]
    in_dirs = node.get("scan_input_directions") or [0] * m
    steps = inputs[0].shape[in_axes[0]] if inputs else 0
    scans: list[list] = []
    for t in range(steps):
        check_iteration(node, t)
        slices = [select(x, a, steps - 1 - t if d else t) for x, a, d in zip(inputs, in_axes, in_dirs)]
        out = body.run(_body_feeds(body, [*state, *slices]), outer)
        state = out[:len(state)]
        if not scans:
            scans = [[] for _ in out[len(state):]]
        for parts, value in zip(scans, out[len(state):]):
            parts.append(value)
    k = len(body.outputs) - len(state)
    scans = scans or [[] for _ in range(k)]
    out_axes = node.get("scan_output_axes") or [0] * k
    out_dirs = node.get("scan_output_directions") or [0] * k
    stacked = []
    for j, parts in enumerate(scans):
        rank = parts[0].rank + 1 if parts else 1
        stacked.append(_stack(node, parts, len(state) + j, out_axes[j] % rank, bool(out_dirs[j])))
    return state, stacked


@op("Scan", since=9)
def scan(node, *args):
    values, outer = node.split_captures(args)
    m = node["num_scan_inputs"]
    state, inputs = list(values[:len(values) - m]), list(values[len(values) - m:])
    state, stacked = _scan(node, node["body"], state, inputs, outer)
    return _outputs([*state, *stacked])


@op("Scan", since=8)
def scan_v8(node, *args):
    """Scan-8: a leading batch axis on every state and input, scanned along axis 1."""
    (lengths, *values), outer = node.split_captures(args)
    m = node["num_scan_inputs"]
    state, inputs = values[:len(values) - m], values[len(values) - m:]
    batch = (state or inputs)[0].shape[0]
    if lengths is not None and any(int(n) != inputs[0].shape[1] for n in lengths.numpy().reshape(-1)):
        raise node.unsupported("sequence_lens shorter than the scanned axis")
    directions = node.get("directions") or [0] * m
    per_batch = []
    for b in range(batch):
        view = _V8View(node, directions)
        s, outs = _scan(view, node["body"], [x[b] for x in state], [x[b] for x in inputs], outer)
        per_batch.append([*s, *outs])
    return _outputs([c.stack(list(parts), 0) for parts in zip(*per_batch)])


class _V8View:
    """Scan-8's node seen with Scan-9's attribute names (time axis 0 once the batch is split off)."""

    def __init__(self, node, directions):
        self._node, self._directions = node, directions
        self.device = node.device

    def get(self, name, default=None):
        return self._directions if name == "scan_input_directions" else default

    def out_type(self, i):
        return self._node.out_type(i)
