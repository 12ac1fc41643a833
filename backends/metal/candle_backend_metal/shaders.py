"""Assembling WGSL: the shader library (``wgsl/*.wgsl``), the accessors of
each tensor binding, and the strided indexing every kernel shares.

Every buffer is bound as ``array<u32>``: WGSL has no 8-, 16- or 64-bit types
in storage, so each dtype is read and written through bit operations, and
computed in one of four *kinds*:

- ``f``: f32 (for f32, f16 and bf16: half floats are converted on the bits,
  so subnormals, infinities and NaN survive, and rounded once to nearest
  even when stored);
- ``u``: u32 (u8, u32); ``i``: i32 (i16, i32): narrower integers wrap when
  stored, as two's complement arithmetic does;
- ``l``: i64 as a ``vec2<u32>`` (low word, high word): exact 64-bit
  arithmetic emulated on 32-bit words (``wgsl/arith_l.wgsl``).

f64 is not held (WGSL has no f64). A pipeline is compiled once per kernel,
dtype and shape class (see gpu.Gpu.pipeline); these functions write its source.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

#: dtype name -> (kind, bits)
DTYPES = {"f32": ("f", 32), "f16": ("f", 16), "bf16": ("f", 16), "u8": ("u", 8), "u32": ("u", 32),
          "i16": ("i", 16), "i32": ("i", 32), "i64": ("l", 64)}
#: kind -> the WGSL type values are computed in
CTYPE = {"f": "f32", "u": "u32", "i": "i32", "l": "vec2<u32>"}
WG = 256  # the workgroup size of one-dimensional kernels

_DIR = Path(__file__).parent / "wgsl"


def kind(dtype) -> str:
    return DTYPES[str(dtype)][0]


def bits(dtype) -> int:
    return DTYPES[str(dtype)][1]


def ctype(dtype) -> str:
    return CTYPE[kind(dtype)]


@functools.lru_cache(maxsize=None)
def _library(name: str) -> tuple[tuple[str, ...], str]:
    """(dependencies, text) of wgsl/<name>.wgsl; its first line may be ``// needs: a b``."""
    text = (_DIR / f"{name}.wgsl").read_text()
    m = re.match(r"// needs: ([\w ]+)\n", text)
    return (tuple(m.group(1).split()) if m else ()), text


def library(*names: str) -> str:
    """The named library files and everything they need, each once, dependencies first."""
    order: list[str] = []

    def visit(name):
        if name in order:
            return
        for dep in _library(name)[0]:
            visit(dep)
        order.append(name)

    for name in names:
        visit(name)
    return "\n".join(_library(n)[1] for n in order)


def arith(*dtypes) -> tuple[str, ...]:
    """The library parts the arithmetic of these dtypes needs."""
    return tuple(sorted({"arith_" + kind(d) for d in dtypes}))


# ---- bindings -------------------------------------------------------------------------------------
def _half(name: str) -> str:
    return f"(({name}[i >> 1u] >> ((i & 1u) << 4u)) & 0xffffu)"


def load_expr(name: str, dtype) -> str:
    """The WGSL expression of element i of binding name, as its kind's type."""
    d = str(dtype)
    return {
        "f32": f"bitcast<f32>({name}[i])",
        "f16": f"f16_to_f32({_half(name)})",
        "bf16": f"bitcast<f32>({_half(name)} << 16u)",
        "u8": f"(({name}[i >> 2u] >> ((i & 3u) << 3u)) & 0xffu)",
        "u32": f"{name}[i]",
        "i16": f"(bitcast<i32>({_half(name)} << 16u) >> 16u)",
        "i32": f"bitcast<i32>({name}[i])",
        "i64": f"vec2<u32>({name}[2u * i], {name}[2u * i + 1u])",
    }[d]


def pack_expr(dtype, v: str) -> str:
    """The bits (u32, in the low bits for narrow dtypes) of the value v of dtype's kind."""
    return {
        "f32": f"bitcast<u32>({v})", "f16": f"f32_to_f16({v})", "bf16": f"f32_to_bf16({v})",
        "u8": f"({v} & 0xffu)", "u32": v, "i16": f"(bitcast<u32>({v}) & 0xffffu)", "i32": f"bitcast<u32>({v})",
    }[str(dtype)]


def reader(name: str, binding: int, dtype) -> str:
    """A read-only tensor binding and its loader ``name_ld(i)`` (i an element index)."""
    return (f"@group(0) @binding({binding}) var<storage, read> {name}: array<u32>;\n"
            f"fn {name}_ld(i: u32) -> {ctype(dtype)} {{ return {load_expr(name, dtype)}; }}\n")


def writer(name: str, binding: int, dtype, scattered: bool = True) -> str:
    """A written tensor binding and ``name_st(i, v)``, which stores element i.

    Elements narrower than a word share it with their neighbours: scattered
    stores of them go through atomics (each clears and sets only its own
    bits), so any thread may store any element. With ``scattered=False`` the
    kernel stores whole words instead (``name_word``, see :func:`store_units`)."""
    b, d, ct = bits(dtype), str(dtype), ctype(dtype)
    if b == 64:
        return (f"@group(0) @binding({binding}) var<storage, read_write> {name}: array<u32>;\n"
                f"fn {name}_st(i: u32, v: {ct}) {{ {name}[2u * i] = v.x; {name}[2u * i + 1u] = v.y; }}\n")
    decl = f"@group(0) @binding({binding}) var<storage, read_write> {name}: array<u32>;\n"
    if b == 32:
        return decl + f"fn {name}_st(i: u32, v: {ct}) {{ {name}[i] = {pack_expr(d, 'v')}; }}\n"
    if not scattered:  # whole words only: see store_units
        return decl
    per, mask = 32 // b, (1 << b) - 1
    return (f"@group(0) @binding({binding}) var<storage, read_write> {name}: array<atomic<u32>>;\n"
            f"fn {name}_st(i: u32, v: {ct}) {{\n"
            f"  let s = (i % {per}u) * {b}u;\n"
            f"  atomicAnd(&{name}[i / {per}u], ~({mask}u << s));\n"
            f"  atomicOr(&{name}[i / {per}u], {pack_expr(d, 'v')} << s);\n}}\n")


def store_units(name: str, dtype, value: str, count: str) -> str:
    """Statements storing output unit u of a contiguous output (one thread
    per unit): a whole word of narrow elements, one element otherwise. value
    names a function of the element index; count is the element count."""
    b = bits(dtype)
    if b >= 32:
        return f"if (u < {count}) {{ {name}_st(u, {value}(u)); }}"
    per = 32 // b
    return (f"var word = 0u;\n"
            f"  for (var j = 0u; j < {per}u; j++) {{\n"
            f"    let e = u * {per}u + j;\n"
            f"    if (e < {count}) {{ word |= {pack_expr(dtype, f'{value}(e)')} << (j * {b}u); }}\n"
            f"  }}\n"
            f"  {name}[u] = word;")


def units(dtype, n: int) -> int:
    """How many threads store n contiguous elements with store_units."""
    b = bits(dtype)
    return n if b >= 32 else -(-n // (32 // b))


# ---- raw element moves (by width only: copies, index ops, where) -----------------------------------
RAW = {8: "u8", 16: "i16", 32: "u32", 64: "i64"}


def raw_dtype(dtype) -> str:
    """The dtype whose bit pattern moves an element of dtype unchanged (loads of
    u8/i16/u32/i64 are exact on the bits)."""
    return RAW[bits(dtype)]


# ---- parameters and indexing -------------------------------------------------------------------------
def params(binding: int) -> str:
    """The parameter block: the last binding, an array of u32 (shapes,
    strides, offsets, scalars as bits)."""
    return f"@group(0) @binding({binding}) var<storage, read> P: array<u32>;\n"


#: ``at(e, base, sbase, rank)``: the element offset of flat index e in a strided
#: layout (shape at P[sbase..], offset then strides at P[base..]). Strides are
#: two's complement in u32: negative strides wrap into the right offset.
AT = """
fn at(e: u32, base: u32, sbase: u32, rank: u32) -> u32 {
  var r = e;
  var o = P[base];
  for (var d = rank; d > 0u; d--) {
    let s = P[sbase + d - 1u];
    o += (r % s) * P[base + d];
    r /= s;
  }
  return o;
}
"""

#: The entry point of a one-dimensional kernel: u is the thread's flat index
#: (the dispatch folds groups beyond the per-dimension limit into y).
ENTRY = f"""
@compute @workgroup_size({WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
  let u = gid.x + gid.y * nwg.x * {WG}u;
"""
