"""The matmul kernels: which layouts go to BLAS and which back to the cpu
kernel, and that every one of them gives NumPy's product."""

import numpy as np
import pytest

import candle_api as c
from candle_api.contract.table import TOLERANCES
from candle_api.info import kernel_providers
from candle_api.layout import Layout
from candle_backend_mkl.blas import GEMM, GEMV, blas_matrix, fold_batch, plan
from candle_backend_mkl.library import NO_TRANS, TRANS


def test_mkl_serves_the_float_products_when_forced():
    served = kernel_providers("cpu")["matmul"]
    assert served["f32"] == served["f64"] == served["bf16"] == "mkl"
    assert served["i32"] == served["f16"] == "cpu"


@pytest.mark.parametrize("rows, cols, rs, cs, want", [
    (3, 4, 4, 1, (NO_TRANS, 4)),      # row-major
    (3, 4, 1, 3, (TRANS, 3)),         # column-major (a transposed view)
    (3, 4, 9, 1, (NO_TRANS, 9)),      # rows of a wider buffer
    (1, 4, 0, 1, (NO_TRANS, 4)),      # one row: its stride does not matter
    (3, 1, 5, 7, (NO_TRANS, 5)),      # one column
    (3, 4, 2, 2, None),               # no unit stride
    (3, 4, 0, 1, None),               # a broadcast row: BLAS needs ld >= cols
    (3, 4, -4, 1, None),              # a flipped view
])
def test_blas_matrix(rows, cols, rs, cs, want):
    assert blas_matrix(rows, cols, rs, cs) == want


def test_fold_batch():
    assert fold_batch((2, 3), (36, 12), (60, 20)) == (6, 12, 20)
    assert fold_batch((2, 1, 3), (36, 99, 12), (60, 5, 20)) == (6, 12, 20)  # size-1 dims are dropped
    assert fold_batch((2, 3), (0, 0), (60, 20)) == (6, 0, 20)               # a broadcast operand
    assert fold_batch((2, 3), (12, 0), (60, 20)) is None                    # broadcast in one dim only
    assert fold_batch((), (), ()) == (1, 0, 0)


def test_plan_kinds():
    row, mat = Layout.contig((1, 64)), Layout.contig((64, 32))
    assert plan(row, mat).kind == GEMV
    assert plan(Layout.contig((16, 64)), mat).kind == GEMM
    assert plan(Layout.contig((2, 1, 64)), Layout.contig((2, 64, 32))).kind == GEMM  # batched
    assert plan(Layout.contig((3, 0)), Layout.contig((0, 5))) is None  # k == 0: the cpu kernel writes zeros


def _layouts(rng, dtype):
    """(a, b) candle tensors in layouts BLAS takes and layouts it does not."""
    def t(shape):
        return c.Tensor(rng.uniform(-1, 1, size=shape).astype(np.float32)).to_dtype(dtype)

    big = t((4, 9, 11))
    return {
        "contiguous": (t((37, 53)), t((53, 70))),
        "transposed": (t((53, 37)).t(), t((70, 53)).t()),
        "batched": (t((3, 20, 33)), t((3, 33, 17))),
        "batch-4d": (t((2, 2, 5, 6)), t((2, 2, 6, 4))),
        "broadcast-batch": (t((2, 1, 3, 4)), t((3, 4, 5))),
        "broadcast-one-dim": (t((2, 3, 4)), t((4, 5)).unsqueeze(0).broadcast_as((2, 4, 5))),
        "gemv-row": (t((1, 600)), t((600, 300))),
        "gemv-row-transposed-weight": (t((1, 600)), t((300, 600)).t()),
        "gemv-column": (t((29, 18)), t((18, 1))),
        "gemv-column-transposed": (t((18, 29)).t(), t((18, 1))),
        "strided-vector": (big[:1, :, 1::2].reshape((9, 5))[:1], t((5, 7))),
        "sliced": (big[:, 1:, ::2], t((4, 6, 3))),
        "flipped": (t((6, 5)).flip([0]), t((5, 4))),
        "empty-k": (t((3, 0)), t((0, 5))),
    }


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
def test_every_layout_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    rtol, atol = TOLERANCES[dtype]
    for name, (a, b) in _layouts(rng, dtype).items():
        got = (a @ b).to_dtype("f64").numpy()
        want = np.matmul(a.to_dtype("f64").numpy(), b.to_dtype("f64").numpy())
        np.testing.assert_allclose(got, want, rtol=8 * rtol, atol=8 * atol, err_msg=f"{dtype} {name}")


def test_large_products_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((257, 300)).astype(np.float32)
    b = rng.standard_normal((300, 129)).astype(np.float32)
    got = (c.Tensor(a) @ c.Tensor(b)).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
def test_tiled_products_match_numpy(dtype):
    """Products large enough that the pool runs them as tiles (edge tiles included), in every
    transposition, batched with a broadcast operand, and both matrix-vector forms."""
    rng = np.random.default_rng(7)
    rtol, atol = TOLERANCES[dtype]

    def t(shape):
        return c.Tensor(rng.uniform(-1, 1, size=shape).astype(np.float32)).to_dtype(dtype)

    cases = {
        "plain": (t((301, 140)), t((140, 259))),
        "a transposed": (t((140, 301)).t(), t((140, 259))),
        "b transposed": (t((301, 140)), t((259, 140)).t()),
        "both transposed": (t((140, 301)).t(), t((259, 140)).t()),
        "batched, b broadcast": (t((3, 130, 96)), t((96, 200))),
        "gemv row": (t((1, 1500)), t((1500, 700))),
        "gemv row, weight transposed": (t((1, 1500)), t((700, 1500)).t()),
        "gemv column": (t((900, 1200)), t((1200, 1))),
    }
    for name, (a, b) in cases.items():
        got = (a @ b).to_dtype("f64").numpy()
        want = np.matmul(a.to_dtype("f64").numpy(), b.to_dtype("f64").numpy())
        np.testing.assert_allclose(got, want, rtol=8 * rtol, atol=8 * atol * np.sqrt(a.shape[-1]),
                                   err_msg=f"{dtype} {name}")


def test_bf16_rounds_once_from_f32():
    """bf16 x bf16 accumulates in f32 and rounds to nearest even once."""
    rng = np.random.default_rng(2)
    a = c.Tensor(rng.standard_normal((16, 64)).astype(np.float32)).to_dtype("bf16")
    b = c.Tensor(rng.standard_normal((64, 8)).astype(np.float32)).to_dtype("bf16")
    exact = a.to_dtype("f64").numpy() @ b.to_dtype("f64").numpy()
    got = (a @ b).to_dtype("f64").numpy()
    spacing = np.abs(exact) * 2.0**-8 + 1e-6  # one bf16 ulp (8 significant bits), plus f32 accumulation
    assert np.all(np.abs(got - exact) <= spacing)


def test_results_do_not_depend_on_the_thread_count():
    """The contract's promise: MKL splits products over rows, columns and the batch, never over k, so each
    element is summed in one order whatever the threads."""
    from candle_api import utils

    rng = np.random.default_rng(6)
    pairs = [((1, 2048), (2048, 1024)), ((2048, 1),), ((300, 1500), (1500, 200)), ((24, 128, 64), (24, 64, 128))]
    before = utils.get_num_threads()
    try:
        for shapes in pairs:
            if len(shapes) == 1:
                a, b = rng.standard_normal((1024, 2048)), rng.standard_normal(shapes[0])
            else:
                a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
            a, b = c.Tensor(a.astype(np.float32)), c.Tensor(b.astype(np.float32))
            outs = []
            for n in (1, 2, 3):
                utils.set_num_threads(n)
                outs.append((a @ b).numpy().copy())
            for out in outs[1:]:
                np.testing.assert_array_equal(out, outs[0], err_msg=str(shapes))
    finally:
        utils.set_num_threads(before)
