"""The kernel table: every kernel a backend may provide, on one screen.

Each row names a kernel, its family, how the core calls it, the dtypes it is
keyed by, whether a backend must provide it, and, for an optional row, what
runs on a device without it. The registry refuses a kernel that is neither a
row here nor a custom op defined through the ``candle_api_custom_ops`` hook;
docs/backend-contract.md is generated from this table
(``python -m candle_api.contract.docs``).

Conventions shared by every row: the core allocates every output (contiguous)
before the call and calls a kernel only when that output is not empty. ``x,
lx`` is an input storage and its :class:`~candle_api.layout.Layout` (any
strides, zero strides for broadcast dims, an element offset); ``out`` is the
output storage. A kernel raises :class:`~candle_api.errors.KernelError` (or
``IndexOutOfRangeError`` for an index outside its dim, its message containing
"out of range for a dimension"); it must be thread-safe, and its result must
not depend on the number of threads.

Out aliasing an input. A row's ``alias`` names the inputs its ``out`` may be:
the core passes an input's own storage as ``out`` (an in-place op, ``x.add_(y)``
or ``x.exp_()``, written without a second pass) only when that input's
layout is out's (contiguous from the storage's first element, every element
read at the position it is written), the other inputs do not share the
storage, and the kernel set that serves the row declares it takes this
(``KernelSet.aliasing``). Such a kernel must give the result it gives with a
separate out. Other rows never see out in an input's memory.

The table is versioned. ``CONTRACT_VERSION`` grows when rows are added; a row
records the version that added it (``since``), and a backend declares the
version it implements (``BackendSpec.contract_version``). On a backend older
than a row, the row runs as its decomposition when it has one, and is
reported unsupported (naming both versions) when it has none.

bool (one byte, 0 or 1) is in the rows that move, select, compare or reduce
truth values. Its kernels are u8's on the same bytes: where a backend
registers no bool kernel for such a row, the core's kernel table serves bool
with the backend's u8 kernel (so every backend holding u8 holds bool), and the
core never passes bool as a dtype argument (a cast to bool is a comparison
with 0; a bool mask reaches sdpa as u8). A backend may register bool kernels
of its own for these rows.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The newest contract version this candle-api knows.
CONTRACT_VERSION = 3

ALL = ("u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64")
WITH_BOOL = ALL + ("bool",)  # rows whose u8 kernel serves bool too (see above)
FLOATS = ("bf16", "f16", "f32", "f64")
NO_I64 = tuple(d for d in ALL if d != "i64")  # kernels that go through double, exact below 2^53
F32_F64 = ("f32", "f64")

#: How far a float kernel's result may be from the exact one, (rtol, atol) by
#: dtype: f32/f64 kernels round correctly or nearly so; f16 and bf16 compute in
#: f32 and round once, so one unit in the last place. Integer results are exact.
#: The conformance suite checks against these (scaled for long accumulations).
TOLERANCES = {"f64": (1e-12, 1e-12), "f32": (3e-6, 1e-6), "f16": (2e-3, 1e-3), "bf16": (1.6e-2, 1e-2)}


@dataclass(frozen=True)
class KernelRow:
    """One kernel of the contract."""

    name: str
    family: str
    call: str                # how the core calls it: "k(out, x, lx)"
    dtypes: tuple            # the dtypes it is keyed by (the first input's unless the notes say)
    required: bool = True    # a backend implementing the row's version must provide it for these dtypes
    without: str = ""        # optional rows: what runs on a device without the kernel
    since: int = 1           # the contract version that added the row
    notes: str = ""
    alias: tuple = ()        # the inputs out may be (see "out aliasing an input" above)

    @property
    def args(self) -> tuple:
        """The call's argument names: ("out", "x", "lx")."""
        inner = self.call[self.call.index("(") + 1 : self.call.rindex(")")]
        return tuple(a.strip() for a in inner.split(",") if a.strip())


def _rows(family, call, dtypes, names, **kw) -> list:
    return [KernelRow(n, family, call, dtypes, **kw) for n in names.split()]


#: The activations a product with packed weights applies to its result (the ``act``
#: argument of the panels rows), with the meaning of their ``alpha`` and ``beta``.
ACTIVATIONS = {
    "none": "x",
    "relu": "maximum(x, 0)",
    "leaky_relu": "x if x > 0 else alpha * x",
    "clip": "minimum(maximum(x, alpha), beta)",
    "sigmoid": "1 / (1 + exp(-x))",
    "hard_sigmoid": "clip(alpha * x + beta, 0, 1)",
    "hard_swish": "x * clip(x / 6 + 1 / 2, 0, 1)",
    "tanh": "tanh(x)",
    "gelu_erf": "x / 2 * erfc(-x / sqrt(2))",
    "silu": "x * sigmoid(x)",
}

UNARY = "k(out, x, lx)"
PARAM = "k(out, x, lx, p0, p1)"
BINARY = "k(out, a, la, b, lb)"
ON_X = dict(alias=("x",))  # elementwise rows whose out may be x, or a or b (see the module doc)
ON_AB = dict(alias=("a", "b"))

ROWS: tuple = tuple([
    # ---- elementwise --------------------------------------------------------------------------
    *_rows("unary", UNARY, ALL, "abs neg sign ceil floor round trunc", **ON_X),
    *_rows("unary", UNARY, FLOATS, "recip sqrt exp expm1 log log1p sin cos tan asin acos atan sinh cosh tanh "
                                   "asinh acosh atanh erf", **ON_X),
    # Composites that lose accuracy in the tail when built from the rows above in a float's own precision
    # (1 + erf(x), the rounding of x^3 in the exponent): every backend computes them, as in Candle.
    KernelRow("gelu", "unary", UNARY, FLOATS,
              notes="the tanh approximation, x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))", **ON_X),
    KernelRow("gelu_erf", "unary", UNARY, FLOATS, notes="x / 2 * erfc(-x / sqrt(2))", **ON_X),
    KernelRow("sqr", "unary", UNARY, ALL, False, "x * x", **ON_X),
    KernelRow("relu", "unary", UNARY, ALL, False, "maximum(x, 0)", **ON_X),
    KernelRow("rsqrt", "unary", UNARY, FLOATS, False, "recip(sqrt(x))", **ON_X),
    KernelRow("sigmoid", "unary", UNARY, FLOATS, False, "recip(exp(-x) + 1)", **ON_X),
    KernelRow("silu", "unary", UNARY, FLOATS, False, "x * sigmoid(x)", **ON_X),
    KernelRow("softplus", "unary", UNARY, FLOATS, False, "where(x > 20, x, maximum(x, 0) + log1p(exp(-abs(x))))",
              notes="log(1 + exp(x)), x itself above 20", **ON_X),
    KernelRow("affine", "param", PARAM, ALL, notes="x * p0 + p1 (integers: computed exactly, then wrapped)", **ON_X),
    KernelRow("powf", "param", PARAM, FLOATS, notes="x ** p0", **ON_X),
    KernelRow("elu", "param", PARAM, FLOATS, notes="x if x > 0 else p0 * (exp(x) - 1)", **ON_X),
    KernelRow("leaky_relu", "param", PARAM, FLOATS, False, "where(x > 0, x, x * p0)", **ON_X),
    KernelRow("clamp", "param", PARAM, ALL, False, "minimum(maximum(x, p0), p1) with scalars",
              notes="p0 <= x <= p1 (either bound may be infinite); NaN propagates", **ON_X),
    *_rows("binary", BINARY, ALL, "add sub mul div maximum minimum pow rem fmod",
           notes="la.shape == lb.shape (the core broadcasts with zero strides); integer division truncates "
                 "and raises KernelError on zero; maximum/minimum propagate NaN", **ON_AB),
    *_rows("compare", BINARY, WITH_BOOL, "eq ne lt le gt ge", notes="out is u8 (0 or 1)"),
    KernelRow("where", "select", "k(out, c, lc, t, lt, f, lf)", WITH_BOOL,
              notes="keyed by the values' dtype; c is u8 or bool (the same bytes: nonzero picks t); all three "
                    "broadcast to out's shape"),
    KernelRow("cast", "cast", "k(out, x, lx, dst_dtype)", WITH_BOOL,
              notes="keyed by the source dtype, to any dtype but bool; floats saturate into integers, NaN to 0; "
                    "integers wrap into narrower integers"),
    # ---- memory ---------------------------------------------------------------------------------
    KernelRow("copy", "memory", "k(dst, ldst, src, lsrc)", WITH_BOOL,
              notes="strided to strided, in place on dst (negative strides possible)"),
    KernelRow("fill", "memory", "k(dst, ldst, value)", WITH_BOOL, notes="in place; value is itemsize raw bytes"),
    # ---- reductions -------------------------------------------------------------------------------
    *_rows("reduce", "k(out, x, lx, dims)", ALL, "sum prod argmax argmin",
           notes="dims: sorted tuple of the reduced dims; out holds the kept dims in order; arg* write u32 "
                 "flat indices within dims (the first extreme)"),
    *_rows("reduce", "k(out, x, lx, dims)", WITH_BOOL, "max min",
           notes="as sum; NaN propagates (bool: max is any, min is all)"),
    KernelRow("cumsum", "scan", "k(out, x, lx, dim)", ALL),
    # ---- products ---------------------------------------------------------------------------------
    KernelRow("matmul", "matmul", "k(out, a, la, b, lb)", ALL,
              notes="la (batch..., m, k), lb (batch..., k, n) with the batch dims already broadcast (zero "
                    "strides), any strides; out (batch..., m, n); integers wrap"),
    # ---- indexing ---------------------------------------------------------------------------------
    KernelRow("index_select", "index", "k(out, x, lx, ids, lids, ids_dtype, dim)", WITH_BOOL,
              notes="ids 1-d, any index dtype (u8 u32 i16 i32 i64); bounds-checked"),
    KernelRow("gather", "index", "k(out, x, lx, ids, lids, ids_dtype, dim)", WITH_BOOL,
              notes="out has the ids' shape"),
    KernelRow("scatter", "index", "k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim)", WITH_BOOL,
              notes="out is x with src written at ids along dim; ids and lsrc have the same shape"),
    KernelRow("scatter_add", "index", "k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim)", ALL,
              notes="as scatter, adding; duplicate ids accumulate"),
    KernelRow("index_add", "index", "k(out, x, lx, ids, lids, ids_dtype, src, lsrc, dim)", ALL,
              notes="out is x with src's slices added at ids along dim; ids 1-d contiguous from lids.offset"),
    # ---- sorting along the last dim (two outputs: the core allocates both) ------------------------------
    KernelRow("sort_last", "sort", "k(out, x, lx, indices, descending)", WITH_BOOL, False,
              "a bitonic network of comparisons and where over each row padded to a power of two, then gather",
              since=3,
              notes="out (..., n) the values in x's dtype, indices (..., n) u32, both contiguous; x any strides; "
                    "the stable order (equal values keep their index order, descending too); -0.0 equals 0.0; "
                    "NaN is above every number (last ascending, first descending), as PyTorch orders"),
    KernelRow("topk_last", "sort", "k(out, x, lx, indices, k, largest)", WITH_BOOL, False,
              "sort_last's decomposition, then the first k", since=3,
              notes="the first k (0 < k <= n) of sort_last's order, descending when largest: out (..., k) and "
                    "indices (..., k) u32, contiguous"),
    # ---- convolution, pooling, resampling ------------------------------------------------------------
    *_rows("conv", "k(out, x, lx, w, lw, params)", FLOATS, "conv2d conv_transpose2d",
           notes="params = (b, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow, oph, opw); "
                 "1-d convolutions arrive with h = 1"),
    KernelRow("conv2d_backward_weight", "conv", "k(out, x, lx, gout, lgout, params)", FLOATS, False,
              "per group, a conv2d of x with gout (batch and channels swapped)",
              notes="the gradient for w of conv2d(x, w) = gout; params as conv2d's"),
    *_rows("pool", "k(out, x, lx, params)", NO_I64, "max_pool2d avg_pool2d",
           notes="params = (b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, count_include_pad)"),
    KernelRow("max_pool2d_backward", "pool", "k(gx, x, lx, g, lg, params)", FLOATS, False,
              "a walk over the window taps with compares and strided copies",
              notes="the gradient for x; g contiguous; the first maximum of a window takes its gradient"),
    KernelRow("avg_pool2d_backward", "pool", "k(gx, x, lx, g, lg, params)", FLOATS, False,
              "a walk over the window taps with strided copies"),
    KernelRow("upsample_nearest2d", "resample", "k(out, x, lx, out_h, out_w, align_corners)", NO_I64),
    KernelRow("upsample_bilinear2d", "resample", "k(out, x, lx, out_h, out_w, align_corners)", FLOATS, False,
              "two matmuls with the interpolation matrices (rows @ x @ cols^T)"),
    # ---- fused ------------------------------------------------------------------------------------------
    KernelRow("softmax_last", "fused", UNARY, FLOATS, False, "exp(x - max) / sum, over the last dim"),
    KernelRow("log_softmax_last", "fused", UNARY, FLOATS, False, "x - max - log(sum(exp(x - max)))"),
    KernelRow("layer_norm", "fused", "k(out, x, lx, w, lw, b, lb, eps)", FLOATS, False,
              "mean, variance and rsqrt from reductions and elementwise ops",
              notes="over the last dim; w and b 1-d contiguous; b and lb may be None"),
    KernelRow("skip_layer_norm", "fused", "k(out, x, lx, r, lr, w, lw, b, lb, eps)", FLOATS, False,
              "an add, then layer_norm", since=3,
              notes="layer_norm(x + r) over the last dim in one pass (a transformer's residual and its norm: "
                    "onnxruntime's SkipLayerNormalization); r contiguous, x's shape; w, b as layer_norm's"),
    KernelRow("rms_norm", "fused", "k(out, x, lx, w, lw, eps)", FLOATS, False, "x * rsqrt(mean(x^2) + eps) * w"),
    *_rows("fused", "k(out, x, lx, cos, lcos, sin, lsin)", FLOATS, "rope rope_i", required=False,
           without="halves (rope) or pairs (rope_i) rotated with mul, sub, add and cat",
           notes="x (b, h, t, d); cos/sin contiguous (t, d/2) or (b, t, d/2); rope rotates the halves of d, "
                 "rope_i interleaved pairs"),
    KernelRow("silu_mul", "fused", "k(out, x, lx)", FLOATS, False, "silu of one narrow times the other", since=3,
              notes="x (..., 2f) -> out (..., f) = silu(x[..., :f]) * x[..., f:]: SwiGLU's gate on the gate and "
                    "up projections of one product"),
    KernelRow("bias_gelu", "fused", "k(out, x, lx, b, lb, approximate)", FLOATS, False, "an add, then gelu",
              since=3, notes="gelu(x + b), b (x's last dim) added to every row; approximate: the tanh form "
                             "(onnxruntime's FastGelu), else the erf form (BiasGelu); x and b contiguous"),
    KernelRow("sdpa", "fused", "k(out, q, lq, k, lk, v, lv, mask, lmask, mask_dtype, causal, scale)", FLOATS,
              False, "matmul, softmax and where: the whole score matrix at once",
              notes="lq (batch..., L, E), lk (batch..., S, E), lv (batch..., S, Ev), batch dims broadcast; mask "
                    "None, u8 (0 hides a key) or the query dtype (added), broadcast to (batch..., L, S); causal "
                    "lets query i see keys j <= i; rows with every key hidden are zeros"),
    # ---- recurrent layers: one layer, one direction, every time step ------------------------------------------
    KernelRow("lstm_layer", "rnn", "k(out, x, lx, w_ih, lw_ih, w_hh, lw_hh, b_ih, lb_ih, b_hh, lb_hh, h0, lh0, c0, lc0, "
              "peep, lpeep, lens, llens, reverse, onnx_gates, clip, input_forget)", FLOATS, False,
              "one matmul for the inputs of every step, then a step at a time: matmul, sigmoid, tanh and elementwise "
              "ops", since=3,
              notes="x (T, B, I), w_ih (4H, I), w_hh (4H, H), h0 and c0 (B, H), all any strides; b_ih, b_hh (4H,) "
                    "or None; the gates x[t] w_ih^T + b_ih + b_hh + h w_hh^T stacked i f g o, or i o f c with "
                    "onnx_gates (ONNX); i, f, o = sigmoid, g = tanh, c = f c + i g, h = o tanh(c). ONNX's options: "
                    "peep None or (3H,) peepholes (i o f: p_i c and p_f c added to i and f, p_o c_new to o); lens "
                    "None or (B,) i64 contiguous sequence lengths in [0, T] (a row past its length keeps its state "
                    "and outputs zeros; reverse starts at the row's last step), out of range raising KernelError; "
                    "clip > 0 clips every gate's input to [-clip, clip]; input_forget: f = 1 - i. out (T + 2, B, "
                    "H): h of every step, the final h, the final c. Other activations than sigmoid/tanh run as the "
                    "decomposition"),
    KernelRow("gru_layer", "rnn", "k(out, x, lx, w_ih, lw_ih, w_hh, lw_hh, b_ih, lb_ih, b_hh, lb_hh, h0, lh0, lens, "
              "llens, reverse, onnx_gates, clip, linear_before_reset)", FLOATS, False,
              "one matmul for the inputs of every step, then a step at a time: matmul, sigmoid, tanh and elementwise "
              "ops", since=3,
              notes="as lstm_layer with 3H gates stacked r z n, or z r h with onnx_gates; r, z = sigmoid of x w^T + "
                    "b_ih + b_hh + h w_hh^T; n = tanh(x w_n^T + b_in + r (h w_hn^T + b_hn)) with "
                    "linear_before_reset (PyTorch's GRU), tanh(x w_n^T + b_in + (r h) w_hn^T + b_hn) without "
                    "(ONNX's default); h = (1 - z) n + z h. out (T + 1, B, H): h of every step, the final h"),
    # ---- optimizer steps (in place, every buffer contiguous) --------------------------------------------------
    KernelRow("adamw_step", "optim", "k(p, lp, g, lg, m, lm, v, lv, lr, beta1, beta2, eps, weight_decay, step)",
              FLOATS, False, "the same update from elementwise ops", notes="writes p, m and v"),
    # ---- quantized weights (GGML block types; qtype is ggml's type id, blocks a flat u8 storage) ---------------
    KernelRow("dequantize", "quantized", "k(out, blocks, lblocks, qtype)", ("u8",), False,
              "the reference NumPy codec on the host, the values copied to the device", since=2,
              notes="out (values,) f32; blocks contiguous, a whole number of blocks; bit-exact with ggml"),
    KernelRow("quantize", "quantized", "k(out, x, lx, qtype)", ("f32",), False,
              "the reference NumPy codec on the host, the blocks copied to the device", since=2,
              notes="x contiguous, rows of whole blocks; out (bytes,) u8; bit-exact with ggml's reference "
                    "quantizers"),
    KernelRow("qmatmul", "quantized", "k(out, x, lx, blocks, lblocks, qtype, n)", ("f32",), False,
              "the weight dequantized, then matmul", since=2,
              notes="out (..., n) = x (..., k) contiguous @ W^T, W (n, k) in blocks; within the type's tolerance "
                    "of the dequantized product (activations may be quantized on the fly as ggml does, or both "
                    "operands rounded to bf16 for a GEMM)"),
    KernelRow("qembedding", "quantized", "k(out, blocks, lblocks, ids, lids, ids_dtype, qtype, k)", ("u8",), False,
              "index_select of the rows' blocks, then dequantize", since=2,
              notes="out (ids, k) f32: rows ids (contiguous, any index dtype) of W (rows, k) in blocks; an id "
                    "out of range raises IndexOutOfRangeError"),
    KernelRow("qpack", "quantized", "k(out, blocks, lblocks, qtype, n)", ("u8",), False,
              "the reference NumPy packing (candle_api.quantized.packed) on the host", since=3,
              notes="out (bytes,) u8: the blocks of W (n, k), contiguous, in the packed layout of candle_api."
                    "quantized.packed (groups of 16 rows, each field of a block column's 16 blocks arranged "
                    "for vector kernels), bit-exact with the reference; only types that have a packed layout"),
    KernelRow("qmatmul_packed", "quantized", "k(out, x, lx, packed, lpacked, qtype, n)", ("f32",), False,
              "the blocks unpacked (the reference NumPy unpacking), then qmatmul", since=3,
              notes="as qmatmul, W given by qpack's output"),
    # ---- products with weights packed once (panels of 16 rows) ----------------------------------------------
    KernelRow("pack_panels", "panels", "k(out, w, lw)", ("f32",), False, "pad, reshape and transpose", since=3,
              notes="out (batch, ceil(rows / 16), depth, 16) from w (batch, rows, depth), any strides: "
                    "out[b, p, d, i] = w[b, 16 p + i, d], 0 past the last row"),
    KernelRow("linear_panels", "panels", "k(out, x, lx, wp, lwp, bias, lbias, n, act, alpha, beta)", ("f32",),
              False, "the weights unpacked, matmul, add and the activation", since=3,
              notes="out (..., n) = act(x (..., k) @ M^T + bias), wp = pack_panels(M (1, n, k)); the rows of x "
                    "have one stride (leading dims merge); bias None or (n,) contiguous; act one of ACTIVATIONS"),
    KernelRow("conv2d_panels", "panels",
              "k(out, x, lx, wp, lwp, bias, lbias, res, lres, params, act, alpha, beta, scale, shift)", ("f32",),
              False, "the weights unpacked, conv2d, add, the activation and affine", since=3,
              notes="out = act(conv2d(x, w) + bias + res) * scale + shift; wp = pack_panels of w (c_out, c_in / groups, kh, kw) "
                    "seen as (groups, c_out / groups, c_in / groups * kh * kw), or for a depthwise w (one input and "
                    "one output channel per group) as (1, c_out, kh * kw); params as conv2d's; bias None or "
                    "(c_out,) contiguous; res None or contiguous shaped as out"),
    # ---- int8 products of quantized models (u8 activations, int8 weights packed once) -------------------
    KernelRow("quantize_u8_params", "int8", "k(out, x, lx)", ("f32",), False, "min, max and arithmetic", since=3,
              notes="out (2,) f32 = [scale, zero point] of ONNX DynamicQuantizeLinear over x contiguous: the range "
                    "widened to include 0, scale (max - min) / 255 (1 for an all-zero x), zero point "
                    "round_half_even(clamp(-min / scale, 0, 255)); a NaN in x raises"),
    KernelRow("quantize_u8", "int8", "k(out, x, lx, params, lparams)", ("f32",), False,
              "divide, round, add and clamp", since=3,
              notes="out u8 = clamp(round_half_even(x / params[0]) + params[1], 0, 255), x contiguous"),
    KernelRow("pack_int8_panels", "int8", "k(out, w, lw)", ("u8", "i16"), False, "reshape, transpose and sums",
              since=3, notes="w (k, n) int8 weights (u8 stored minus 128; i16 holding -128..127) as s8 bytes in "
                             "panels of 16 columns, each column's 4 consecutive k together: out u8 (ceil(n/16) * "
                             "ceil(k/4) * 64 + ceil(n/16) * 64,), the int32 column sums after the panels"),
    KernelRow("matmul_int8", "int8", "k(out, a, la, a_zp, la_zp, bp, lbp, b_zp, lb_zp, a_scale, la_scale, "
              "b_scale, lb_scale, bias, lbias, n)", ("u8",), False, "the weights unpacked, a float64 matmul",
              since=3, notes="out (..., n) = (a (..., k) u8 contiguous - a_zp) @ (B - b_zp), B = the packed "
                             "weights: i32 without scales, else f32 times a_scale[0] * b_scale (one or n) plus "
                             "bias (n); a_zp None or one u8, b_zp None, one or n i32 in the stored (signed) "
                             "domain; k <= 65536; exact integer sums"),
    KernelRow("sgd_step", "optim", "k(p, lp, g, lg, buf, lbuf, lr, weight_decay, momentum, dampening, nesterov, "
              "first)", FLOATS, False, "the same update from elementwise ops",
              notes="writes p and buf; buf None without momentum"),
])

BY_NAME: dict = {r.name: r for r in ROWS}
assert len(BY_NAME) == len(ROWS), "a kernel name appears twice in the contract table"
