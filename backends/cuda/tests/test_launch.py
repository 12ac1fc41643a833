"""Kernel parameters as the device ABI lays them out, and layouts merged
before a launch (pure host code: no GPU)."""

from candle_backend_cuda.launch import MAXD, merge, outer_splits, param_layout, strided


def test_members_sit_at_their_natural_alignment():
    # a pointer, an i32, an f64 (padded to 8), then Strided<1>: 8 + 8 * 8 * 2 + 4 bytes, padded to 8
    fmt, members = param_layout("pid1")
    assert members == [(0, 8), (8, 4), (16, 8), (24, 8 * MAXD * 2 + 8)]
    # q[n]: a struct of n i64
    assert param_layout("piq[3]")[1] == [(0, 8), (8, 4), (16, 24)]


def test_strided_values_pad_to_maxd():
    values = strided((2, 3), (3, 1), (0, 1))
    assert values[:MAXD] == [2, 3] + [0] * (MAXD - 2)
    assert values[MAXD:2 * MAXD] == [3, 1] + [0] * (MAXD - 2) and values[-1] == 2


def test_merge_folds_contiguous_dims_and_drops_size_one():
    assert merge((2, 1, 3, 4), [(12, 12, 4, 1)]) == ((24,), [(1,)])
    assert merge((2, 3), [(1, 2)]) == ((2, 3), [(1, 2)])  # a transpose stays
    assert merge((4, 5), [(5, 1), (0, 1)]) == ((4, 5), [(5, 1), (0, 1)])  # a broadcast operand


def test_layouts_past_maxd_dims_split_into_launches():
    shape = (2,) * (MAXD + 2)
    strides = [tuple(2 ** (MAXD + 2 - d) for d in range(MAXD + 2))]  # every dim twice its contiguous stride
    splits = list(outer_splits(shape, strides))
    assert len(splits) == 4  # the two outer dims
    offs, start, inner, _ = splits[3]
    assert offs == [strides[0][0] + strides[0][1]] and start == 3 * 2 ** MAXD and len(inner) == MAXD


def test_how_cublas_reads_a_row_major_operand():
    from candle_backend_cuda.cublaslt import OP_N, OP_T, alignment, operand

    assert operand(8, 1, 4, 8) == (OP_N, 8)      # contiguous (4, 8)
    assert operand(16, 1, 4, 8) == (OP_N, 16)    # rows of a wider buffer
    assert operand(1, 4, 4, 8) == (OP_T, 4)      # a transposed view
    assert operand(5, 1, 1, 8) == (OP_N, 8)      # one row: its row stride is irrelevant
    assert operand(3, 7, 4, 1) == (OP_N, 3)      # one column
    assert operand(2, 2, 4, 8) is None           # neither stride 1: copy first
    assert operand(0, 1, 4, 8) is None           # rows repeated (a broadcast): copy first
    assert alignment(4096, 256 + 64, 512) == 64 and alignment(0, 2) == 2
