"""The kernel table of the cpu device: ``{(op, dtype): kernel}``.

Each kernel is a closure over one C function (looked up once, here), following
the calling conventions of docs/backend-contract.md. Contiguous inputs call the
contiguous C entry point with four arguments; other layouts pass a packed
int64 descriptor ([ndim, shape, strides...]) to the strided entry point.
"""

from __future__ import annotations

import struct

from candle_api.dtype import ALL_DTYPES, FLOAT_DTYPES, i64
from candle_api.layout import contiguous_strides

from . import library
from .library import BINARY_FN, PARAM_FN, UNARY_FN

_STRUCTS: dict[int, struct.Struct] = {}


def pack(values) -> bytes:
    """values as a packed int64 array (the C side's const int64_t *)."""
    n = len(values)
    s = _STRUCTS.get(n)
    if s is None:
        s = _STRUCTS[n] = struct.Struct(f"{n}q")
    return s.pack(*values)


def lay(shape, *stride_rows) -> bytes:
    """[ndim, shape, strides of each operand]."""
    vals = [len(shape), *shape]
    for row in stride_rows:
        vals += row
    return pack(vals)


def build_kernels() -> dict:
    lib = library.load()
    error = library.error
    kernels: dict = {}

    def add(op, dtype, kernel):
        kernels[(op, dtype.name)] = kernel

    # ---- unary, param, binary, comparisons ----------------------------------------------
    def unary_kernel(code, dt, fn):
        isz, strided = dt.itemsize, lib.cd_unary_strided

        def kernel(out, x, lx):
            if lx.contiguous:
                rc = fn(lx.numel, x.ptr + lx.offset * isz, out.ptr)
            else:
                rc = strided(code, dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr)
            if rc:
                raise error()

        return kernel

    def param_kernel(code, dt, fn):
        isz, strided = dt.itemsize, lib.cd_param_strided

        def kernel(out, x, lx, p0, p1):
            if lx.contiguous:
                rc = fn(lx.numel, x.ptr + lx.offset * isz, out.ptr, p0, p1)
            else:
                rc = strided(code, dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr, p0, p1)
            if rc:
                raise error()

        return kernel

    def binary_kernel(code, dt, fn, strided):
        isz = dt.itemsize

        def kernel(out, a, la, b, lb):
            if la.contiguous and lb.contiguous:
                rc = fn(la.numel, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr)
            else:
                rc = strided(code, dt.code, lay(la.shape, la.strides, lb.strides),
                             a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr)
            if rc:
                raise error()

        return kernel

    families = (
        ("unary", lib.cd_unary_kernel, UNARY_FN, lambda c, d, f: unary_kernel(c, d, f)),
        ("param", lib.cd_param_kernel, PARAM_FN, lambda c, d, f: param_kernel(c, d, f)),
        ("binary", lib.cd_binary_kernel, BINARY_FN, lambda c, d, f: binary_kernel(c, d, f, lib.cd_binary_strided)),
        ("cmp", lib.cd_cmp_kernel, BINARY_FN, lambda c, d, f: binary_kernel(c, d, f, lib.cd_cmp_strided)),
    )
    for family, lookup, fntype, make in families:
        for code, op in enumerate(library.op_names(family)):
            for dt in ALL_DTYPES:
                address = lookup(code, dt.code)
                if address:
                    add(op, dt, make(code, dt, fntype(address)))

    # ---- casts, where, copy, fill ----------------------------------------------------------
    def cast_kernel(src):
        isz = src.itemsize
        contig = {dst: UNARY_FN(lib.cd_cast_kernel(src.code, dst.code)) for dst in ALL_DTYPES}

        def kernel(out, x, lx, dst):
            if lx.contiguous:
                rc = contig[dst](lx.numel, x.ptr + lx.offset * isz, out.ptr)
            else:
                rc = lib.cd_cast_strided(src.code, dst.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr)
            if rc:
                raise error()

        return kernel

    def where_kernel(dt):
        isz = dt.itemsize

        def kernel(out, c, lc, t, lt, f, lf):
            if lib.cd_where(dt.code, lay(lc.shape, lc.strides, lt.strides, lf.strides), c.ptr + lc.offset,
                            t.ptr + lt.offset * isz, f.ptr + lf.offset * isz, out.ptr):
                raise error()

        return kernel

    def copy_kernel(dt):
        isz = dt.itemsize

        def kernel(dst, ld, src, ls):
            if lib.cd_copy(isz, lay(ls.shape, ls.strides, ld.strides), src.ptr + ls.offset * isz,
                           dst.ptr + ld.offset * isz):
                raise error()

        return kernel

    def fill_kernel(dt):
        isz = dt.itemsize

        def kernel(dst, ld, value: bytes):
            if lib.cd_fill(isz, lay(ld.shape, ld.strides), dst.ptr + ld.offset * isz, value):
                raise error()

        return kernel

    for dt in ALL_DTYPES:
        add("cast", dt, cast_kernel(dt))
        add("where", dt, where_kernel(dt))
        add("copy", dt, copy_kernel(dt))
        add("fill", dt, fill_kernel(dt))

    # ---- reductions ------------------------------------------------------------------------
    def reduce_kernel(code, dt):
        isz = dt.itemsize

        def kernel(out, x, lx, dims):
            keep = [d for d in range(len(lx.shape)) if d not in dims]
            desc = pack([len(keep), *(lx.shape[d] for d in keep), *(lx.strides[d] for d in keep),
                         len(dims), *(lx.shape[d] for d in dims), *(lx.strides[d] for d in dims)])
            if lib.cd_reduce(code, dt.code, desc, x.ptr + lx.offset * isz, out.ptr):
                raise error()

        return kernel

    def cumsum_kernel(dt):
        isz = dt.itemsize

        def kernel(out, x, lx, dim):
            desc = pack([len(lx.shape), *lx.shape, *lx.strides, dim])
            if lib.cd_cumsum(dt.code, desc, x.ptr + lx.offset * isz, out.ptr):
                raise error()

        return kernel

    for code, op in enumerate(library.op_names("reduce")):
        for dt in ALL_DTYPES:
            add(op, dt, reduce_kernel(code, dt))
    for dt in ALL_DTYPES:
        add("cumsum", dt, cumsum_kernel(dt))

    # ---- matmul ------------------------------------------------------------------------------
    def matmul_kernel(dt):
        isz = dt.itemsize

        def kernel(out, a, la, b, lb):
            *batch, m, k = la.shape
            n = lb.shape[-1]
            desc = pack([m, n, k, la.strides[-2], la.strides[-1], lb.strides[-2], lb.strides[-1],
                         len(batch), *batch, *la.strides[:-2], *lb.strides[:-2]])
            if lib.cd_matmul(dt.code, desc, a.ptr + la.offset * isz, b.ptr + lb.offset * isz, out.ptr):
                raise error()

        return kernel

    for dt in ALL_DTYPES:
        add("matmul", dt, matmul_kernel(dt))

    def copy_to_contiguous(dt):
        """out <- x, out contiguous: the starting values of the in-place index kernels."""
        isz = dt.itemsize

        def copy(out, x, lx):
            if lx.numel and lib.cd_copy(isz, lay(lx.shape, lx.strides, contiguous_strides(lx.shape)),
                                        x.ptr + lx.offset * isz, out.ptr):
                raise error()

        return copy

    # ---- indexing ----------------------------------------------------------------------------
    def index_select_kernel(dt):
        isz = dt.itemsize

        def kernel(out, x, lx, ids, lids, id_dtype, dim):
            desc = pack([len(lx.shape), *lx.shape, *lx.strides, dim])
            if lib.cd_index_select(dt.code, id_dtype.code, desc, x.ptr + lx.offset * isz,
                                   ids.ptr + lids.offset * id_dtype.itemsize, lids.numel, out.ptr):
                raise error()

        return kernel

    def gather_kernel(dt):
        isz = dt.itemsize

        def kernel(out, x, lx, ids, lids, id_dtype, dim):
            desc = pack([len(lids.shape), *lids.shape, *lx.strides, *lids.strides, dim, lx.shape[dim]])
            if lib.cd_gather(dt.code, id_dtype.code, desc, x.ptr + lx.offset * isz,
                             ids.ptr + lids.offset * id_dtype.itemsize, out.ptr):
                raise error()

        return kernel

    def scatter_kernel(dt, accumulate):
        isz = dt.itemsize
        copy = copy_to_contiguous(dt)

        def kernel(out, x, lx, ids, lids, id_dtype, src, ls, dim):
            copy(out, x, lx)
            strides = contiguous_strides(lx.shape)
            desc = pack([len(lids.shape), *lids.shape, *ls.strides, *lids.strides, *strides, dim, lx.shape[dim]])
            if lib.cd_scatter(dt.code, id_dtype.code, desc, ids.ptr + lids.offset * id_dtype.itemsize,
                              src.ptr + ls.offset * isz, out.ptr, accumulate):
                raise error()

        return kernel

    def index_add_kernel(dt):
        isz = dt.itemsize
        copy = copy_to_contiguous(dt)

        def kernel(out, x, lx, ids, lids, id_dtype, src, ls, dim):
            copy(out, x, lx)
            desc = pack([len(ls.shape), *ls.shape, *ls.strides, dim, lx.shape[dim]])
            if lib.cd_index_add(dt.code, id_dtype.code, desc, ids.ptr + lids.offset * id_dtype.itemsize,
                                src.ptr + ls.offset * isz, out.ptr):
                raise error()

        return kernel

    for dt in ALL_DTYPES:
        add("index_select", dt, index_select_kernel(dt))
        add("gather", dt, gather_kernel(dt))
        add("scatter", dt, scatter_kernel(dt, 0))
        add("scatter_add", dt, scatter_kernel(dt, 1))
        add("index_add", dt, index_add_kernel(dt))

    # ---- convolution, pooling, resampling ---------------------------------------------------
    def conv_kernel(dt, fn):
        isz = dt.itemsize

        def kernel(out, x, lx, w, lw, params):
            if fn(dt.code, pack(params), pack([*lx.strides, *lw.strides]), x.ptr + lx.offset * isz,
                  w.ptr + lw.offset * isz, out.ptr):
                raise error()

        return kernel

    def pool_kernel(dt, mode):
        isz = dt.itemsize

        def kernel(out, x, lx, params):
            if lib.cd_pool2d(dt.code, mode, pack(params), pack(lx.strides), x.ptr + lx.offset * isz, out.ptr):
                raise error()

        return kernel

    def pool_backward_kernel(dt, mode):
        isz = dt.itemsize

        def kernel(gx, x, lx, g, lg, params):
            if lib.cd_pool2d_backward(dt.code, mode, pack(params), pack(lx.strides), x.ptr + lx.offset * isz,
                                      g.ptr + lg.offset * isz, gx.ptr):
                raise error()

        return kernel

    def upsample_kernel(dt, bilinear):
        isz = dt.itemsize

        def kernel(out, x, lx, out_h, out_w, align_corners):
            mode = (2 if align_corners else 1) if bilinear else 0
            if lib.cd_upsample2d(dt.code, mode, pack([*lx.shape, out_h, out_w]), pack(lx.strides),
                                 x.ptr + lx.offset * isz, out.ptr):
                raise error()

        return kernel

    for dt in FLOAT_DTYPES:
        add("conv2d", dt, conv_kernel(dt, lib.cd_conv2d))
        add("conv_transpose2d", dt, conv_kernel(dt, lib.cd_conv_transpose2d))
        add("conv2d_backward_weight", dt, conv_kernel(dt, lib.cd_conv2d_backward_weight))
        add("max_pool2d_backward", dt, pool_backward_kernel(dt, 0))
        add("avg_pool2d_backward", dt, pool_backward_kernel(dt, 1))
        add("upsample_bilinear2d", dt, upsample_kernel(dt, True))
    for dt in ALL_DTYPES:
        if dt is not i64:  # the C kernels go through double, exact for every other dtype
            add("max_pool2d", dt, pool_kernel(dt, 0))
            add("avg_pool2d", dt, pool_kernel(dt, 1))
            add("upsample_nearest2d", dt, upsample_kernel(dt, False))

    # ---- fused -----------------------------------------------------------------------------------
    def softmax_kernel(dt, log):
        isz = dt.itemsize

        def kernel(out, x, lx):
            if lib.cd_softmax_last(dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz, out.ptr, log):
                raise error()

        return kernel

    def norm_kernel(dt, rms):
        isz = dt.itemsize

        def kernel(out, x, lx, w, lw, *rest):
            if rms:
                b_ptr, eps = None, rest[0]
            else:
                b, lb, eps = rest
                b_ptr = b.ptr + lb.offset * isz if b is not None else None
            if lib.cd_norm_last(dt.code, lay(lx.shape, lx.strides), x.ptr + lx.offset * isz,
                                w.ptr + lw.offset * isz, b_ptr, out.ptr, eps, rms):
                raise error()

        return kernel

    def rope_kernel(dt, interleaved):
        isz = dt.itemsize

        def kernel(out, x, lx, cos, lcos, sin, lsin):
            if lib.cd_rope(dt.code, pack(lx.shape), pack(lx.strides), x.ptr + lx.offset * isz,
                           cos.ptr + lcos.offset * isz, sin.ptr + lsin.offset * isz, out.ptr, interleaved,
                           int(len(lcos.shape) == 3)):
                raise error()

        return kernel

    def sdpa_kernel(dt):
        isz = dt.itemsize

        def kernel(out, q, lq, k, lk, v, lv, mask, lm, mask_dtype, causal, scale):
            *batch, n_q, e = lq.shape
            n_k, e_v = lk.shape[-2], lv.shape[-1]
            rows = [*lq.strides, *lk.strides, *lv.strides, *(lm.strides if mask is not None else [0] * len(lq.shape))]
            desc = pack([len(batch), n_q, n_k, e, e_v, int(causal), *batch, *rows])
            m_ptr = mask.ptr + lm.offset * mask_dtype.itemsize if mask is not None else None
            if lib.cd_sdpa(dt.code, desc, q.ptr + lq.offset * isz, k.ptr + lk.offset * isz, v.ptr + lv.offset * isz,
                           m_ptr, mask_dtype.code if mask is not None else -1, out.ptr, scale):
                raise error()

        return kernel

    # ---- fused optimizer steps (in place; the core passes contiguous buffers) -----------
    def adamw_kernel(dt):
        isz = dt.itemsize

        def kernel(p, lp, g, lg, m, lm, v, lv, lr, beta1, beta2, eps, weight_decay, step):
            hyper = struct.pack("7d", lr, beta1, beta2, eps, weight_decay, 1 - beta1**step, 1 - beta2**step)
            if lib.cd_adamw(dt.code, lp.numel, p.ptr + lp.offset * isz, g.ptr + lg.offset * isz,
                            m.ptr + lm.offset * isz, v.ptr + lv.offset * isz, hyper):
                raise error()

        return kernel

    def sgd_kernel(dt):
        isz = dt.itemsize

        def kernel(p, lp, g, lg, buf, lbuf, lr, weight_decay, momentum, dampening, nesterov, first):
            hyper = struct.pack("4d", lr, weight_decay, momentum, dampening)
            buf_ptr = buf.ptr + lbuf.offset * isz if buf is not None else None
            if lib.cd_sgd(dt.code, lp.numel, p.ptr + lp.offset * isz, g.ptr + lg.offset * isz, buf_ptr, hyper,
                          int(first), int(nesterov)):
                raise error()

        return kernel

    for dt in FLOAT_DTYPES:
        if dt.name in ("f32", "f64"):
            add("adamw_step", dt, adamw_kernel(dt))
            add("sgd_step", dt, sgd_kernel(dt))
        add("sdpa", dt, sdpa_kernel(dt))
        add("softmax_last", dt, softmax_kernel(dt, 0))
        add("log_softmax_last", dt, softmax_kernel(dt, 1))
        add("layer_norm", dt, norm_kernel(dt, 0))
        add("rms_norm", dt, norm_kernel(dt, 1))
        add("rope", dt, rope_kernel(dt, 0))
        add("rope_i", dt, rope_kernel(dt, 1))
    return kernels
