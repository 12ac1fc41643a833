"""Seeded random numbers on the device: Philox4x32-10 (Salmon et al., SC'11),
the counter-based generator of cuRAND and JAX. Element i of a draw is the
generator at counter ``offset + i`` under the key ``seed``, so a draw
depends only on (seed, offset + i), as the contract asks. Uniform values
take 24 random bits; normal ones come from Box-Muller on two uniforms."""

from __future__ import annotations

from . import shaders as S
from .launch import bind, pack, run


def fill(storage, dtype, n: int, dist: int, p0: float, p1: float, seed: int, offset: int) -> None:
    gpu = storage.device.gpu
    seed &= (1 << 64) - 1
    offset &= (1 << 64) - 1
    words = [n, seed & 0xFFFFFFFF, seed >> 32, offset & 0xFFFFFFFF, offset >> 32, float(p0), float(p1)]
    run(gpu, ("random", str(dtype), dist), "w", lambda: _source(dtype, dist), [bind(gpu, storage, None, 1)[0]],
        pack(*words), S.units(dtype, n))


def _source(dtype, dist: int) -> str:
    if dist == 0:  # uniform in [p0, p1): rounding must not reach p1
        value = ("let v = fma(p1 - p0, u1, p0);\n"
                 "  let below = select(select(0x80000001u, bitcast<u32>(p1) + 1u, p1 < 0.0), bitcast<u32>(p1) - 1u, "
                 "p1 > 0.0);\n"
                 "  return select(v, bitcast<f32>(below), v >= p1 && p1 > p0);")
    else:
        value = "return fma(sqrt(-2.0 * log_f(1.0 - u1)) * cos_f(6.28318530717958648 * u2), p1, p0);"
    return f"""{S.library("math", "philox")}
{S.params(1)}
{S.writer("o", 0, dtype, scattered=False)}
fn value(e: u32) -> f32 {{
  let lo = P[3] + e;
  let r = philox(vec4<u32>(lo, P[4] + select(0u, 1u, lo < e), 0u, 0u), vec2<u32>(P[1], P[2]));
  let u1 = f32(r.x >> 8u) * 5.9604644775390625e-8;
  let u2 = f32(r.y >> 8u) * 5.9604644775390625e-8;
  let p0 = bitcast<f32>(P[5]);
  let p1 = bitcast<f32>(P[6]);
  {value}
}}
{S.ENTRY}  {S.store_units("o", dtype, "value", "P[0]")}
}}
"""
