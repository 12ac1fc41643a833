"""Every in-place writer against tensors over memory the caller may not change.

A case makes a tensor over read-only memory (a loaded checkpoint, a read-only
NumPy array, bytes, a read-only DLPack producer...), maybe takes a view of it,
and applies one in-place writer to it. The writer must raise a CandleError
(ReadOnlyError), or (where the tensor holds a private copy, e.g. of an npz
member) write the values it was asked to; either way the source memory must
be unchanged, and nothing may crash. A case of the "source" role reads the
read-only tensor into a writable one instead, which must work."""

from __future__ import annotations

import mmap

import numpy as np

import candle_api as c
from candle_api import nn, optim
from candle_api.errors import CandleError
from candle_api.nn.parameter import assign_
from candle_api.ops.creation import fill_
from candle_api.ops.optim import adamw_step, sgd_step
from candle_api.ops.shape import copy_into

from ..case import Case, pick
from ..files import gguf, onnx, safetensors, torch
from ..files.numpy import npy_bytes
from ..files.pickle import Pickle, Tensor
from ..files.zips import zip_bytes

DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16}


# ---- sources: (tensor, what must stay unchanged) --------------------------------------------------
def _file(path, raw: bytes, load):
    path.write_bytes(raw)
    return load(c.load(path)), lambda: path.read_bytes()


def from_safetensors(values, tmp):
    header, data = safetensors.layout({"w": values}, None)
    return _file(tmp / "x.safetensors", safetensors.encode(header, data), lambda tf: tf["w"])


def from_npy(values, tmp):
    return _file(tmp / "x.npy", npy_bytes(values), lambda tf: tf["arr_0"])


def from_gguf(values, tmp):
    w = gguf.Writer(3)
    w.out += b"GGUF"
    for fmt, value in [("<I", 3), ("<Q", 1), ("<Q", 0)]:  # version, one tensor, no metadata
        w.int(fmt, value)
    w.string("w")
    w.int("<I", values.ndim)
    for d in reversed(values.shape):
        w.int("<Q", d)
    w.int("<I", gguf.TYPES["f32"][0])
    w.int("<Q", 0)  # at the start of the data
    w.pad(32)
    raw = bytes(w.out) + values.astype(np.float32).tobytes()
    return _file(tmp / "x.gguf", raw, lambda tf: tf["w"].dequantize())  # an f32 QTensor shares its memory


def from_pytorch(values, tmp):
    storage = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16}
    kind = {np.dtype(v): k for k, v in storage.items()}[values.dtype]
    strides = tuple(s // values.itemsize for s in values.strides)
    pkl = Pickle().value({"w": Tensor(kind, "0", values.size, 0, values.shape, strides)}).encoded()
    raw = torch.zip_file({"0": (kind, values.tobytes())}, pkl, np.random.default_rng(0))
    return _file(tmp / "x.pt", raw, lambda tf: tf["w"])


def from_onnx(values, tmp):
    """An initializer in an external data file, which the loader maps."""
    from onnx import helper, numpy_helper

    proto, external = numpy_helper.from_array(values, "w"), bytearray()
    onnx.store_externally(proto, external, "w.bin")
    (tmp / "w.bin").write_bytes(bytes(external))
    model = helper.make_model(helper.make_graph([], "g", [], [], [proto]))
    tensor, _ = _file(tmp / "x.onnx", model.SerializeToString(), lambda tf: tf["w"])
    return tensor, lambda: (tmp / "w.bin").read_bytes()


def from_readonly_array(values, tmp):
    values.flags.writeable = False
    return c.from_numpy(values), lambda: values.tobytes()


def from_bytes(values, tmp):
    raw = values.tobytes()
    return c.from_numpy(np.frombuffer(raw, values.dtype).reshape(values.shape)), lambda: raw


def from_memmap(values, tmp):
    np.save(tmp / "m.npy", values)
    return c.from_numpy(np.load(tmp / "m.npy", mmap_mode="r")), lambda: (tmp / "m.npy").read_bytes()


def from_mmap_module(values, tmp):
    (tmp / "raw.bin").write_bytes(values.tobytes())
    with open(tmp / "raw.bin", "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return c.from_numpy(np.frombuffer(mapped, values.dtype).reshape(values.shape)), \
        lambda: (tmp / "raw.bin").read_bytes()


def from_readonly_view(values, tmp):
    """A read-only view of a writable array: the caller marked it so."""
    base = np.concatenate([values.reshape(-1), values.reshape(-1)])
    view = base[: values.size].reshape(values.shape)
    view.flags.writeable = False
    return c.from_numpy(view), lambda: base.tobytes()


def from_dlpack(values, tmp):
    values.flags.writeable = False
    return c.from_dlpack(values), lambda: values.tobytes()


def from_npz(values, tmp):
    """Members are read into memory of the tensor's own: writes may succeed."""
    return _file(tmp / "x.npz", zip_bytes({"w.npy": npy_bytes(values)}), lambda tf: tf["w"])


SOURCES = {"safetensors": from_safetensors, "npy": from_npy, "gguf": from_gguf, "pytorch": from_pytorch,
           "onnx": from_onnx, "read-only array": from_readonly_array, "bytes": from_bytes, "np.memmap": from_memmap,
           "mmap": from_mmap_module, "read-only view": from_readonly_view, "dlpack": from_dlpack, "npz": from_npz}

# ---- views -----------------------------------------------------------------------------------------
VIEWS = {
    "itself": lambda t: t, "transposed": lambda t: t.t(), "row": lambda t: t[1], "stepped": lambda t: t[:, ::2],
    "narrowed": lambda t: t.narrow(1, 1, 2), "flattened": lambda t: t.reshape(-1),
    "unsqueezed": lambda t: t.unsqueeze(0),
}


# ---- writers: (name, write(v, src), values v must hold after a write, or None when random) --------
def _batchnorm(v, src):
    bn = nn.BatchNorm1d(v.shape[0], dtype=v.dtype)
    bn.register_buffer("running_mean", v)
    bn(c.from_numpy(np.random.default_rng(0).standard_normal((4, v.shape[0])).astype(v.dtype.np)))


def _module_buffer(v, src):
    m = nn.Module()
    m.register_buffer("b", v)
    m.load_state_dict({"b": src})


def _sgd(momentum, nesterov=False):
    """PyTorch's loop: the gradient in .grad."""
    def write(v, src):
        v.requires_grad_()
        v.grad = src
        optim.SGD([v], lr=0.1, momentum=momentum, nesterov=nesterov).step()
    return write


def _adamw(v, src):
    """Candle's loop: the gradient in a GradStore."""
    grads = c.GradStore()
    grads.insert(v, src)
    optim.AdamW([v], lr=0.1).step(grads)


def _ones_like(v):
    return c.ones(v.shape, dtype=v.dtype)


WRITERS = {
    "nn.init.zeros_": (lambda v, src: nn.init.zeros_(v), lambda v, src: 0.0),
    "nn.init.ones_": (lambda v, src: nn.init.ones_(v), lambda v, src: 1.0),
    "nn.init.constant_": (lambda v, src: nn.init.constant_(v, 2.5), lambda v, src: 2.5),
    "nn.init.uniform_": (lambda v, src: nn.init.uniform_(v, -1, 1), None),
    "nn.init.normal_": (lambda v, src: nn.init.normal_(v), None),
    "nn.init.kaiming_uniform_": (lambda v, src: nn.init.kaiming_uniform_(v), None),
    "nn.init.kaiming_normal_": (lambda v, src: nn.init.kaiming_normal_(v), None),
    "nn.init.xavier_uniform_": (lambda v, src: nn.init.xavier_uniform_(v), None),
    "nn.init.xavier_normal_": (lambda v, src: nn.init.xavier_normal_(v), None),
    "nn.init.init_": (lambda v, src: nn.init.init_(v, nn.init.Const(-1.0)), lambda v, src: -1.0),
    "ops.creation.fill_": (lambda v, src: fill_(v, 3.0), lambda v, src: 3.0),
    "ops.shape.copy_into": (lambda v, src: copy_into(v, v.layout, src), lambda v, src: src.numpy()),
    "nn.parameter.assign_": (lambda v, src: assign_(v, src), lambda v, src: src.numpy()),
    "Module.load_state_dict (buffer)": (_module_buffer, lambda v, src: src.numpy()),
    "BatchNorm1d running stats": (_batchnorm, None),
    "optim.SGD": (_sgd(0.0), None),
    "optim.SGD momentum": (_sgd(0.9), None),
    "optim.SGD nesterov": (_sgd(0.9, True), None),
    "optim.AdamW": (_adamw, None),
    "ops.optim.sgd_step": (lambda v, src: sgd_step(v, src, None, True, 0.1, 0.0, 0.0, False, 0.0), None),
    "ops.optim.sgd_step (into its momentum buffer)":
        (lambda v, src: sgd_step(c.zeros(v.shape, dtype=v.dtype), src, v, False, 0.1, 0.9, 0.0, False, 0.0), None),
    "ops.optim.adamw_step": (lambda v, src: adamw_step(v, src, c.zeros(v.shape, dtype=v.dtype),
                                                        c.zeros(v.shape, dtype=v.dtype), 1, 0.1, 0.9, 0.99, 1e-8, 0.01),
                             None),
    "ops.optim.adamw_step (into its moments)":
        (lambda v, src: adamw_step(_ones_like(v), src, v, v, 1, 0.1, 0.9, 0.99, 1e-8, 0.01), None),
}
#: writers that need a 2-d (fans) or 1-d (channels) target, or f32/f64 (optimizer steps: the contract's dtypes)
NEEDS_2D = {w for w in WRITERS if "kaiming" in w or "xavier" in w}
NEEDS_1D = {"BatchNorm1d running stats"}
NEEDS_F32_F64 = {w for w in WRITERS if "optim" in w}


def make(rng, index, tmp) -> Case:
    dtype = pick(rng, list(DTYPES))
    source = pick(rng, list(SOURCES))
    values = (rng.standard_normal((4, 6)) * 3 + 5).astype(DTYPES[dtype])  # never 0, 1 or the constants written
    t, snapshot = SOURCES[source](values, tmp)
    view_name = pick(rng, list(VIEWS))
    role = "source" if rng.random() < 0.1 else "target"
    v = VIEWS[view_name](t)
    candidates = [w for w in WRITERS if (w not in NEEDS_2D or v.rank == 2) and (w not in NEEDS_1D or v.rank == 1)
                  and (w not in NEEDS_F32_F64 or v.dtype.name != "f16")]
    writer = pick(rng, candidates)
    write, expect = WRITERS[writer]
    dtype = v.dtype.name  # a GGUF tensor is f32 whatever was asked for
    src = c.from_numpy(rng.standard_normal(v.shape).astype(v.dtype.np))
    before, held = snapshot(), v.numpy().copy()

    def run():
        if role == "source":  # the read-only tensor is only read: this must work
            dst = c.zeros(v.shape, dtype=v.dtype)
            copy_into(dst, dst.layout, v)
            assert np.array_equal(dst.numpy(), held, equal_nan=True), "copy_into from read-only memory: wrong values"
            return "read"
        write(v, src)
        if expect is not None:
            want = np.broadcast_to(np.asarray(expect(v, src), dtype=v.dtype.np), v.shape)
            assert np.array_equal(v.numpy(), want), f"{writer} returned without writing the values"
        return "wrote a private copy"

    def check():
        assert snapshot() == before, f"{writer} changed memory that was not the caller's to change ({source})"

    what = f"{writer}: on a {view_name} {dtype} tensor from {source}" if role == "target" else \
        f"read: a {view_name} {dtype} tensor from {source} into a new one"
    return Case(what, run, (CandleError,), check)
