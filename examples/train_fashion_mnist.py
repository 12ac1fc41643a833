"""Train an MLP and a small CNN on Fashion-MNIST with candle-api, report test
accuracy and save the weights with a VarMap (safetensors).

The data comes from Debian's package (60,000 training and 10,000 test images)::

    sudo apt-get install dataset-fashion-mnist      # files in /usr/share/datasets/fashion-mnist/
    python examples/train_fashion_mnist.py                       # both models, their default epochs
    python examples/train_fashion_mnist.py --model cnn --epochs 2 --out cnn.safetensors
    python examples/train_fashion_mnist.py --device cuda          # on a GPU (candle-backend-cuda)

Defaults reach about 89% (MLP, 784-512-512-10) and 91% (CNN) test accuracy.
Models are built Candle-style from a VarBuilder over a VarMap, trained with
AdamW in the PyTorch loop style, and saved with ``VarMap.save``.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np

import candle_api as c
from candle_api import nn, optim

DATA_DIR = Path("/usr/share/datasets/fashion-mnist")
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
MEAN, STD = 0.2860, 0.3530  # of the training images


# ---- data ---------------------------------------------------------------------------------------
def load_split(split: str, data_dir: Path = DATA_DIR) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 28, 28) float32 normalized, labels (n,) int64) of "train" or "t10k"."""
    prefix = data_dir / split
    try:
        with gzip.open(f"{prefix}-images-idx3-ubyte.gz") as f:
            images = np.frombuffer(f.read(), np.uint8, offset=16)
        with gzip.open(f"{prefix}-labels-idx1-ubyte.gz") as f:
            labels = np.frombuffer(f.read(), np.uint8, offset=8)
    except FileNotFoundError:
        raise SystemExit(f"Fashion-MNIST not found in {data_dir}: sudo apt-get install dataset-fashion-mnist") from None
    images = (images.reshape(-1, 28, 28).astype(np.float32) / 255.0 - MEAN) / STD
    return images, labels.astype(np.int64)


def batches(images: np.ndarray, labels: np.ndarray, batch_size: int, rng: np.random.Generator | None,
            device="cpu"):
    """(x, y) tensors of batch_size examples on device, shuffled when rng is given."""
    order = rng.permutation(len(images)) if rng is not None else np.arange(len(images))
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        yield c.Tensor(np.ascontiguousarray(images[idx]), device=device), c.Tensor(labels[idx], device=device)


# ---- models ---------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, vb: nn.VarBuilder, hidden: int = 512):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden, vb=vb.pp("fc1"))
        self.fc2 = nn.Linear(hidden, hidden, vb=vb.pp("fc2"))
        self.fc3 = nn.Linear(hidden, 10, vb=vb.pp("fc3"))

    def forward(self, x):
        x = x.flatten_from(1)
        return self.fc3(self.fc2(self.fc1(x).relu()).relu())


class CNN(nn.Module):
    def __init__(self, vb: nn.VarBuilder):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, vb=vb.pp("conv1"))
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, vb=vb.pp("conv2"))
        self.fc1 = nn.Linear(64 * 7 * 7, 128, vb=vb.pp("fc1"))
        self.fc2 = nn.Linear(128, 10, vb=vb.pp("fc2"))

    def forward(self, x):
        x = x.unsqueeze(1)  # (b, 1, 28, 28)
        x = self.conv1(x).relu().max_pool2d(2)
        x = self.conv2(x).relu().max_pool2d(2)
        return self.fc2(self.fc1(x.flatten_from(1)).relu())


MODELS = {"mlp": (MLP, dict(epochs=10, lr=1e-3)), "cnn": (CNN, dict(epochs=5, lr=1e-3))}


# ---- training ---------------------------------------------------------------------------------------
class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, label: str, stream=sys.stderr):
        self.total, self.label, self.stream, self.start = total, label, stream, time.perf_counter()
        self.shown = 0.0

    def update(self, done: int, note: str = "") -> None:
        now = time.perf_counter()
        if now - self.shown < 0.2 and done < self.total:  # redraw five times a second at most
            return
        self.shown = now
        width = 30
        filled = int(width * done / max(self.total, 1))
        rate = done / max(now - self.start, 1e-9)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                          f"{rate:.0f} img/s {note}")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")


def evaluate(model: nn.Module, images: np.ndarray, labels: np.ndarray, batch_size: int = 1000, device="cpu") -> float:
    model.eval()
    correct = 0
    with c.no_grad():
        for x, y in batches(images, labels, batch_size, None, device):
            hits = model(x).argmax(-1).to_dtype("i64") == y  # u8: count in i64, a u8 sum would wrap
            correct += int(hits.to_dtype("i64").sum_all().item())
    model.train()
    return correct / len(images)


def train(kind: str, train_set, test_set, epochs: int, lr: float, batch_size: int = 128, seed: int = 0,
          progress: bool = True, device="cpu") -> tuple[nn.Module, nn.VarMap, list[float], float]:
    """Trains one model; returns it, its VarMap, the mean loss of each epoch and the test accuracy."""
    c.manual_seed(seed)
    varmap = nn.VarMap()
    model = MODELS[kind][0](nn.VarBuilder.from_varmap(varmap, "f32", device))
    opt = optim.AdamW(varmap.all_vars(), lr=lr, weight_decay=1e-4)
    rng = np.random.default_rng(seed)
    images, labels = train_set
    losses = []
    for epoch in range(epochs):
        bar = Progress(len(images), f"{kind} epoch {epoch + 1}/{epochs}") if progress else None
        total, seen = 0.0, 0
        for x, y in batches(images, labels, batch_size, rng, device):
            loss = nn.loss.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(y)
            total += float(loss.item()) * len(y)
            if bar:
                bar.update(seen, f"loss {total / seen:.4f}")
        if bar:
            bar.close()
        losses.append(total / seen)
    return model, varmap, losses, evaluate(model, *test_set, device=device)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    parser.add_argument("--epochs", type=int, help="default: 10 for the MLP, 5 for the CNN")
    parser.add_argument("--lr", type=float, help="AdamW learning rate (default 1e-3)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--limit", type=int, help="train on the first N images only (a quick run)")
    parser.add_argument("--device", default="cpu", help="where to train: cpu, cuda, cuda:1, vulkan...")
    parser.add_argument("--data", type=Path, default=DATA_DIR, help=f"folder of the IDX files (default {DATA_DIR})")
    parser.add_argument("--out", default="fashion_mnist_{model}.safetensors",
                        help="where to save each model's weights ({model} is replaced)")
    args = parser.parse_args(argv)
    train_set, test_set = load_split("train", args.data), load_split("t10k", args.data)
    if args.limit:
        train_set = (train_set[0][: args.limit], train_set[1][: args.limit])
    for kind in (["mlp", "cnn"] if args.model == "both" else [args.model]):
        defaults = MODELS[kind][1]
        start = time.perf_counter()
        _, varmap, losses, accuracy = train(kind, train_set, test_set, args.epochs or defaults["epochs"],
                                            args.lr or defaults["lr"], args.batch_size, device=args.device)
        out = args.out.format(model=kind)
        varmap.save(out)
        print(f"{kind}: test accuracy {100 * accuracy:.2f}% after {len(losses)} epochs "
              f"(loss {losses[0]:.4f} -> {losses[-1]:.4f}) in {time.perf_counter() - start:.0f} s; weights in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
