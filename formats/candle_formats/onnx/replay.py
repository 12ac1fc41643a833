"""Recorded runs: a model run again and again on inputs of the same shapes
replays the kernel calls of one recorded run instead of walking its graph.

Streaming models (a voice-activity detector called on every 32 ms of audio)
and batch-1 networks spend most of a run in Python: each node resolves its
attributes, checks and broadcasts shapes, looks its kernels up and packs
their layouts. For given input shapes all of that comes out the same every
run, so the second run with a new input signature (the names, dtypes and
shapes of the feeds) is *recorded*: it runs as usual with an observer on the
dispatch path (``candle_api.ops.dispatch.observer``) that keeps every kernel
call with its arguments (output and input storages, layouts, scalars). Later
runs with that signature copy the feeds into the recorded input buffers and
call the kernels again, one prebound call each; the values that come out are
the recorded output tensors' new contents.

What a replay must not get wrong:

- *Values read on the host.* A node that reads a tensor's values on the host
  (the condition of an If, a Loop's trip count, the sizes of a Range) may
  take another path for other values. Each such read of a value computed from
  the feeds becomes a guard: the replay compares the value with the recorded
  one at that point and, when it differs, the run starts again on the graph.
  Values computed only from constants, shapes and host values are the same
  every run with a signature and need no guard.
  A read of more than ``GUARD_LIMIT`` values (NonZero's mask, say) makes the
  signature unrecordable: those runs always walk the graph.
- *Random generators* (nodes that are not pure) are not recorded: they run
  as nodes in the replay, and their outputs are copied into the buffers the
  recorded kernels read.
- *Other observers*: a run is recorded only when no other observer (the
  trace, the shadow check) is installed, and it is dropped if one is
  installed while it records.

Replays use their own buffers, so one recorded run serves one thread at a
time; a run that finds it busy walks the graph. Runs given RunOptions walk
the graph too (their limits are checked per node).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

import candle_api as c
from candle_api.ops import dispatch
from candle_api.ops.shape import copy_into

from .plan import RECORDER, Plan, call, store

#: the most values a guard compares (a larger host read makes a signature unrecordable)
GUARD_LIMIT = 4096
#: recorded runs kept per model, the least recently used dropped first
MAX_PROGRAMS = 4
#: a recorded run whose guards fail this many times in a row is dropped
MAX_DIVERGED = 3


class Diverged(Exception):
    """A guard of a replay saw another value than the recorded run: walk the graph."""


def _guard(tensor, expected: np.ndarray) -> None:
    got = tensor.numpy()
    if not np.array_equal(got, expected, equal_nan=expected.dtype.kind in "fc"):
        raise Diverged


def _live(fn, node, inputs: list, outputs: list) -> None:
    """Runs a node that is not recorded (a random generator) and copies its
    outputs into the buffers the recorded kernels read."""
    values = fn(node, *inputs)
    values = values if type(values) is tuple else (values,)
    for dst, value in zip(outputs, values):
        if dst is None:
            continue
        if not isinstance(value, c.Tensor) or value.shape != dst.shape or value.dtype != dst.dtype:
            raise Diverged
        copy_into(dst, dst._layout, value)


class Recorder(dispatch.Observer):
    """Keeps the kernel calls of one run (in the thread that made it)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.busy = False            # inside a launch, or a node run live: not recorded
        self.calls: list = []        # (fn, args): fn(*args) redoes the call
        self.nodes: list = []        # the node each call belongs to
        self.node = None
        self.data: set[int] = set()  # ids of the storages whose contents come from the feeds
        self.failed: str | None = None

    def active(self) -> bool:
        return not self.busy and threading.get_ident() == self.thread

    def _add(self, fn, args: tuple, written=()) -> None:
        self.calls.append((fn, args))
        self.nodes.append(self.node)
        for s in written:
            self.data.add(id(s))

    # ---- the observer --------------------------------------------------------------------------
    def run(self, op, device, dtype, inputs, params, launch):
        self.busy = True
        try:
            out = launch()
            shape, _, args = op.prepare(*inputs, **params) if params else op.prepare(*inputs)
        finally:
            self.busy = False
        kernel = device.kernels[(op.name, dtype)]
        # what a kernel writes comes from the feeds when something it reads does; else it is
        # the same every run with this signature (made from constants, shapes and host values)
        data = any(isinstance(t, c.Tensor) and id(t._storage) in self.data for t in inputs)
        if shape is None:  # in place: the kernel writes the storages of op.writes
            written = [inputs[i]._storage for i in op.writes if inputs[i] is not None]
            self._add(kernel, args, written if data else ())
        elif out._layout.numel:
            self._add(kernel, (out._storage, *args), [out._storage] if data else ())
        return out

    def read(self, tensor) -> None:
        if not self.active() or id(tensor._storage) not in self.data:
            return  # a constant of the plan, or a value made on the host: the same every run
        if tensor._layout.numel > GUARD_LIMIT:
            self.failed = f"a node reads {tensor._layout.numel} values computed from the feeds on the host"
            return
        value = np.array(tensor._device.backend.to_numpy(tensor._storage, tensor._layout, tensor._dtype))
        self._add(_guard, (tensor, value))

    def crossed(self, source, target, nbytes: int) -> None:
        if self.active():
            self.failed = "a value crossed devices"

    # ---- the plan's steps ---------------------------------------------------------------------
    def step(self, step, env: dict) -> None:
        """Runs one step of a plan (Plan.run calls this while recording)."""
        saved, self.node = self.node, step.node
        try:
            if step.pure:
                store(env, step, call(step, env))
            else:
                self._step_live(step, env)
        finally:
            self.node = saved

    def _step_live(self, step, env: dict) -> None:
        inputs = [env[n] for n in step.inputs]
        self.busy = True
        try:
            values = call(step, env)
            values = values if type(values) is tuple else (values,)
            # the replay copies into buffers of its own (an output may be an input: Dropout at inference)
            outputs = [v.contiguous().copy() if isinstance(v, c.Tensor) else v for v in values]
        finally:
            self.busy = False
        if not all(v is None or isinstance(v, c.Tensor) for v in outputs):
            self.failed = f"node {step.node.name!r} ({step.node.op_type}) makes a sequence and is not pure"
        self._add(_live, (step.fn, step.node, inputs, outputs), [v._storage for v in outputs if v is not None])
        store(env, step, tuple(outputs) if len(outputs) > 1 else outputs[0])


class Program:
    """A recorded run: the feeds' buffers, the calls, the outputs."""

    def __init__(self, feeds: dict, calls: list, nodes: list, outputs: list):
        self.feeds = feeds          # name -> the tensor the calls read that feed from
        # kernels that can bind their arguments once (a ``bind`` attribute) do, so that a replay
        # does not pack the same descriptors again on every run
        self.calls = [(fn.bind(*args), ()) if hasattr(fn, "bind") else (fn, args) for fn, args in calls]
        self.nodes = nodes
        self.outputs = outputs
        self.lock = threading.Lock()
        self.diverged = 0

    def run(self, feeds: dict) -> list:
        """The outputs (the program's own tensors: copy them before the next run)."""
        for name, dst in self.feeds.items():
            copy_into(dst, dst._layout, feeds[name])
        for fn, args in self.calls:
            fn(*args)
        return self.outputs


def signature(feeds: dict):
    """What a recorded run depends on besides values: each feed's name, dtype and shape
    (None when a feed is not a tensor: such runs are not recorded)."""
    key = []
    for name, value in feeds.items():
        if not isinstance(value, c.Tensor):
            return None
        key.append((name, value._dtype, value._layout.shape))
    return tuple(key)


def record(plan: Plan, feeds: dict) -> tuple[list, Program | None]:
    """Runs the plan once, recording it: (its outputs, the Program or None when the
    run cannot be replayed)."""
    if dispatch.observer is not None:
        return plan.run(feeds), None
    owned = {name: value.contiguous().copy() for name, value in feeds.items()}  # buffers the replay refills
    recorder = Recorder()
    recorder.data.update(id(t._storage) for t in owned.values())
    dispatch.observer = recorder
    token = RECORDER.set(recorder)
    try:
        outputs = plan.run(owned)
    finally:
        RECORDER.reset(token)
        intact = dispatch.observer is recorder
        if intact:
            dispatch.observer = None
    if not intact or recorder.failed or not all(_replayable(v) for v in outputs):
        return outputs, None
    return outputs, Program(owned, recorder.calls, recorder.nodes, outputs)


def _replayable(value) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, c.Tensor) for v in value)
    return value is None or isinstance(value, c.Tensor)


#: the state of a signature without a program: seen once (record the next run), or not recordable
_SEEN, _UNRECORDABLE = "seen", "unrecordable"


class Replays:
    """The recorded runs of one model, by signature: a signature's first run walks
    the graph, its second is recorded, later ones replay."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.programs: OrderedDict = OrderedDict()   # signature -> Program, _SEEN or _UNRECORDABLE
        self.lock = threading.Lock()

    def run(self, feeds: dict) -> list:
        """The plan's outputs for these feeds (tensors of their own, whichever way they were made)."""
        key = signature(feeds)
        if key is None:
            return self.plan.run(feeds)
        with self.lock:
            program = self.programs.get(key)
            if program is not None:
                self.programs.move_to_end(key)
        if program is None:
            self._keep(key, _SEEN)
            return self.plan.run(feeds)
        if program is _UNRECORDABLE:
            return self.plan.run(feeds)
        if program is _SEEN:
            outputs, program = record(self.plan, feeds)
            self._keep(key, program or _UNRECORDABLE)
            return outputs
        return self._replay(key, program, feeds)

    def _replay(self, key, program: Program, feeds: dict) -> list:
        if not program.lock.acquire(blocking=False):  # another thread replays it
            return self.plan.run(feeds)
        try:
            try:
                outputs = program.run(feeds)
            except Diverged:
                program.diverged += 1
                if program.diverged >= MAX_DIVERGED:
                    self._keep(key, _SEEN)
                return self.plan.run(feeds)
            except Exception:  # the graph walk raises the same error, naming the node
                return self.plan.run(feeds)
            program.diverged = 0
            return [_copied(v) for v in outputs]
        finally:
            program.lock.release()

    def _keep(self, key, program) -> None:
        with self.lock:
            self.programs[key] = program
            self.programs.move_to_end(key)
            while len(self.programs) > MAX_PROGRAMS:
                self.programs.popitem(last=False)


def _copied(value):
    if isinstance(value, list):
        return [v.copy() for v in value]
    return value.copy() if isinstance(value, c.Tensor) else value
