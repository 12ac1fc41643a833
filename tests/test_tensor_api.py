"""The Tensor API: candle-pyo3's names and semantics, PyTorch spellings,
views that never copy, indexing like numpy, and host interop."""

import math

import ml_dtypes
import numpy as np
import pytest

import candle_api as c
from candle_api.info import kernel_providers
from candle_api.testing import assert_almost_equal, assert_equal


# ---- candle-pyo3 behaviour ---------------------------------------------------------------
def test_construction_follows_candle_pyo3_dtype_rules():
    assert c.Tensor(42.0).dtype == "f32" and c.Tensor(42.0).values() == 42.0
    assert c.Tensor([3.0, 1, 4]).dtype == c.f32
    assert c.Tensor([0, 1, 2]).dtype == c.u32
    assert c.Tensor([-1, 2]).dtype == c.i64
    assert c.Tensor([[3.0, 1, 4, 1], [5, 9, 2, 6]]).values() == [[3.0, 1, 4, 1], [5, 9, 2, 6]]
    assert c.Tensor(np.arange(3, dtype=np.float64)).dtype == "f64"  # numpy keeps its dtype
    assert c.Tensor([True, False]).dtype == "bool"  # PyTorch (candle-pyo3 has no bool dtype)
    assert c.tensor([1, 2], dtype="f16").values() == [1.0, 2.0]


def test_indexing_like_candle_pyo3():
    t = c.Tensor([[3.0, 1, 4, 1], [5, 9, 2, 6]])
    assert t[0].values() == [3.0, 1.0, 4.0, 1.0]
    assert t[-1].values() == [5.0, 9.0, 2.0, 6.0]
    assert t[:, 0].values() == [3.0, 5.0]
    assert t[0, 0].values() == 3.0
    assert t[:, -4].values() == [3.0, 5.0]
    assert t[..., 0].values() == [3.0, 5.0]
    t3 = c.Tensor([[[1, 2, 3, 4], [5, 6, 7, 8]], [[9, 10, 11, 12], [13, 14, 15, 16]]])
    assert t3[:, :, 0].values() == [[1, 5], [9, 13]]
    assert t3[..., 0:2].values() == [[[1, 2], [5, 6]], [[9, 10], [13, 14]]]


def test_equal_comparisons_and_hash():
    t = c.Tensor(42.0)
    assert t.equal(c.Tensor(42.0))
    assert not c.Tensor([42.0, 42.1]).equal(c.Tensor([42.0, 42.0]))
    assert not t.equal(c.Tensor([42.0, 42.0]))
    assert (t == 42.0).equal(c.Tensor(1).to_dtype(c.u8))
    assert (t != 42.0).equal(c.Tensor(0).to_dtype("u8"))
    assert (t >= 43.0).values() == 0 and (t <= 42.0).values() == 1
    mask_cond = c.Tensor([0, 1, 2])
    mask = mask_cond < (mask_cond + 1).reshape((3, 1))
    assert mask.shape == (3, 3)
    assert mask.equal(c.Tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).to_dtype(c.u8))
    assert hash(t) == hash(t) and hash(t) != hash(c.Tensor(42.0))


def test_metadata_candle_and_pytorch_spellings():
    t = c.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) == t.size() == t.dims and t.size(1) == 3
    assert t.rank == t.ndim == t.dim() == 3 and t.dim(2) == 4
    assert t.stride == (12, 4, 1) and t.stride() == (12, 4, 1) and t.stride(0) == 12
    assert t.nelement == 24 and t.nelement() == 24 and t.numel() == 24 and t.elem_count() == 24
    assert t.is_contiguous() and not t.is_fortran_contiguous()
    assert t.transpose(0, 2).is_fortran_contiguous()
    assert t.device == "cpu" and t.device == c.Device("cpu") and c.Device("cpu") is c.get_device("cpu:0")
    assert str(t.dtype) == "f32" and repr(t.dtype) == "candle_api.f32"
    assert c.get_dtype("float16") is c.f16 and c.get_dtype(np.float64) is c.f64
    assert c.get_dtype(ml_dtypes.bfloat16) is c.bf16


def test_creation_functions():
    assert c.zeros(2, 2).values() == [[0.0, 0.0], [0.0, 0.0]]
    assert c.ones((2,), dtype="i64").values() == [1, 1]
    assert c.full((2,), 3.5).values() == [3.5, 3.5]
    assert c.arange(4).dtype == "i64" and c.arange(0.0, 1.0, 0.25).values() == [0.0, 0.25, 0.5, 0.75]
    assert c.eye(2, dtype="u8").values() == [[1, 0], [0, 1]]
    assert c.zeros_like(c.ones(2, dtype="f16")).dtype == "f16"
    assert c.ones_like(c.zeros(3)).values() == [1.0, 1.0, 1.0]
    assert c.full_like(c.zeros(2), 7).values() == [7.0, 7.0]
    assert c.empty(3, 2).shape == (3, 2)
    assert c.rand_like(c.zeros(5)).shape == (5,) and c.randn_like(c.zeros(5, dtype="f64")).dtype == "f64"


# ---- views -----------------------------------------------------------------------------------
def test_views_never_copy():
    x = c.arange(24.0).reshape(2, 3, 4)
    for v in [x.reshape(6, 4), x.flatten_all(), x.flatten_from(1), x.flatten_to(1), x.unsqueeze(0).squeeze(0),
              x.t(), x.transpose(0, 2), x.permute(2, 0, 1), x.narrow(1, 1, 2), x.chunk(2, 2)[1],
              x[0].broadcast_as(5, 3, 4), x.broadcast_left(2), x[:1].expand(4, -1, -1), x[1, ::2, 1:],
              x[None, ..., None], x.detach(), x.contiguous(), x.T, x.split(1, 0)[0], x.get(1)]:
        assert v._storage is x._storage
    assert x.reshape(6, 4).is_contiguous()
    # a reshape the layout cannot express copies, as in PyTorch
    assert x.transpose(0, 2).reshape(-1)._storage is not x._storage
    assert x.copy()._storage is not x._storage


def test_views_hold_the_right_values():
    a = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    x = c.from_numpy(a)
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.transpose(0, 1).reshape(3, 8).numpy(), a.transpose(1, 0, 2).reshape(3, 8))
    np.testing.assert_array_equal(x[:, 1:].reshape(-1).numpy(), a[:, 1:].reshape(-1))
    np.testing.assert_array_equal(x.narrow(2, 1, 2).t().numpy(), np.swapaxes(a[:, :, 1:3], -1, -2))
    assert [t.shape for t in x.chunk(3, 2)] == [(2, 3, 2), (2, 3, 2)]
    assert [t.shape for t in x.split([1, 3], 2)] == [(2, 3, 1), (2, 3, 3)]


@pytest.mark.parametrize("index", [
    1, -1, slice(1, None), slice(None, None, 2), slice(None, None, -1), (slice(None), 2), (Ellipsis, 1),
    (1, Ellipsis, slice(0, 3, 2)), (None, 1), (slice(None), None, slice(2, 0, -1)), [0, 2], [[0, 1], [1, 0]],
    ([0, 1], [2, 0]), (slice(None), [3, 0, -1]), ([0, 1], slice(None), [1, 3]), (Ellipsis, [0, 0, 1]),
    np.array([1, 0]), np.array([True, False, True]), (slice(None), np.array([[True, False, True, False, True]] * 4)),
    (0, [1, 2], slice(1, 3)),
])
def test_getitem_matches_numpy(index):
    a = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    got = c.from_numpy(a)[index]
    np.testing.assert_array_equal(got.numpy(), a[index])


def test_getitem_with_tensors():
    a = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    x = c.from_numpy(a)
    np.testing.assert_array_equal(x[c.tensor([3, 0], dtype="u32")].numpy(), a[[3, 0]])
    np.testing.assert_array_equal(x[c.tensor([-1], dtype="i64")].numpy(), a[[-1]])
    np.testing.assert_array_equal(x[x > 5].numpy(), a[a > 5])  # u8 tensors are masks
    np.testing.assert_array_equal(x[:, c.tensor(2, dtype="i64")].numpy(), a[:, 2])


# ---- elementwise, scalars and dtypes --------------------------------------------------------
def test_scalar_operands_both_sides():
    x = c.Tensor([1.0, 2.0, 4.0])
    assert (x + 1).values() == [2.0, 3.0, 5.0] and (1 + x).values() == [2.0, 3.0, 5.0]
    assert (x - 1).values() == [0.0, 1.0, 3.0] and (1 - x).values() == [0.0, -1.0, -3.0]
    assert (x * 2).values() == [2.0, 4.0, 8.0] and (2 * x).values() == [2.0, 4.0, 8.0]
    assert (x / 4).values() == [0.25, 0.5, 1.0] and (4 / x).values() == [4.0, 2.0, 1.0]
    assert (x ** 2).values() == [1.0, 4.0, 16.0] and (2 ** x).values() == [2.0, 4.0, 16.0]
    assert (x % 3).values() == [1.0, 2.0, 1.0] and (-x).values() == [-1.0, -2.0, -4.0]
    assert abs(c.Tensor([-2.0])).values() == [2.0]
    assert x.maximum(2.5).values() == [2.5, 2.5, 4.0] and x.minimum(c.Tensor([0.0, 5, 5])).values() == [0.0, 2, 4]
    assert x.clamp(1.5, 3).values() == [1.5, 2.0, 3.0] and x.clamp(max=c.Tensor(2.0)).values() == [1.0, 2.0, 2.0]
    assert x.affine(2, 1).values() == [3.0, 5.0, 9.0] and x.powf(0.5).values()[2] == 2.0


def test_integer_semantics():
    a, b = c.tensor([7, -7, 7, -7], dtype="i32"), c.tensor([2, 2, -2, -2], dtype="i32")
    assert (a / b).values() == [3, -3, -3, 3]           # truncation, as in Candle
    assert (a % b).values() == [1, 1, -1, -1]           # sign of the divisor, as in Python
    assert a.fmod(b).values() == [1, -1, 1, -1]         # sign of the dividend, as in C
    assert c.tensor([250], dtype="u8").affine(1, 10).values() == [4]  # wraps
    assert c.tensor([3, 1, 2], dtype="u32").mean().values() == 2
    assert c.Tensor([2.5, 3.5, -0.5]).round().values() == [2.0, 4.0, -0.0]  # half to even


def test_to_and_conversions():
    x = c.Tensor([1.5, -2.5])
    assert x.to("f64").dtype == "f64" and x.to(dtype="bf16").dtype == "bf16" and x.to("cpu") is x
    assert x.to(c.zeros(1, dtype="f16")).dtype == "f16"
    assert x.float().dtype == "f32" and x.double().dtype == "f64" and x.half().dtype == "f16"
    assert x.long().values() == [1, -2] and x.int().dtype == "i32" and x.bfloat16().dtype == "bf16"
    assert x.to_device("cpu") is x
    with pytest.raises(TypeError):
        x.to()
    assert float(c.Tensor([2.5])) == 2.5 and int(c.tensor([3], dtype="u32")) == 3 and c.Tensor(1.0).item() == 1.0
    assert bool(c.Tensor([1.0])) and len(c.zeros(4, 2)) == 4 and [t.shape for t in c.zeros(2, 3)] == [(3,), (3,)]
    with pytest.raises(ValueError, match="ambiguous"):
        bool(c.zeros(2))


def test_repr_is_candle_style():
    assert repr(c.Tensor([[1.0, 2.0], [3.0, 4.0]])) == "[[1., 2.],\n [3., 4.]]\nTensor[[2, 2], f32]"
    assert "f16" in repr(c.zeros(2, dtype="f16"))


# ---- host interop ------------------------------------------------------------------------------
def test_from_numpy_is_zero_copy_and_numpy_is_a_read_only_view():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = c.from_numpy(a)
    a[0, 0] = 100
    assert t.values()[0][0] == 100
    view = t.numpy()
    assert np.shares_memory(view, a) and not view.flags.writeable
    strided = np.arange(20, dtype=np.int64).reshape(4, 5)[::2, 1::2]
    ts = c.from_numpy(strided)
    assert ts.stride == (10, 2) and np.shares_memory(ts.numpy(), strided)
    np.testing.assert_array_equal(ts.numpy(), strided)
    big_endian = np.arange(3, dtype=">f4")
    np.testing.assert_array_equal(c.from_numpy(big_endian).numpy(), big_endian)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("dtype", ["u8", "u32", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"])
def test_dlpack_round_trip(dtype):
    x = c.arange(12).reshape(3, 4).to_dtype(dtype)[:, 1::2]
    assert c.from_dlpack(x) is x
    for capsule in (x.__dlpack__(), x.__dlpack__(max_version=(1, 0))):
        y = c.from_dlpack(capsule)
        assert y._storage.owner is not None and y.stride == x.stride and np.shares_memory(y.numpy(), x.numpy())
        assert_equal(y, x)
    if dtype != "bf16":  # numpy cannot import bfloat16 through DLPack
        arr = np.from_dlpack(x)
        np.testing.assert_array_equal(arr, x.numpy())
        assert not arr.flags.writeable  # exported read-only: tensors are immutable from outside


def test_dlpack_import_from_numpy_shares_memory_and_keeps_it_alive():
    a = np.arange(8, dtype=np.float32)
    t = c.from_dlpack(a)
    a[1] = -5
    assert t.values()[1] == -5
    del a
    assert t.sum_all().values() == sum(range(8)) - 1 - 5
    assert t.__dlpack_device__() == (1, 0)


def test_testing_helpers():
    assert_almost_equal(c.Tensor([1.0, 2.0]), c.Tensor([1.0, 2.000001]), rtol=1e-5)
    with pytest.raises(AssertionError):
        assert_equal(c.Tensor([1.0]), c.Tensor([2.0]))
    with pytest.raises(AssertionError, match="dtype"):
        assert_equal(c.Tensor([1.0]), c.Tensor([1.0], dtype="f64"))


def test_functional_and_reductions_surface():
    x = c.Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.sum_keepdim(1).shape == (2, 1) and x.sum([0, 1]).values() == 21.0
    assert x.max_keepdim(0).shape == (1, 3) and x.min_all().values() == 1.0 and x.amax(1).values() == [3.0, 6.0]
    values, indices = x.max(1)
    assert values.values() == [3.0, 6.0] and indices.values() == [2, 2] and x.max(1).indices.dtype == c.u32
    assert x.min(0, keepdim=True).values.shape == (1, 3) and x.max().values() == 6.0
    with pytest.raises(TypeError, match="amax"):
        x.max((0, 1))
    assert x.argmax_keepdim(1).values() == [[2], [2]] and x.argmin().values() == 0
    assert x.mean_all().values() == 3.5 and x.var(1).values() == [1.0, 1.0]
    assert abs(x.log_sum_exp(1).values()[0] - math.log(math.exp(1) + math.exp(2) + math.exp(3))) < 1e-6
    assert x.cumsum(1).values() == [[1.0, 3.0, 6.0], [4.0, 9.0, 15.0]]
    assert abs(x.norm().values() - math.sqrt(91)) < 1e-5
    assert_almost_equal(c.functional.softmax(x, 1).sum(1), c.ones(2), rtol=1e-6)
    assert c.functional.max_pool2d(c.ones(1, 1, 4, 4), 2).shape == (1, 1, 3, 3)  # candle-pyo3: stride 1
    assert c.ones(1, 1, 4, 4).max_pool2d(2).shape == (1, 1, 2, 2)                 # Tensor: stride = kernel
    assert c.utils.get_num_threads() >= 1 and c.utils.cuda_is_available() is False
    assert c.utils.has_mkl() is (kernel_providers("cpu")["matmul"]["f32"] == "mkl")


def test_from_numpy_copies_misaligned_arrays():
    """Kernels load whole elements: a misaligned view (a packed file, a byte
    offset) is copied instead of shared."""
    buf = np.arange(41, dtype=np.uint8)
    arr = buf[1:].view(np.float32)
    assert not arr.flags.aligned
    t = c.from_numpy(arr)
    np.testing.assert_array_equal(t.numpy(), arr)
    assert t.numpy().ctypes.data % 4 == 0
