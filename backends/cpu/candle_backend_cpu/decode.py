"""A decoding step in one call: the plan of candle_models.decode_step's bound step as the C structs of
``cd_decode_step`` (kernels/decode.c), so that a token costs one ctypes call instead of ~13 a layer.

``bind(lib, alloc, spec)`` takes what the bound step holds (see :func:`bind`) and returns ``run(pos, x, cos,
sin, logits)``, or None where the plan is not one the C step serves (it then runs its kernels one by
one, as on any other device)."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_double, c_float, c_int32, c_int64, c_void_p

from candle_api.dtype import f32
from candle_api.quantized.ggml_types import GGML_TYPE_IDS

from .kernels.descriptors import lay, pack
from .kernels.fused import sdpa_desc
from .library import error

MAX_PARTS = 3  # CD_DECODE_MAX_PARTS
SDPA_DESC = 24  # CD_DECODE_SDPA_DESC


class Part(Structure):
    _fields_ = [("type", c_int32), ("packed", c_int32), ("n", c_int64), ("w", c_void_p)]


class Proj(Structure):
    _fields_ = [("nparts", c_int64), ("part", Part * MAX_PARTS)]


class Layer(Structure):
    _fields_ = [("norm", c_void_p * 2), ("eps", c_double * 2), ("qkv", Proj), ("o", Proj), ("gu", Proj),
                ("down", Proj), ("keys", c_void_p), ("values", c_void_p), ("window", c_int64), ("scale", c_double)]


class Plan(Structure):
    _fields_ = [("n_layers", c_int64), ("hidden", c_int64), ("heads", c_int64), ("kv_heads", c_int64),
                ("head_dim", c_int64), ("ffn", c_int64), ("capacity", c_int64), ("cache_head_stride", c_int64),
                ("interleaved", c_int32), ("norm_desc", c_void_p), ("rope_shape", c_void_p),
                ("rope_strides", c_void_p), ("sdpa_desc", c_void_p), ("layers", POINTER(Layer)),
                ("final_norm", c_void_p), ("final_eps", c_double), ("head", Proj), ("work", POINTER(c_float))]


def _proj(parts) -> Proj | None:
    """parts: (kernel name, blocks storage, layout, ggml type id, rows) each, as decode_step binds them."""
    if not 1 <= len(parts) <= MAX_PARTS:
        return None
    proj = Proj(nparts=len(parts))
    for i, (name, w, lw, qtype, n) in enumerate(parts):
        if not lw.contiguous or qtype not in GGML_TYPE_IDS:
            return None
        proj.part[i] = Part(qtype, int(name == "qmatmul_packed"), n, w.ptr + lw.offset)
    return proj


def _vector(w, lw) -> int | None:
    return w.ptr + lw.offset * 4 if lw.contiguous else None


def bind(lib, alloc, spec: dict):
    """``spec``: the sizes (hidden, heads, kv_heads, head_dim, ffn), ``interleaved`` (rope_i), ``layers``
    (each: two norms (weight tensor, eps), four projections' parts (qkv, o, gate/up, down), window,
    scale), ``head`` (parts), ``final_norm`` (weight, eps), the cache's ``keys`` and ``values`` (one f32
    tensor (1, kv_heads, capacity, head_dim) a layer), the layouts the step's kernels take:
    ``rope_in`` (q/k's heads in q/k/v) and ``q`` (the grouped queries). Returns run(pos, x_ptr, cos_ptr, sin_ptr, logits_ptr) or None."""
    keys, values = spec["keys"], spec["values"]
    h, kvh, d = spec["heads"], spec["kv_heads"], spec["head_dim"]
    shape = keys[0]._layout.shape
    if len(shape) != 4 or shape[0] != 1 or shape[1] != kvh or shape[3] != d:
        return None
    if any(not t._layout.contiguous or t._dtype is not f32 for t in (*keys, *values)):
        return None
    layers = (Layer * len(spec["layers"]))()
    for i, ((norms, projections, window, scale), k, v) in enumerate(zip(spec["layers"], keys, values)):
        projs = [_proj(p) for p in projections]
        norm_ptrs = [_vector(w._storage, w._layout) for w, _ in norms]
        if None in projs or None in norm_ptrs:
            return None
        layers[i] = Layer((c_void_p * 2)(*norm_ptrs), (c_double * 2)(*(e for _, e in norms)), *projs,
                          k._storage.ptr + k._layout.offset * 4, v._storage.ptr + v._layout.offset * 4,
                          window or 0, scale)
    head = _proj(spec["head"])
    (fw, feps) = spec["final_norm"]
    fptr = _vector(fw._storage, fw._layout)
    hidden, ffn = spec["hidden"], spec["ffn"]
    row = keys[0]._layout.narrow(2, 0, 1)  # the keys of one step: their strides, the key count set per step
    desc = sdpa_desc(spec["q"], row, row, None, False)
    if head is None or fptr is None or len(desc) != SDPA_DESC * 8:
        return None
    x = ((1, 1, hidden), (hidden, hidden, 1))
    rope = spec["rope_in"]
    # the packed descriptors, the structs and the storages they point into (the spec's) live as long as
    # the plan's closure
    keep = [lay(*x), pack(rope.shape), pack(rope.strides), desc]
    work = alloc(4 * (4 * hidden + 2 * (h + 2 * kvh) * d + h * d + 3 * ffn))  # cd_dplan's work
    plan = Plan(len(layers), hidden, h, kvh, d, ffn, shape[2], shape[2] * d, int(spec["interleaved"]),
                *(ctypes.cast(ctypes.c_char_p(b), c_void_p) for b in keep), layers, fptr, feps, head,
                ctypes.cast(work.ptr, POINTER(c_float)))
    fn, ref = lib.cd_decode_step, ctypes.addressof(plan)

    def run(pos: int, x_ptr: int, cos_ptr: int, sin_ptr: int, logits_ptr: int) -> None:
        if fn(ref, pos, x_ptr, cos_ptr, sin_ptr, logits_ptr):
            raise error()

    run.keep = (keep, layers, plan, work, spec)
    return run

