"""Elementwise kernels: unary, with parameters (affine, powf, elu...),
binary, comparisons, where and cast.

They are all one kernel, :func:`map_kernel`: one thread per output word (a
word of narrow elements, one element otherwise) computes a WGSL expression
of the inputs' values at each element's position. The layouts' dims are
merged first; when every input then reads its elements in order, the
pipeline of the "contiguous" shape class indexes them directly, and the
"strided" one walks the dims (zero strides broadcast, negative strides
reverse). The expression of an op, per kind (see shaders.py), is in the
tables below; the functions it calls live in ``wgsl/*.wgsl``.
"""

from __future__ import annotations

from candle_api.dtype import get_dtype, u8
from candle_api.layout import Layout, numel

from . import shaders as S
from .hostcheck import check_nonzero, check_nonnegative
from .launch import bind, contiguous_all, fits_whole, merge, narrow_rows, pack, row_chunks

#: The parameter block: n, rank, four scalar words, the shape, then per input its offset and strides.
SCALARS = 2
SHAPE = 6


def map_kernel(op: str, out, out_dtype, inputs: list, expr: str, libs: tuple, scalars=(0, 0, 0, 0)) -> None:
    """out (contiguous, out_dtype) = expr of the inputs [(storage, layout, dtype)],
    named a, b, c in expr; p0f/p1f (f32) and p0/p1 (raw words, p0l/p1l as i64)
    are the scalars. Tensors beyond the adapter's binding limit run in row chunks."""
    gpu = out.device.gpu
    mshape, mstrides = merge(inputs[0][1].shape, [lay.strides for _, lay, _ in inputs])
    contig = contiguous_all(mshape, mstrides)
    dtypes = tuple(str(dt) for _, _, dt in inputs)
    key = (op, str(out_dtype), dtypes, "contiguous" if contig else "strided")
    pipe = gpu.pipeline(key, "w" + "r" * len(inputs), lambda: _source(out_dtype, dtypes, expr, libs, contig))
    storages = [storage for storage, _, _ in inputs]
    if fits_whole(gpu, out, *storages):  # the common case: whole buffers, the layouts as they are
        n = numel(mshape)
        words = [n, len(mshape), *scalars, *mshape]
        for (_, lay, _), strides in zip(inputs, mstrides):
            words += [lay.offset, *strides]
        buffers = [(out.buffer, 0, 0), *((s.buffer, 0, 0) for s in storages)]
        gpu.dispatch(pipe, buffers, pack(*words), max(1, -(-S.units(out_dtype, n) // S.WG)))
        return
    row = numel(mshape[1:])
    chunks = row_chunks(gpu, mshape, [(st, dt.itemsize) for (_, _, dt), st in zip(inputs, mstrides)],
                        out_dtype.itemsize)
    for r0, r1 in chunks:
        n = (r1 - r0) * row
        shape = (r1 - r0, *mshape[1:]) if mshape else ()
        buffers = [bind(gpu, out, Layout((n,), (1,), r0 * row), out_dtype.itemsize)[0]]
        words = [n, len(shape), *scalars, *shape]
        for (storage, lay, dt), strides in zip(inputs, mstrides):
            part = narrow_rows(lay, mshape, strides, r0, r1)
            binding, shift = bind(gpu, storage, part, dt.itemsize)
            buffers.append(binding)
            words += [part.offset - shift, *strides]
        gpu.dispatch(pipe, buffers, pack(*words), max(1, -(-S.units(out_dtype, n) // S.WG)))


def _source(out_dtype, dtypes: tuple, expr: str, libs: tuple, contig: bool) -> str:
    names = "abc"
    loads = []
    for k, d in enumerate(dtypes):
        base = f"{SHAPE}u + rank + {k}u * (rank + 1u)"
        offset = f"P[{base}] + e" if contig else f"at(e, {base}, {SHAPE}u, rank)"
        loads.append(f"  let {names[k]} = x{k}_ld({offset});")
    readers = "".join(S.reader(f"x{k}", k + 1, d) for k, d in enumerate(dtypes))
    return f"""{S.library(*libs, *S.arith(out_dtype, *dtypes))}
{S.params(len(dtypes) + 1)}{S.AT}
{S.writer("o", 0, out_dtype, scattered=False)}{readers}
fn value(e: u32) -> {S.ctype(out_dtype)} {{
  let rank = P[1];
  let p0 = P[2]; let p1 = P[4];
  let p0f = bitcast<f32>(P[2]); let p1f = bitcast<f32>(P[4]);
  let p0l = vec2<u32>(P[2], P[3]); let p1l = vec2<u32>(P[4], P[5]);
{chr(10).join(loads)}
  return {expr};
}}
{S.ENTRY}  {S.store_units("o", out_dtype, "value", "P[0]")}
}}
"""


# ---- the ops, per kind --------------------------------------------------------------------------------
#: Unary ops of every dtype: f expression, then the integer one ({k}: the kind).
UNARY_ALL = {
    "abs": ("abs_f(a)", "abs_{k}(a)"), "neg": ("neg_f(a)", "neg_{k}(a)"), "sign": ("sign_f(a)", "sign_{k}(a)"),
    "ceil": ("ceil(a)", "a"), "floor": ("floor(a)", "a"), "round": ("round(a)", "a"), "trunc": ("trunc(a)", "a"),
    "sqr": ("a * a", "mul_{k}(a, a)"), "relu": ("max_f(a, 0.0)", "max_{k}(a, zero_{k}())"),
}
#: Unary ops of floats, from the math library (wgsl/math.wgsl).
UNARY_FLOAT = {name: f"{name}_f(a)" for name in (
    "exp expm1 log log1p sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf gelu gelu_erf sigmoid "
    "silu softplus").split()}
UNARY_FLOAT.update(recip="1.0 / a", sqrt="sqrt(a)", rsqrt="1.0 / sqrt(a)")

BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min", "pow": "pow",
          "rem": "rem", "fmod": "fmod"}
COMPARE = {"eq": "eq_{k}(a, b)", "ne": "!eq_{k}(a, b)", "lt": "lt_{k}(a, b)", "le": "le_{k}(a, b)",
           "gt": "lt_{k}(b, a)", "ge": "le_{k}(b, a)"}
PARAM_FLOAT = {"powf": "pow_f(a, p0f)", "elu": "select(p0f * expm1_f(a), a, a > 0.0)",
               "leaky_relu": "select(a * p0f, a, a > 0.0)", "clamp": "min_f(max_f(a, p0f), p1f)"}


def _libs(dtype, expr: str) -> tuple:
    """The math library when the expression calls into it."""
    return ("math",) if S.kind(dtype) == "f" and "_f(" in expr and not expr.startswith(("abs_f", "neg_f", "sign_f",
                                                                                          "max_f", "min_f")) else ()


def unary(op: str):
    def make(dtype):
        k = S.kind(dtype)
        if op in UNARY_ALL:
            expr = UNARY_ALL[op][0] if k == "f" else UNARY_ALL[op][1].format(k=k)
        else:
            expr = UNARY_FLOAT[op]
        libs = _libs(dtype, expr)

        def kernel(out, x, lx):
            map_kernel(op, out, dtype, [(x, lx, dtype)], expr, libs)

        return kernel

    return make


def binary(op: str):
    def make(dtype):
        k = S.kind(dtype)
        expr = f"{BINARY[op]}_{k}(a, b)"
        libs = ("math",) if op == "pow" and k == "f" else ()
        integer_division = k != "f" and op in ("div", "rem", "fmod")

        def kernel(out, a, la, b, lb):
            if integer_division:
                check_nonzero(b, lb, dtype)
            elif k != "f" and op == "pow" and k != "u":
                check_nonnegative(b, lb, dtype)
            map_kernel(op, out, dtype, [(a, la, dtype), (b, lb, dtype)], expr, libs)

        return kernel

    return make


def compare(op: str):
    def make(dtype):
        expr = f"select(0u, 1u, {COMPARE[op].format(k=S.kind(dtype))})"

        def kernel(out, a, la, b, lb):
            map_kernel(op, out, u8, [(a, la, dtype), (b, lb, dtype)], expr, ())

        return kernel

    return make


def param(op: str):
    def make(dtype):
        if S.kind(dtype) != "f":  # clamp on integers: the decomposition (its bounds may be fractional)
            return None
        expr = PARAM_FLOAT[op]
        libs = _libs(dtype, expr)

        def kernel(out, x, lx, p0, p1):
            map_kernel(op, out, dtype, [(x, lx, dtype)], expr, libs, (float(p0), 0, float(p1), 0))

        return kernel

    return make


def affine(dtype):
    k = S.kind(dtype)
    exact = {"f": "fma(a, p0f, p1f)", "u": "a * p0 + p1", "i": "bitcast<i32>(bitcast<u32>(a) * p0 + p1)",
             "l": "add_l(mul_l(a, p0l), p1l)"}[k]
    # a fractional (or infinite) parameter: through f32, saturating as casts do
    through_float = _float_to(dtype, f"fma({'l_to_f32(a)' if k == 'l' else 'f32(a)'}, p0f, p1f)")

    def kernel(out, x, lx, mul, add):
        if k == "f":
            map_kernel("affine", out, dtype, [(x, lx, dtype)], exact, (), (float(mul), 0, float(add), 0))
        elif float(mul).is_integer() and float(add).is_integer():
            m, a = int(mul) % (1 << 64), int(add) % (1 << 64)
            map_kernel("affine", out, dtype, [(x, lx, dtype)], exact, (),
                       (m & 0xFFFFFFFF, m >> 32, a & 0xFFFFFFFF, a >> 32))
        else:
            map_kernel("affine_float", out, dtype, [(x, lx, dtype)], through_float, ("cast",),
                       (float(mul), 0, float(add), 0))

    return kernel


def where(dtype):
    raw = get_dtype(S.raw_dtype(dtype))

    def kernel(out, c, lc, t, lt, f, lf):
        map_kernel("where", out, raw, [(c, lc, u8), (t, lt, raw), (f, lf, raw)], "select(c, b, a != 0u)", ())

    return kernel


# ---- casts -----------------------------------------------------------------------------------------------
_SATURATE = {"u8": "f2u_sat({v}, 255u)", "u32": "f2u_sat({v}, 0xffffffffu)", "i16": "f2i_sat({v}, -32768, 32767)",
             "i32": "f2i_sat({v}, -2147483647 - 1, 2147483647)", "i64": "l_of_f32({v})"}


def _float_to(dst, value: str) -> str:
    """An f32 value in dst's kind: saturating for integers (NaN to 0)."""
    return value if S.kind(dst) == "f" else _SATURATE[str(dst)].format(v=value)


def _cast_expr(src, dst) -> str:
    ks, kd = S.kind(src), S.kind(dst)
    if ks == "f":
        return _float_to(dst, "a")
    if kd == "f":
        return {"u": "f32(a)", "i": "f32(a)", "l": "l_to_f32(a)"}[ks]
    wide = {"u": "l_of_u(a)", "i": "l_of_i(a)", "l": "a"}[ks]  # through i64: wraps into narrower integers
    return {"u": f"{wide}.x", "i": f"bitcast<i32>({wide}.x)", "l": wide}[kd]


def cast(src):
    def kernel(out, x, lx, dst):
        dst = get_dtype(dst)
        expr = _cast_expr(src, dst)
        libs = ("cast",) if S.kind(src) == "f" else ("arith_l",)
        map_kernel("cast", out, dst, [(x, lx, src)], expr, libs)

    return kernel


KERNELS = {
    **{op: unary(op) for op in (*UNARY_ALL, *UNARY_FLOAT)},
    **{op: binary(op) for op in BINARY},
    **{op: compare(op) for op in COMPARE},
    **{op: param(op) for op in PARAM_FLOAT},
    "affine": affine,
    "where": where,
    "cast": cast,
}
