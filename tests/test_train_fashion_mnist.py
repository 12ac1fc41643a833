"""The Fashion-MNIST example at CI size: real data, a subset, the example's own
code (examples/train_fashion_mnist.py). The full run reaches 89% (MLP) and
91% (CNN); see the example."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import candle_api as c
from candle_api import nn

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_fashion_mnist.py"
spec = importlib.util.spec_from_file_location("train_fashion_mnist", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

pytestmark = pytest.mark.skipif(not (example.DATA_DIR / "train-images-idx3-ubyte.gz").exists(),
                                reason="Debian package dataset-fashion-mnist is not installed")


@pytest.fixture(scope="module")
def data():
    (xtr, ytr), (xte, yte) = example.load_split("train"), example.load_split("t10k")
    assert xtr.shape == (60000, 28, 28) and xte.shape == (10000, 28, 28)
    return (xtr[:6000], ytr[:6000]), (xte[:2000], yte[:2000])


def test_mlp_learns_and_its_varmap_round_trips(data, tmp_path):
    train_set, test_set = data
    model, varmap, losses, accuracy = example.train("mlp", train_set, test_set, epochs=2, lr=1e-3, progress=False)
    assert losses[1] < losses[0] < 1.0
    assert accuracy >= 0.80, accuracy
    path = tmp_path / "mlp.safetensors"
    varmap.save(path)
    fresh = nn.VarMap()
    reloaded = example.MLP(nn.VarBuilder.from_varmap(fresh, "f32", "cpu"))
    fresh.load(path)
    assert example.evaluate(reloaded, *test_set) == accuracy
    assert set(c.load(path)) == {f"fc{i}.{p}" for i in (1, 2, 3) for p in ("weight", "bias")}


def test_cnn_learns(data):
    (xtr, ytr), test_set = data
    _, _, losses, accuracy = example.train("cnn", (xtr[:2000], ytr[:2000]), test_set, epochs=2, lr=2e-3,
                                           progress=False)
    assert losses[1] < losses[0]
    assert accuracy >= 0.70, accuracy


def test_batches_cover_the_data_once():
    images = np.arange(10 * 784, dtype=np.float32).reshape(10, 28, 28)
    labels = np.arange(10)
    seen = [int(v) for _, y in example.batches(images, labels, 4, np.random.default_rng(0)) for v in y.numpy()]
    assert sorted(seen) == list(range(10)) and seen != list(range(10))
