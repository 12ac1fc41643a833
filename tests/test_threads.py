"""Kernels are reentrant: ctypes releases the GIL, so Python threads run ops
truly concurrently, and results must not depend on who runs them or how many
threads the backend uses."""

import threading

import numpy as np
import pytest

import candle_api as c
from candle_api import utils


def workload(seed: int) -> list[np.ndarray]:
    """A mix of small ops and large ones that use the backend's thread pool."""
    rng = np.random.default_rng(seed)
    big = c.Tensor(rng.standard_normal((256, 384)).astype(np.float32))
    w = c.Tensor(rng.standard_normal((384, 320)).astype(np.float32))
    mid = c.Tensor(rng.standard_normal((64, 384)).astype(np.float32))
    wide = c.Tensor(rng.standard_normal((384, 640)).astype(np.float32))
    small = c.Tensor(rng.standard_normal((3, 5)).astype(np.float32))
    ids = c.tensor(rng.integers(0, 256, size=100), dtype="u32")
    img = c.Tensor(rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
    kernel = c.Tensor(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    q, k, v = (c.Tensor(rng.standard_normal((2, 4, 100, 32)).astype(np.float32)) for _ in range(3))
    row = c.Tensor(rng.standard_normal((1, 600)).astype(np.float32))
    tall = c.Tensor(rng.standard_normal((600, 300)).astype(np.float32))
    row3 = c.Tensor(rng.standard_normal((1, 1100)).astype(np.float32))
    tall3 = c.Tensor(rng.standard_normal((1100, 200)).astype(np.float32))
    sig = c.Tensor(rng.standard_normal((1, 16, 300)).astype(np.float32))
    up = c.Tensor(rng.standard_normal((16, 8, 8)).astype(np.float32))
    return [
        (row @ tall).numpy(),  # a GEMV large enough to be cut into K slices
        (row3 @ tall3).numpy(),  # three K slices: on two threads, output ranges too
        (row3.to_dtype("bf16") @ tall3.to_dtype("bf16")).to_dtype("f32").numpy(),
        c.functional.scaled_dot_product_attention(q, k, v, is_causal=True).numpy(),
        (big @ w).numpy(),
        (mid @ wide).numpy(),  # few rows: threads split the columns
        (big.to_dtype("f64") @ w.to_dtype("f64")).numpy(),
        (big.to_dtype("f16") @ w.to_dtype("f16")).to_dtype("f32").numpy(),
        big.softmax(-1).numpy(),
        big.sum_all().numpy(),
        big.t().contiguous().exp().sum(0).numpy(),
        big.index_select(ids, 0).numpy(),
        (small * 2 + 1).gelu().numpy(),
        img.conv2d(kernel, padding=1).max_pool2d(2).numpy(),
        sig.conv_transpose1d(up, stride=4, padding=2).numpy(),  # one image: the pool splits its channels
        c.functional.layer_norm(big, c.ones(384), c.zeros(384)).numpy(),
        big.to_dtype("f16").to_dtype("f32").mean(1).numpy(),
        big.sort(-1, descending=True).indices.numpy(),  # rows spread over the threads
        big.topk(7, dim=0).indices.numpy(),
    ]


def assert_same(results_a, results_b):
    for a, b in zip(results_a, results_b):
        np.testing.assert_array_equal(a, b)


def test_eight_threads_running_ops_concurrently_get_identical_results():
    expected = [workload(seed) for seed in range(8)]
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def run(seed):
        try:
            start.wait()
            for _ in range(3):
                out = workload(seed)
                assert_same(out, expected[seed])
            results[seed] = out
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]
    assert sorted(results) == list(range(8))


@pytest.mark.parametrize("threads", [1, 3])
def test_results_do_not_depend_on_the_thread_count(threads):
    before = utils.get_num_threads()
    baseline = workload(11)
    try:
        utils.set_num_threads(threads)
        assert utils.get_num_threads() == threads
        assert_same(workload(11), baseline)
    finally:
        utils.set_num_threads(before)


def test_set_num_threads_rejects_nonsense():
    with pytest.raises(c.ArgumentError):
        utils.set_num_threads(0)
