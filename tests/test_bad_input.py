"""Bad input and faults in the core (issue 20's findings 1, 2, 5, 8, 9 and 14):
a clear candle error or the documented result, never a crash, a silent wrong
answer or a write into memory the caller may not change.

The writers run in a subprocess: before the fix they died of SIGSEGV, which
would have taken the whole test run down instead of failing one test."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import candle_api as c
from candle_api import nn

# ---- in-place writers against read-only memory (findings 1 and 2) ----------------------------

_SOURCES = {
    "safetensors": "c.save({'w': c.ones(4, 4)}, str(tmp / 'x.safetensors')); t = c.load(str(tmp / 'x.safetensors'))['w']",
    "npy": "np.save(tmp / 'x.npy', np.ones((4, 4), np.float32)); t = c.load(str(tmp / 'x.npy'))['arr_0']",
    "mmap": "np.save(tmp / 'y.npy', np.ones((4, 4), np.float32)); "
            "t = c.from_numpy(np.load(tmp / 'y.npy', mmap_mode='r'))",
    "bytes": "b = np.ones(16, np.float32).tobytes(); t = c.from_numpy(np.frombuffer(b, np.float32)).reshape(4, 4)",
    "readonly_array": "a = np.ones((4, 4), np.float32); a.flags.writeable = False; t = c.from_numpy(a)",
    "dlpack_readonly": "a = np.ones((4, 4), np.float32); a.flags.writeable = False; t = c.from_dlpack(a)",
}
_WRITERS = {
    "init_zeros": "nn.init.zeros_(t)",
    "init_normal": "nn.init.normal_(t)",
    "copy_into": "c.ops.shape.copy_into(t, t.layout, c.zeros(4, 4))",
    "load_state_dict_buffer": "m = nn.Module(); m.register_buffer('b', t); m.load_state_dict({'b': c.zeros(4, 4)})",
    "sgd_step": "c.ops.optim.sgd_step(t, c.ones(4, 4), None, True, 0.1, 0.0, 0.0, False, 0.0)",
    "adamw_step": "c.ops.optim.adamw_step(t, c.ones(4, 4), c.zeros(4, 4), c.zeros(4, 4), 1, 0.1, 0.9, 0.99, 1e-8, 0.0)",
}


@pytest.mark.parametrize("writer", _WRITERS)
@pytest.mark.parametrize("source", _SOURCES)
def test_in_place_writers_refuse_read_only_memory(tmp_path, source, writer):
    code = textwrap.dedent(f"""
        import pathlib, numpy as np, candle_api as c
        from candle_api import nn
        tmp = pathlib.Path({str(tmp_path)!r})
        {_SOURCES[source]}
        before = t.numpy().copy()
        try:
            {_WRITERS[writer]}
        except c.ReadOnlyError as exc:
            assert "read-only" in str(exc) and "copy" in str(exc), exc
            print("refused")
        assert (t.numpy() == before).all(), "the read-only memory changed"
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip() == "refused"


def test_a_copy_of_read_only_memory_is_writable():
    a = np.ones(4, np.float32)
    a.flags.writeable = False
    t = c.from_numpy(a).copy()
    nn.init.zeros_(t)
    assert t.numpy().tolist() == [0.0] * 4 and a.tolist() == [1.0] * 4


# ---- f16 and bf16 means (finding 5) -----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_mean_and_var_accumulate_in_f32(dtype):
    x = c.ones(100000, dtype=dtype)
    assert x.mean_all().item() == 1.0
    assert x.mean(0).dtype == dtype
    assert x.var(0).item() == 0.0
    y = c.Tensor(np.arange(70000) % 3, dtype=dtype)
    assert y.mean_all().item() == pytest.approx(1.0, rel=1e-2)
    assert y.var(0).item() == pytest.approx(np.var(np.arange(70000) % 3, ddof=1), rel=1e-2)


# ---- tensor creation follows the cast rules (finding 8) ----------------------------------------


def test_float_data_into_integers_saturates_as_casts_do():
    assert c.tensor([float("nan"), 1e30, -1e30, 2.7, -2.7], dtype="i64").numpy().tolist() == [
        0, 2**63 - 1, -2**63, 2, -2]
    assert c.tensor([float("nan"), 300.0, -5.0], dtype="u8").numpy().tolist() == [0, 255, 0]
    assert c.full((2,), float("nan"), dtype="i64").numpy().tolist() == [0, 0]
    assert c.full((1,), 1e10, dtype="i32").numpy().tolist() == [2**31 - 1]


@pytest.mark.parametrize("make", [
    lambda: c.tensor([300], dtype="u8"),
    lambda: c.tensor([-1], dtype="u32"),
    lambda: c.tensor([[1, 2**40]], dtype="i32"),
    lambda: c.full((1,), 300, dtype="u8"),
    lambda: c.full((2,), -1, dtype="u32"),
])
def test_integers_that_do_not_fit_are_refused(make):
    with pytest.raises(c.DTypeError, match="does not fit"):
        make()


# ---- clamp with min > max (finding 9) --------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "i32", "u8"])
def test_clamp_with_min_above_max_gives_max(dtype):
    x = c.Tensor([0, 5, 3], dtype=dtype)
    assert x.clamp(2, 1).numpy().tolist() == [1, 1, 1]


# ---- errors that are candle errors (finding 14) -------------------------------------------------


@pytest.mark.parametrize("args,what", [((0, 2**62), "too many"), ((0.0, float("nan"), 1.0), "finite"),
                                       ((0.0, float("inf")), "finite"), ((0, 10, float("nan")), "finite")])
def test_arange_refuses_sizes_and_bounds_it_cannot_make(args, what):
    with pytest.raises(c.CandleError, match=what):
        c.arange(*args)


@pytest.mark.parametrize("n", [0, -1, 2**32 + 2, 10**6])
def test_set_num_threads_refuses_counts_it_cannot_honour(n):
    before = c.utils.get_num_threads()
    with pytest.raises(c.CandleError, match="threads"):
        c.utils.set_num_threads(n)
    assert c.utils.get_num_threads() == before


# ---- found by the fuzz harness (tests/fuzz) ------------------------------------------------------


@pytest.mark.parametrize("buffer", ["m", "v", "momentum"])
def test_optimizer_state_buffers_that_are_read_only_are_refused_before_any_write(buffer):
    ro = np.zeros((2, 2), np.float32)
    ro.flags.writeable = False
    p, g, fresh = c.ones(2, 2), c.ones(2, 2), lambda: c.zeros(2, 2)
    before = p.numpy().copy()
    with pytest.raises(c.ReadOnlyError):
        if buffer == "momentum":
            c.ops.optim.sgd_step(p, g, c.from_numpy(ro), False, 0.1, 0.9, 0.0, False, 0.0)
        else:
            m, v = (c.from_numpy(ro), fresh()) if buffer == "m" else (fresh(), c.from_numpy(ro))
            c.ops.optim.adamw_step(p, g, m, v, 1, 0.1, 0.9, 0.99, 1e-8, 0.0)
    assert (p.numpy() == before).all()


@pytest.mark.parametrize("lo,hi", [(2.5, None), (None, 300), (-1, 4)])
def test_clamp_bounds_an_integer_tensor_cannot_hold_are_refused(lo, hi):
    with pytest.raises(c.DTypeError):
        c.Tensor([1, 2], dtype="u8").clamp(lo, hi)


def test_python_ints_beyond_i64_are_refused_where_integers_are_meant():
    with pytest.raises(c.DTypeError, match="does not fit in i64"):
        c.tensor([2**63, -1])
    with pytest.raises(c.DTypeError, match="does not fit in u32"):
        c.tensor([2**63, 1.5], dtype="u32")
    assert c.tensor([2**63, -1.0]).dtype == "f32"  # a float among them: a float tensor
    assert c.tensor([2**63, -1], dtype="f64").numpy().tolist() == [2.0**63, -1.0]


def test_huge_python_ints_as_float_scalars():
    assert (c.Tensor([1.0], dtype="bf16") + 2**63).numpy().astype(float).tolist() == [2.0**63]
    with pytest.raises(c.DTypeError, match="does not fit"):
        c.Tensor([1.0]) + 10**400


def test_a_scalar_a_half_dtype_rounds_to_infinity_is_that_infinity():
    h = c.Tensor([-float("inf"), 0.0], dtype="f16")
    assert np.isnan((h + 1e10).numpy()[0]) and (h + 1e10).numpy()[1] == np.inf
    assert np.isnan((h * 1e10).numpy()[1])


def test_f16_std_whose_variance_overflows():
    assert c.Tensor([1000.0, -1000.0, 0.0, 0.0, 0.0], dtype="f16").std().item() == pytest.approx(707.1, rel=1e-3)


def test_index_ops_check_indices_when_the_output_is_empty():
    with pytest.raises(c.IndexOutOfRangeError):
        c.zeros(3, 0).index_add(c.Tensor([5]).to_dtype("u32"), c.zeros(3, 1), 1)
    with pytest.raises(c.IndexOutOfRangeError):
        c.zeros(0, 3).scatter(c.Tensor([[4]]).to_dtype("u32"), c.zeros(1, 1), 0)


def test_logsumexp_over_an_empty_dim_is_minus_infinity():
    assert c.zeros(2, 0).logsumexp(1).numpy().tolist() == [-np.inf, -np.inf]


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_reductions_without_identity_refuse_an_empty_dim_even_for_an_empty_output(op):
    with pytest.raises(c.ShapeError, match="empty dim"):
        getattr(c.zeros(1, 3, 0, 0, dtype="i32"), op)(-2)  # NumPy and PyTorch refuse it too


def test_a_scalar_half_power_is_the_square_root():
    out = (c.Tensor([-float("inf"), -0.0, 4.0]) ** 0.5).numpy()
    assert np.isnan(out[0]) and out[1] == 0.0 and np.signbit(out[1]) and out[2] == 2.0


def test_copy_into_refuses_a_source_that_is_not_the_views_shape():
    """A KV cache made for one sequence and fed two wrote the second past its buffer (heap corruption)."""
    from candle_api.ops.shape import copy_into

    dst = c.zeros(2, 4)
    with pytest.raises(c.ShapeError, match=r"a source of shape \(2, 4\) for a view of shape \(1, 4\)"):
        copy_into(dst, dst.layout.narrow(0, 0, 1), c.ones(2, 4))
    with pytest.raises(c.DTypeError):
        copy_into(dst, dst.layout, c.ones(2, 4, dtype="f64"))
    assert dst.numpy().sum() == 0
