"""Index kernels: index_select, gather, scatter, scatter_add and index_add.

Indices are checked on the host before the kernel runs (hostcheck.indices:
the GPU cannot raise), so the kernels trust them. Every kernel computes its
output elements independently and in a fixed order, so results never
depend on scheduling: scatter and scatter_add walk, for each output
element, the indices along dim that could land on it (the last write wins,
sums add in index order); index_add, whose index list may be long (an
embedding's backward pass), walks only the source rows aimed at each row,
from an index built on the host (rows sorted, stably).
"""

from __future__ import annotations

import numpy as np

from candle_api.dtype import get_dtype

from . import shaders as S
from .hostcheck import indices
from .launch import bind, fits, narrow_rows, pack, row_chunks, run


def _id_of(ids_dtype) -> str:
    """WGSL: an index value of ids_dtype's kind as u32 (already checked to be in range)."""
    return {"u": "v", "i": "bitcast<u32>(v)", "l": "v.x"}[S.kind(ids_dtype)]


def _head(value_dtype, ids_dtype, extra: str = "", scattered: bool = False) -> str:
    return f"""{S.library(*S.arith(value_dtype, ids_dtype))}
{S.params(3 + bool(extra))}{S.AT}
{S.writer("o", 0, value_dtype, scattered=scattered)}{S.reader("x", 1, value_dtype)}
{S.reader("ids", 2, ids_dtype)}{extra}
fn id_at(i: u32) -> u32 {{ let v = ids_ld(i); return {_id_of(ids_dtype)}; }}
"""


def _tail(value_dtype) -> str:
    return f"{S.ENTRY}  {S.store_units('o', value_dtype, 'value', 'P[0]')}\n}}\n"


def _index_select_source(raw, ids_dtype, windowed: bool) -> str:
    # P: n, rank, dim, ids offset, ids stride, first and end row of x's window, out shape, x offset, x strides
    select = """
fn src_at(e: u32) -> u32 {
  let rank = P[1];
  let dim = P[2];
  var r = e;
  var o = P[7u + rank];
  for (var d = rank; d > 0u; d--) {
    let s = P[6u + d];
    let c = r % s;
    r /= s;
    o += select(c, id_at(P[3] + c * P[4]) - P[5], d - 1u == dim) * P[7u + rank + d];
  }
  return o;
}
"""
    if not windowed:
        return (_head(raw, ids_dtype, scattered=False) + select
                + f"fn value(e: u32) -> {S.ctype(raw)} {{ return x_ld(src_at(e)); }}\n" + _tail(raw))
    # a table beyond the binding limit, a window of its rows at a time: each pass writes the
    # outputs whose index falls in its window (the row index is along dim 0)
    return _head(raw, ids_dtype, scattered=True) + select + f"""{S.ENTRY}  if (u >= P[0]) {{ return; }}
  let row = id_at(P[3] + (u / (P[0] / P[7u])) * P[4]);
  if (row < P[5] || row >= P[6]) {{ return; }}
  o_st(u, x_ld(src_at(u)));
}}
"""


def index_select(dtype):
    raw = get_dtype(S.raw_dtype(dtype))

    def kernel(out, x, lx, ids, lids, ids_dtype, dim):
        gpu = out.device.gpu
        indices("index_select", ids, lids, ids_dtype, lx.shape[dim])
        shape = list(lx.shape)
        shape[dim] = lids.numel
        n = int(np.prod(shape))
        bi, si = bind(gpu, ids, lids, ids_dtype.itemsize)
        head = [n, len(shape), dim, lids.offset - si, lids.strides[0] if lids.strides else 0]
        windows = [(0, lx.shape[0])]
        if dim == 0 and not fits(gpu, lx, raw.itemsize):
            windows = row_chunks(gpu, lx.shape, [(lx.strides, raw.itemsize)], 0)
        windowed = len(windows) > 1
        pipe = gpu.pipeline(("index_select", str(raw), str(ids_dtype), windowed), "wrr",
                            lambda: _index_select_source(raw, ids_dtype, windowed))
        for t0, t1 in windows:
            part = narrow_rows(lx, lx.shape, lx.strides, t0, t1) if windowed else lx
            bx, sx = bind(gpu, x, part, raw.itemsize)
            words = [*head, t0 if windowed else 0, t1, *shape, part.offset - sx, *lx.strides]
            gpu.dispatch(pipe, [bind(gpu, out, None, 1)[0], bx, bi], pack(*words),
                         max(1, -(-(n if windowed else S.units(raw, n)) // S.WG)))

    return kernel


def _gather_source(raw, ids_dtype) -> str:
    # P: n, rank, dim, ids shape, ids offset, ids strides, x offset, x strides
    return _head(raw, ids_dtype) + f"""
fn value(e: u32) -> {S.ctype(raw)} {{
  let rank = P[1];
  let dim = P[2];
  let row = id_at(at(e, 3u + rank, 3u, rank));
  var r = e;
  var o = P[4u + 2u * rank];
  for (var d = rank; d > 0u; d--) {{
    let s = P[2u + d];
    let c = r % s;
    r /= s;
    o += select(c, row, d - 1u == dim) * P[4u + 2u * rank + d];
  }}
  return x_ld(o);
}}
""" + _tail(raw)


def gather(dtype):
    raw = get_dtype(S.raw_dtype(dtype))

    def kernel(out, x, lx, ids, lids, ids_dtype, dim):
        gpu = out.device.gpu
        indices("gather", ids, lids, ids_dtype, lx.shape[dim])
        n = lids.numel
        bx, sx = bind(gpu, x, lx, raw.itemsize)
        bi, si = bind(gpu, ids, lids, ids_dtype.itemsize)
        words = [n, len(lids.shape), dim, *lids.shape, lids.offset - si, *lids.strides, lx.offset - sx, *lx.strides]
        run(gpu, ("gather", str(raw), str(ids_dtype)), "wrr", lambda: _gather_source(raw, ids_dtype),
            [bind(gpu, out, None, 1)[0], bx, bi], pack(*words), S.units(raw, n))

    return kernel


def _scatter_source(dtype, ids_dtype, add: bool) -> str:
    # P: n, rank, dim, x shape, ids shape, x offset, x strides, ids offset, ids strides, src offset, src strides
    k = S.kind(dtype)
    combine = f"add_{k}(v, src_ld(so + i * sst))" if add else "src_ld(so + i * sst)"
    return _head(dtype, ids_dtype, S.reader("src", 3, dtype)) + f"""
fn value(e: u32) -> {S.ctype(dtype)} {{
  let rank = P[1];
  let dim = P[2];
  var r = e;
  var xo = P[3u + 2u * rank];
  var io = P[4u + 3u * rank];
  var so = P[5u + 4u * rank];
  var inside = true;
  var pd = 0u;
  for (var d = rank; d > 0u; d--) {{
    let s = P[2u + d];
    let c = r % s;
    r /= s;
    xo += c * P[3u + 2u * rank + d];
    if (d - 1u == dim) {{
      pd = c;
    }} else {{
      inside = inside && c < P[2u + rank + d];
      io += c * P[4u + 3u * rank + d];
      so += c * P[5u + 4u * rank + d];
    }}
  }}
  var v = x_ld(xo);
  if (inside) {{
    let ist = P[5u + 3u * rank + dim];
    let sst = P[6u + 4u * rank + dim];
    for (var i = 0u; i < P[3u + rank + dim]; i++) {{
      if (id_at(io + i * ist) == pd) {{ v = {combine}; }}
    }}
  }}
  return v;
}}
""" + _tail(dtype)


def _scatter(add: bool):
    op = "scatter_add" if add else "scatter"

    def make(dtype):
        vdt = dtype if add else get_dtype(S.raw_dtype(dtype))

        def kernel(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim):
            gpu = out.device.gpu
            indices(op, ids, lids, ids_dtype, lx.shape[dim])
            n = lx.numel
            bx, sx = bind(gpu, x, lx, vdt.itemsize)
            bi, si = bind(gpu, ids, lids, ids_dtype.itemsize)
            bs, ss = bind(gpu, src, lsrc, vdt.itemsize)
            words = [n, len(lx.shape), dim, *lx.shape, *lids.shape, lx.offset - sx, *lx.strides,
                     lids.offset - si, *lids.strides, lsrc.offset - ss, *lsrc.strides]
            run(gpu, (op, str(vdt), str(ids_dtype)), "wrrr", lambda: _scatter_source(vdt, ids_dtype, add),
                [bind(gpu, out, None, 1)[0], bx, bi, bs], pack(*words), S.units(vdt, n))

        return kernel

    return make


def _index_add_source(dtype) -> str:
    # P: n, rank, dim, x shape, x offset, x strides, src offset, src strides, where the rows' list starts
    k = S.kind(dtype)
    return _head(dtype, "u32", S.reader("src", 3, dtype)) + f"""
fn value(e: u32) -> {S.ctype(dtype)} {{
  let rank = P[1];
  let dim = P[2];
  var r = e;
  var xo = P[3u + rank];
  var so = P[4u + 2u * rank];
  var row = 0u;
  for (var d = rank; d > 0u; d--) {{
    let s = P[2u + d];
    let c = r % s;
    r /= s;
    xo += c * P[3u + rank + d];
    if (d - 1u == dim) {{ row = c; }} else {{ so += c * P[4u + 2u * rank + d]; }}
  }}
  var v = x_ld(xo);
  let sst = P[5u + 2u * rank + dim];
  let first = P[5u + 3u * rank];
  for (var t = ids_ld(row); t < ids_ld(row + 1u); t++) {{
    v = add_{k}(v, src_ld(so + ids_ld(first + t) * sst));
  }}
  return v;
}}
""" + _tail(dtype)


def index_add(dtype):
    def kernel(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim):
        gpu = out.device.gpu
        size = lx.shape[dim]
        rows = indices("index_add", ids, lids, ids_dtype, size)
        order = np.argsort(rows, kind="stable")
        starts = np.searchsorted(rows[order], np.arange(size + 1))
        table = np.concatenate([starts, order]).astype(np.uint32)  # rows' first entries, then source rows
        csr, _ = out.device.from_numpy(table, True)
        n = lx.numel
        bx, sx = bind(gpu, x, lx, dtype.itemsize)
        bs, ss = bind(gpu, src, lsrc, dtype.itemsize)
        words = [n, len(lx.shape), dim, *lx.shape, lx.offset - sx, *lx.strides, lsrc.offset - ss, *lsrc.strides,
                 size + 1]
        run(gpu, ("index_add", str(dtype)), "wrrr", lambda: _index_add_source(dtype),
            [bind(gpu, out, None, 1)[0], bx, bind(gpu, csr, None, 1)[0], bs], pack(*words), S.units(dtype, n))

    return kernel


KERNELS = {"index_select": index_select, "gather": gather, "scatter": _scatter(False),
           "scatter_add": _scatter(True), "index_add": index_add}
