"""A first look at candle-api: tensors, views, ops on the default (cpu) backend,
and which plugin serves what.

    python examples/quickstart.py
"""

import time

import numpy as np

import candle_api as c
from candle_api.info import describe


def main() -> None:
    print(describe(show_ops=False), "\n")
    c.manual_seed(0)

    x = c.Tensor([[3.0, 1, 4, 1], [5, 9, 2, 6]])
    print("x =", x, sep="\n")
    print("x.t() is a view of the same storage:", x.t()._storage is x._storage)
    print("softmax over the last dim:", [round(v, 4) for v in x.softmax(-1).values()[0]])
    print("argmax per row:", x.argmax(1).values(), " x[x > 3]:", x[x > 3].values())

    # A small convolutional feature extractor on random images.
    images = c.randn(8, 3, 32, 32)
    w1, w2 = c.randn(16, 3, 3, 3) * 0.2, c.randn(32, 16, 3, 3) * 0.1
    feats = images.conv2d(w1, padding=1).relu().max_pool2d(2).conv2d(w2, padding=1).relu().max_pool2d(2)
    print("conv features:", feats.shape, "mean", round(feats.mean_all().values(), 4))

    # Matmul on transposed and sliced operands: no "non-contiguous" error, no copy needed.
    a, b = c.randn(512, 1024), c.randn(512, 1024)
    t0 = time.perf_counter()
    y = a[:, ::2] @ b.t()[::2]
    dt = time.perf_counter() - t0
    ref = a.numpy()[:, ::2] @ b.numpy().T[::2]
    print(f"strided matmul {y.shape}: {2 * 512 * 512 * 512 / dt / 1e9:.1f} GFLOP/s, "
          f"max error vs numpy {np.abs(y.numpy() - ref).max():.2e}")

    # Zero-copy interop.
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = c.from_numpy(arr)
    arr[0, 0] = 42
    print("from_numpy shares memory:", t.values()[0][0] == 42, "| back to numpy via DLPack:",
          np.from_dlpack(t * 2).tolist())


if __name__ == "__main__":
    main()
