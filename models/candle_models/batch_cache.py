"""A KV cache for continuous batching: sequences of different lengths decoded
together, one token each per step, joining and leaving between steps.

Each sequence owns a row of (rows, kv_heads, capacity, head_dim) buffers and
its own length. A step writes each row's new key/value at that row's length
and attends over the longest row's positions, a mask hiding the positions a
shorter row does not have: one attention call per layer for the whole batch.
Rows are kept packed (0 .. batch - 1): a sequence that leaves takes the last
row's place, so the batch is always a prefix of the buffers."""

from __future__ import annotations

import numpy as np

import candle_api as c
from candle_api.errors import ArgumentError
from candle_api.ops import dispatch
from candle_api.ops.shape import copy_into


def visible_keys(positions, n_keys: int, window: int | None = None) -> np.ndarray:
    """bool (len(positions), n_keys): the query at each position sees key j when j <= its position
    and, with a window, its position - j < window."""
    pos = np.asarray(positions)[:, None]
    keys = np.arange(n_keys)[None, :]
    keep = keys <= pos
    if window is not None:
        keep &= pos - keys < window
    return keep


class BatchKVCache:
    """Keys and values of up to ``max_batch`` sequences; the buffers grow by doubling, in rows and in
    positions, as sequences join and lengthen, and are freed by :meth:`clear`."""

    def __init__(self, config, max_batch: int, dtype="f32", device="cpu"):
        if max_batch < 1:
            raise ArgumentError(f"max_batch must be at least 1, got {max_batch}")
        self.max_batch, self.max_length = max_batch, config.context_length
        self.layers, self.kv_heads, self.head_dim = (config.num_hidden_layers, config.num_key_value_heads,
                                                     config.head_dim)
        self.dtype, self.device = dtype, device
        self.lengths: list[int] = []  # per row: positions cached, which is the position of its next token
        self.keys: list = []
        self.values: list = []
        self._masks: dict = {}  # this step's attention masks, one per window
        self._slots: list = []  # this step's: per row, the layout of its new position in a buffer
        self._row_views: dict = {}  # this step's: a source layout (as a tuple) -> its rows' layouts
        self._end = 0  # this step's positions: the longest row's, its new token included

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def _reserve(self, rows: int, positions: int) -> None:
        """Buffers with room for ``rows`` rows of ``positions`` positions, the cached ones kept."""
        old = self.keys[0].shape if self.keys else (0, 0, 0, 0)
        if rows <= old[0] and positions <= old[2]:
            return
        shape = (_grown(old[0], rows, self.max_batch), self.kv_heads, _grown(old[2], positions, self.max_length),
                 self.head_dim)
        for buffers in (self.keys, self.values):
            for i in range(self.layers):
                new = c.zeros(shape, dtype=self.dtype, device=self.device)  # zeros: masked values must be finite
                if i < len(buffers):
                    copy_into(new, new._layout.narrow(0, 0, old[0]).narrow(2, 0, old[2]), buffers[i])
                    buffers[i] = new
                else:
                    buffers.append(new)

    def admit(self, cache) -> int:
        """Adds the sequence a (batch 1) ``KVCache`` holds, as after its prompt; returns its row."""
        if self.batch == self.max_batch:
            raise ArgumentError(f"the batch is full ({self.max_batch} sequences)")
        if cache.shape[0] != 1:
            raise ArgumentError(f"admit takes a cache of one sequence, got batch {cache.shape[0]}")
        row, n = self.batch, cache.length
        self._reserve(row + 1, n)
        for dst, src in ((self.keys, cache.keys), (self.values, cache.values)):
            for layer in range(self.layers):
                copy_into(dst[layer], dst[layer]._layout.narrow(0, row, 1).narrow(2, 0, n), src[layer].narrow(2, 0, n))
        self.lengths.append(n)
        return row

    def release(self, row: int) -> int | None:
        """Removes the sequence in ``row``; the last row moves into its place. Returns the row that
        moved (its old index), or None when ``row`` was the last."""
        last = self.batch - 1
        if not 0 <= row <= last:
            raise ArgumentError(f"row {row} is not in the batch of {self.batch}")
        n = self.lengths.pop()
        if row == last:
            return None
        for buffers in (self.keys, self.values):
            for buf in buffers:
                copy_into(buf, buf._layout.narrow(0, row, 1).narrow(2, 0, n), buf.narrow(0, last, 1).narrow(2, 0, n))
        self.lengths[row] = n
        return last

    def clear(self) -> None:
        """Drops every sequence and frees the buffers."""
        self.lengths, self.keys, self.values, self._masks = [], [], [], {}
        self._slots, self._row_views = [], {}

    # ---- what a decoding step uses (LlamaForCausalLM.forward) ---------------------------------------
    def begin_step(self) -> list[int]:
        """Makes room for this step's token in every row; returns each row's position."""
        if not self.lengths:
            raise ArgumentError("the batch is empty")
        self._end = max(self.lengths) + 1
        if self._end > self.max_length:
            raise ArgumentError(f"a sequence would pass the context length of {self.max_length}")
        self._reserve(self.batch, self._end)
        self._masks = {}
        whole = self.keys[0]._layout  # every buffer, keys and values, has this layout
        self._slots = [whole.narrow(0, row, 1).narrow(2, n, 1) for row, n in enumerate(self.lengths)]
        self._row_views = {}
        return list(self.lengths)

    def update(self, layer: int, k: c.Tensor, v: c.Tensor) -> tuple[c.Tensor, c.Tensor]:
        """Writes this step's (batch, kv_heads, 1, head_dim) keys and values, each row at its own
        position; returns views of every row's positions up to the longest."""
        keys, values = self.keys[layer], self.values[layer]
        kern = keys._device.kernels.get(("copy", keys._dtype))
        shape = (self.batch, self.kv_heads, 1, self.head_dim)
        if (kern is None or dispatch.observer is not None or k.shape != shape or v.shape != shape
                or k._dtype is not keys._dtype or v._dtype is not keys._dtype
                or k._device is not keys._device or v._device is not keys._device):
            for row, slot in enumerate(self._slots):
                copy_into(keys, slot, k.narrow(0, row, 1))
                copy_into(values, slot, v.narrow(0, row, 1))
        else:  # the copy kernel called as copy_into calls it, on layouts made once a step: a row's copy
            for src, buf in ((k, keys), (v, values)):  # through copy_into costs as much as its layer's products
                for slot, rows in zip(self._slots, self._rows(src._layout)):
                    kern(buf._storage, slot, src._storage, rows)
        b, end = self.batch, self._end
        return keys.narrow(0, 0, b).narrow(2, 0, end), values.narrow(0, 0, b).narrow(2, 0, end)

    def _rows(self, lay) -> list:
        """lay (a step's keys or values) narrowed to each row, kept for the step: every layer's keys
        (and values) have the same layout."""
        key = (lay.shape, lay.strides, lay.offset)
        rows = self._row_views.get(key)
        if rows is None:
            rows = self._row_views[key] = [lay.narrow(0, row, 1) for row in range(self.batch)]
        return rows

    def mask(self, window: int | None) -> c.Tensor | None:
        """u8 (batch, 1, 1, longest + 1): row i sees positions j <= lengths[i] (the last ``window``);
        None when every row sees every position (rows of one length, no window cutting in)."""
        if window not in self._masks:
            hi = self._end - 1
            if min(self.lengths) == hi and (window is None or window > hi):
                self._masks[window] = None
                return None
            keep = visible_keys(self.lengths, self._end, window)
            self._masks[window] = c.from_numpy(keep.astype(np.uint8)[:, None, None, :]).to_device(self.device)
        return self._masks[window]

    def advance(self, t: int) -> None:
        self.lengths = [n + t for n in self.lengths]


def _grown(size: int, needed: int, limit: int) -> int:
    """``size`` if it holds ``needed``, else doubled (at least ``needed``, at most ``limit``)."""
    return size if needed <= size else max(needed, min(2 * size, limit))
