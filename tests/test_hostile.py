"""Bad input gets a clear exception naming what was wrong: never a crash,
a hang or a silently wrong answer."""

import math

import numpy as np
import pytest

import candle_api as c
from candle_api.errors import DTypeError, IndexOutOfRangeError, KernelError, ShapeError

BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "remainder", "fmod"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
OPERATORS = ["__add__", "__sub__", "__mul__", "__truediv__", "__mod__", "__pow__", "__eq__", "__ne__", "__lt__",
             "__le__", "__gt__", "__ge__"]


@pytest.mark.parametrize("op", BINARY + COMPARE + OPERATORS)
@pytest.mark.parametrize("shapes", [((2, 3), (3, 2)), ((4,), (5,)), ((2, 3, 4), (2, 4)), ((0, 3), (2, 3))])
def test_binary_shape_mismatch(op, shapes):
    a, b = c.ones(shapes[0]), c.ones(shapes[1])
    with pytest.raises(ShapeError, match=r"cannot be broadcast together") as info:
        getattr(a, op)(b)
    assert str(shapes[0]) in str(info.value) and str(shapes[1]) in str(info.value)


@pytest.mark.parametrize("op", BINARY + COMPARE)
def test_binary_dtype_mismatch(op):
    with pytest.raises(DTypeError, match="f32, f64"):
        getattr(c.ones(2), op)(c.ones(2, dtype="f64"))


@pytest.mark.parametrize("a,b", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 2, 3), (2, 4, 3)), ((5, 2, 3), (4, 3, 2))])
def test_matmul_shape_mismatch(a, b):
    with pytest.raises(ShapeError, match=r"matmul"):
        c.ones(a) @ c.ones(b)


def test_matmul_other_errors():
    with pytest.raises(ShapeError, match="at least 1 dim"):
        c.Tensor(1.0) @ c.ones(2)
    with pytest.raises(DTypeError):
        c.ones(2, 2) @ c.ones(2, 2, dtype="f16")
    with pytest.raises(TypeError):
        c.ones(2, 2) @ np.ones((2, 2))  # numpy arrays are not implicitly uploaded


def test_matmul_accepts_any_strides():
    """Candle's MatMulNonContiguous pain point: every layout just works."""
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    b = np.arange(40, dtype=np.float32).reshape(5, 8)
    ta, tb = c.from_numpy(a), c.from_numpy(b)
    views = [
        (ta.transpose(0, 2).transpose(0, 2), tb),            # double transpose
        (ta[:, ::2, :], tb[:, 1::2]),                        # steps on both sides
        (ta.permute(1, 0, 2)[1], tb.t().t()),               # permuted then selected
        (c.from_numpy(a[0]).broadcast_as(6, 4, 5), tb),     # zero batch stride
    ]
    wants = [a @ b, a[:, ::2, :] @ b[:, 1::2], a.transpose(1, 0, 2)[1] @ b, np.broadcast_to(a[0], (6, 4, 5)) @ b]
    for (x, y), want in zip(views, wants):
        np.testing.assert_allclose((x @ y).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("bad", [5, 100, 2**40, -6])
def test_getitem_out_of_range(bad):
    x = c.arange(5.0)
    with pytest.raises(IndexOutOfRangeError, match=f"index {bad}"):
        x[bad]
    with pytest.raises(IndexOutOfRangeError):
        x[[0, bad]]
    with pytest.raises(IndexOutOfRangeError):
        c.ones(2, 5)[:, bad]


@pytest.mark.parametrize("ids", [[0, 5], [2**31], [-1], [3, 4, 7]])
def test_index_select_and_gather_out_of_range(ids):
    x = c.ones(5, 2)
    with pytest.raises(IndexOutOfRangeError, match="out of range"):
        x.index_select(c.tensor(ids, dtype="i64"), 0)
    gather_ids = np.zeros((5, 2), dtype=np.int64)
    gather_ids[3, 1] = ids[-1]
    with pytest.raises(IndexOutOfRangeError, match=f"index {ids[-1]} .*position 7"):
        x.gather(c.tensor(gather_ids), 0)


def test_index_ops_reject_float_indices_and_bad_shapes():
    x = c.ones(4, 3)
    with pytest.raises(DTypeError, match="integer"):
        x.index_select(c.Tensor([0.0, 1.0]), 0)
    with pytest.raises(ShapeError, match="1-d"):
        x.index_select(c.tensor([[0, 1]], dtype="u32"), 0)
    with pytest.raises(ShapeError, match="rank"):
        x.gather(c.tensor([0, 1], dtype="u32"), 0)
    with pytest.raises(ShapeError, match="source shape"):
        x.index_add(c.tensor([0, 1], dtype="u32"), c.ones(3, 3), 0)
    with pytest.raises(ShapeError, match="2-d"):
        c.ones(3).embedding(c.tensor([0], dtype="u32"))
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="unsupported index"):
        x["a"]


def test_view_ops_check_their_arguments():
    x = c.ones(2, 3, 4)
    for bad in [lambda: x.reshape(5, 5), lambda: x.reshape(-1, -1), lambda: x.transpose(0, 3), lambda: x.permute(0, 1),
                lambda: x.permute(0, 0, 1), lambda: x.narrow(1, 2, 2), lambda: x.narrow(5, 0, 1),
                lambda: x.broadcast_as(3, 3, 4), lambda: x.squeeze(7), lambda: x.chunk(0), lambda: x.flatten(2, 1),
                lambda: x.sum(3), lambda: x.sum([0, 0]), lambda: x.t().t().t().reshape(7)]:
        with pytest.raises(ShapeError):
            bad()


def test_bad_shapes_and_data_are_rejected():
    for bad in [lambda: c.zeros(-1, 2), lambda: c.zeros(*([1] * 33)), lambda: c.ones("ab"),
                lambda: c.Tensor([[1, 2], [3]]), lambda: c.Tensor({"a": 1}), lambda: c.Tensor(["x", "y"])]:
        with pytest.raises((ShapeError, TypeError, ValueError)):
            bad()
    with pytest.raises(DTypeError, match="unknown dtype 'f8'"):
        c.zeros(2, dtype="f8")
    with pytest.raises(DTypeError, match="complex"):
        c.Tensor(np.ones(2, dtype=np.complex64))


def test_huge_allocation_is_a_memory_error_not_a_crash():
    with pytest.raises(MemoryError):
        c.empty(2**44, dtype="f64")
    with pytest.raises(MemoryError):
        c.zeros(1 << 22, 1 << 22)
    # sizes past 2^64 bytes would reach the C allocator wrapped to a few bytes
    with pytest.raises(MemoryError):
        c.zeros(1 << 62, 4)
    column, row = c.ones((1, 1)).broadcast_as((1 << 40, 1)), c.ones((1, 1)).broadcast_as((1, 1 << 40))
    with pytest.raises(MemoryError):
        column * row  # views of one element: only the 2^80-element result is allocated


def test_concat_and_stack_mismatches():
    with pytest.raises(ShapeError, match="differ outside dim 0"):
        c.cat([c.ones(2, 3), c.ones(2, 4)], 0)
    with pytest.raises(ShapeError, match="shapes differ"):
        c.stack([c.ones(2), c.ones(3)])
    with pytest.raises(DTypeError):
        c.cat([c.ones(2), c.ones(2, dtype="f16")])
    with pytest.raises(ShapeError, match="at least one"):
        c.cat([])


def test_conv_and_pool_mismatches():
    x = c.ones(1, 3, 8, 8)
    with pytest.raises(ShapeError, match="channels"):
        x.conv2d(c.ones(4, 2, 3, 3))
    with pytest.raises(ShapeError, match="too small"):
        x.conv2d(c.ones(4, 3, 9, 9))
    with pytest.raises(ShapeError, match="4-d"):
        x.conv2d(c.ones(3, 3))
    with pytest.raises(DTypeError, match="float"):
        c.ones(1, 3, 8, 8, dtype="u8").conv2d(c.ones(4, 3, 3, 3, dtype="u8"))
    with pytest.raises(ShapeError):
        x.max_pool2d(9)
    with pytest.raises(ShapeError):
        c.ones(8, 8).max_pool2d(2)


def test_norm_and_rope_mismatches():
    x = c.ones(2, 3, 8)
    with pytest.raises(ShapeError, match="trailing dims"):
        c.functional.layer_norm(x, c.ones(7), c.zeros(7))
    with pytest.raises(ShapeError, match="cos/sin"):
        c.functional.rope(c.ones(1, 2, 5, 8), c.ones(5, 3), c.ones(5, 3))
    with pytest.raises(ShapeError, match="even"):
        c.functional.rope(c.ones(1, 2, 5, 7), c.ones(5, 3), c.ones(5, 3))


def test_integer_division_by_zero_is_an_error():
    with pytest.raises(KernelError, match="division by zero"):
        c.tensor([1, 2], dtype="i64") / c.tensor([1, 0], dtype="i64")
    with pytest.raises(KernelError, match="division by zero"):
        c.tensor([1, 2], dtype="u8") / 0


def test_float_division_by_zero_is_ieee():
    got = (c.Tensor([1.0, -1.0, 0.0]) / c.Tensor([0.0, 0.0, 0.0])).values()
    assert got[0] == math.inf and got[1] == -math.inf and math.isnan(got[2])


def test_scalars_an_integer_tensor_cannot_hold_are_errors():
    x = c.tensor([1, 2, 3], dtype="u8")
    with pytest.raises(DTypeError, match="2.5"):
        x + 2.5
    with pytest.raises(DTypeError, match="does not fit in u8"):
        x == 300
    with pytest.raises(DTypeError):
        x * math.nan
    assert (x + 3).values() == [4, 5, 6]
    assert (x - 2).values() == [255, 0, 1]  # u8 wraps, as in Candle and numpy


def test_reductions_of_empty_dims():
    assert c.zeros(0, 3).sum(0).values() == [0.0, 0.0, 0.0]
    assert c.ones(0, 3).prod(0).values() == [1.0, 1.0, 1.0]
    with pytest.raises(ShapeError, match="empty dim"):
        c.zeros(0, 3).amax(0)
    with pytest.raises(ShapeError, match="empty dim"):
        c.zeros(0).argmax()
    assert c.zeros(3, 0).amax(0).shape == (0,)


def test_no_device_mixing():
    x = c.ones(2)

    class Other:  # a tensor from another device looks like this to the core
        pass

    with pytest.raises(TypeError):
        x + Other()
