"""Reductions (sum, prod, max, min, argmax, argmin over any sorted dims) and
cumsum along one dim.

The input's dims are split into kept and reduced ones, each group merged
where it is contiguous. A long reduction (more than ``ROW`` elements) takes
a workgroup per output: its threads stride over the reduced elements, then
combine in workgroup memory; a short one takes a thread per output. Float
sums carry a compensation term (Neumaier's), so that a sum is as accurate
as one accumulated in double whatever the order the GPU adds in; max and
min propagate NaN; arg* keep the first extreme (or the first NaN).
"""

from __future__ import annotations

from candle_api.dtype import u32
from candle_api.layout import numel

from . import shaders as S
from .launch import bind, merge, pack, run

#: Reduced lengths above this take a workgroup per output.
ROW = 64


def _acc(op: str, k: str) -> str:
    """WGSL of the accumulator of op on kind k: struct Acc and red_init,
    red_add (one element, its reduced index r), red_merge, red_final."""
    ct = S.CTYPE[k]
    if op in ("argmax", "argmin"):
        lo = {"f": "-inf_f()", "u": "0u", "i": "bitcast<i32>(0x80000000u)", "l": "vec2<u32>(0u, 0x80000000u)"}[k]
        hi = {"f": "inf_f()", "u": "0xffffffffu", "i": "2147483647", "l": "vec2<u32>(0xffffffffu, 0x7fffffffu)"}[k]
        init, better = (lo, "lt_{k}(a.v, b.v)") if op == "argmax" else (hi, "lt_{k}(b.v, a.v)")
        nan = ("if (isnan_f(a.v) || isnan_f(b.v)) {\n"
               "    if (isnan_f(a.v) && (!isnan_f(b.v) || a.i < b.i)) { return a; }\n"
               "    return b;\n  }") if k == "f" else ""
        return f"""struct Acc {{ v: {ct}, i: u32 }}
fn red_init() -> Acc {{ return Acc({init}, 0xffffffffu); }}
fn red_merge(a: Acc, b: Acc) -> Acc {{
  {nan}
  if (eq_{k}(a.v, b.v)) {{
    if (a.i < b.i) {{ return a; }}
    return b;
  }}
  if ({better.format(k=k)}) {{ return b; }}
  return a;
}}
fn red_add(a: Acc, v: {ct}, r: u32) -> Acc {{ return red_merge(a, Acc(v, r)); }}
fn red_final(a: Acc) -> u32 {{ return a.i; }}
"""
    if op == "sum" and k == "f":  # Neumaier: s + c carries the rounding errors of the additions
        return """struct Acc { s: f32, c: f32 }
fn red_init() -> Acc { return Acc(0.0, 0.0); }
fn two_sum(a: Acc, b: f32, c: f32) -> Acc {
  let s = a.s + b;
  if (isnan_f(s) || isinf_f(s)) { return Acc(s, 0.0); }
  let e = select((b - s) + a.s, (a.s - s) + b, abs(a.s) >= abs(b));
  return Acc(s, a.c + c + e);
}
fn red_add(a: Acc, v: f32, r: u32) -> Acc { return two_sum(a, v, 0.0); }
fn red_merge(a: Acc, b: Acc) -> Acc { return two_sum(a, b.s, b.c); }
fn red_final(a: Acc) -> f32 { return select(a.s + a.c, a.s, isnan_f(a.s) || isinf_f(a.s)); }
"""
    fn, init = {"sum": ("add", "zero_{k}()"), "prod": ("mul", "one_{k}()"),
                "max": ("max", {"f": "-inf_f()", "u": "0u", "i": "bitcast<i32>(0x80000000u)",
                                "l": "vec2<u32>(0u, 0x80000000u)"}[k]),
                "min": ("min", {"f": "inf_f()", "u": "0xffffffffu", "i": "2147483647",
                                "l": "vec2<u32>(0xffffffffu, 0x7fffffffu)"}[k])}[op]
    return f"""struct Acc {{ v: {ct} }}
fn red_init() -> Acc {{ return Acc({init.format(k=k)}); }}
fn red_add(a: Acc, v: {ct}, r: u32) -> Acc {{ return Acc({fn}_{k}(a.v, v)); }}
fn red_merge(a: Acc, b: Acc) -> Acc {{ return Acc({fn}_{k}(a.v, b.v)); }}
fn red_final(a: Acc) -> {ct} {{ return a.v; }}
"""


def _source(op: str, dtype, out_dtype, per_group: bool) -> str:
    k = S.kind(dtype)
    head = f"""{S.library(*S.arith(dtype, out_dtype))}
{S.params(2)}{S.AT}
{S.writer("o", 0, out_dtype)}{S.reader("x", 1, dtype)}
{_acc(op, k)}
// P: K, R, kept rank, reduced rank, kept shape, reduced shape, offset, kept strides, 0, reduced strides
fn kept_at(o: u32) -> u32 {{ let kr = P[2]; let rr = P[3]; return at(o, 4u + kr + rr, 4u, kr); }}
fn red_at(r: u32) -> u32 {{ let kr = P[2]; let rr = P[3]; return at(r, 5u + 2u * kr + rr, 4u + kr, rr); }}
"""
    if not per_group:
        return head + f"""{S.ENTRY}  if (u >= P[0]) {{ return; }}
  let base = kept_at(u);
  var acc = red_init();
  for (var r = 0u; r < P[1]; r++) {{ acc = red_add(acc, x_ld(base + red_at(r)), r); }}
  o_st(u, red_final(acc));
}}
"""
    return head + f"""var<workgroup> sh: array<Acc, {S.WG}>;
@compute @workgroup_size({S.WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {{
  let o = wid.x + wid.y * nwg.x;
  var acc = red_init();
  if (o < P[0]) {{
    let base = kept_at(o);
    for (var r = t; r < P[1]; r += {S.WG}u) {{ acc = red_add(acc, x_ld(base + red_at(r)), r); }}
  }}
  // two levels of 16 (three barriers, not a tree's eight: barriers are what costs on lavapipe)
  sh[t] = acc;
  workgroupBarrier();
  if (t < 16u) {{
    var a = sh[t * 16u];
    for (var i = 1u; i < 16u; i++) {{ a = red_merge(a, sh[t * 16u + i]); }}
    sh[t * 16u] = a;
  }}
  workgroupBarrier();
  if (t == 0u && o < P[0]) {{
    var a = sh[0];
    for (var i = 1u; i < 16u; i++) {{ a = red_merge(a, sh[i * 16u]); }}
    o_st(o, red_final(a));
  }}
}}
"""


def _reduce(op: str):
    def make(dtype):
        out_dtype = u32 if op.startswith("arg") else dtype

        def kernel(out, x, lx, dims):
            gpu = out.device.gpu
            kept = [d for d in range(len(lx.shape)) if d not in dims]
            kshape, (ks,) = merge(tuple(lx.shape[d] for d in kept), [tuple(lx.strides[d] for d in kept)])
            # the reduced dims keep their order even where they merge: r is the flat index within dims
            rshape, (rs,) = merge(tuple(lx.shape[d] for d in dims), [tuple(lx.strides[d] for d in dims)])
            n_kept, n_red = numel(kshape), numel(rshape)
            bx, shift = bind(gpu, x, lx, dtype.itemsize)
            words = [n_kept, n_red, len(kshape), len(rshape), *kshape, *rshape, lx.offset - shift, *ks, 0, *rs]
            per_group = n_red > ROW
            key = ("reduce", op, str(dtype), per_group)
            pipe = gpu.pipeline(key, "wr", lambda: _source(op, dtype, out_dtype, per_group))
            buffers = [bind(gpu, out, None, 1)[0], bx]
            if per_group:
                gpu.dispatch(pipe, buffers, pack(*words), n_kept)
            else:
                gpu.dispatch(pipe, buffers, pack(*words), -(-n_kept // S.WG))

        return kernel

    return make


def _cumsum(dtype):
    k = S.kind(dtype)
    if k == "f":  # compensated, as the sums are
        step = ("let y = x_ld(xo) - c;\n    let t = s + y;\n    c = (t - s) - y;\n    s = t;\n"
                "    if (isnan_f(s) || isinf_f(s)) { c = 0.0; }")
    else:
        step = f"s = add_{k}(s, x_ld(xo));"

    def source():
        return f"""{S.library(*S.arith(dtype))}
{S.params(2)}{S.AT}
{S.writer("o", 0, dtype)}{S.reader("x", 1, dtype)}
// P: lines, n, rank, shape (of the other dims), x offset, x strides, 0, out strides, x step, out step
{S.ENTRY}  if (u >= P[0]) {{ return; }}
  let rank = P[2];
  var xo = at(u, 3u + rank, 3u, rank);
  var oo = at(u, 4u + 2u * rank, 3u, rank);
  let xs = P[5u + 3u * rank];
  let os = P[6u + 3u * rank];
  var s = zero_{k}();
  var c = zero_{k}();
  for (var j = 0u; j < P[1]; j++) {{
    {step}
    o_st(oo, s);
    xo += xs;
    oo += os;
  }}
}}
"""

    def kernel(out, x, lx, dim):
        gpu = out.device.gpu
        shape = lx.shape
        ostrides = [0] * len(shape)
        acc = 1
        for d in range(len(shape) - 1, -1, -1):
            ostrides[d] = acc
            acc *= shape[d]
        others = [d for d in range(len(shape)) if d != dim]
        oshape, (xs, os_) = merge(tuple(shape[d] for d in others), [tuple(lx.strides[d] for d in others),
                                                                     tuple(ostrides[d] for d in others)])
        lines = numel(oshape)
        bx, shift = bind(gpu, x, lx, dtype.itemsize)
        words = [lines, shape[dim], len(oshape), *oshape, lx.offset - shift, *xs, 0, *os_, lx.strides[dim],
                 ostrides[dim]]
        run(gpu, ("cumsum", str(dtype)), "wr", source, [bind(gpu, out, None, 1)[0], bx], pack(*words), lines)

    return kernel


KERNELS = {**{op: _reduce(op) for op in ("sum", "prod", "max", "min", "argmax", "argmin")}, "cumsum": _cumsum}
