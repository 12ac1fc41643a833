"""PyTorch checkpoints as torch.save writes them (zip, or the legacy stream
of pickles), with random nested state, and mutants of their pickle, their
zip records and their storages."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..case import pick
from . import Expected, random_shape, splice, truncated
from .pickle import Pickle, Tensor, encoded, mutant_tokens
from .zips import field_mutant, zip_bytes

#: torch storage class -> numpy type of its elements
STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
            "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
            "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
KEYS = ["weight", "bias", "running_mean", "layers", "model_state", "optimizer", "encoder", "0", "é"]
SCALARS = [3, -1, 2**40, 0.5, -0.0, "adam", "", True, None]
MAGIC = 0x1950A86A20F9469CFC6C


class State:
    """A random object to pickle, its storages and what loading it must give."""

    def __init__(self, rng):
        self.rng = rng
        self.storages: dict[str, tuple[str, bytes]] = {}  # key -> (storage class, raw bytes)
        self.tensors: dict[str, np.ndarray] = {}
        self.metadata: dict[str, object] = {}
        self.root = self.tensor("") if rng.random() < 0.05 else self.container("", 0)

    def tensor(self, name: str) -> Tensor:
        rng = self.rng
        shape = random_shape(rng, 3, 4)
        if self.storages and rng.random() < 0.2:  # a view of a storage another tensor uses
            key = pick(rng, list(self.storages))
            storage, raw = self.storages[key]
            itemsize = np.dtype(STORAGES[storage]).itemsize
            numel = len(raw) // itemsize
            shape = (int(rng.integers(0, numel + 1)),)
            offset, strides = int(rng.integers(0, numel - shape[0] + 1)), (1,)
        else:
            key, storage = str(len(self.storages)), pick(rng, list(STORAGES))
            itemsize = np.dtype(STORAGES[storage]).itemsize
            strides = list(np.cumprod((1,) + shape[:0:-1])[::-1]) if shape else []
            if shape and rng.random() < 0.3:  # expanded: a dim of stride 0
                strides[int(rng.integers(len(shape)))] = 0
            strides = tuple(int(s) for s in strides)
            offset = int(rng.integers(0, 3))
            numel = offset + (sum((d - 1) * s for d, s in zip(shape, strides)) + 1 if 0 not in shape else 0)
            raw = rng.integers(0, 256, size=numel * itemsize, dtype=np.uint8).tobytes()
            if storage == "BoolStorage":
                raw = bytes(b & 1 for b in raw)
            self.storages[key] = (storage, raw)
        dtype = np.dtype(STORAGES[storage])
        if 0 in shape:
            self.tensors[name] = np.zeros(shape, dtype)
        else:
            self.tensors[name] = np.ndarray(shape, dtype, raw, offset * itemsize, tuple(s * itemsize for s in strides))
        return Tensor(storage, key, len(raw) // itemsize, offset, shape, strides)

    def container(self, name: str, depth: int):
        rng = self.rng
        kind = pick(rng, ["dict", "dict", "list", "tuple"]) if depth else "dict"
        keys = [str(k) for k in rng.permutation(KEYS)[:int(rng.integers(1, 4))]]
        if kind == "dict" and rng.random() < 0.2:
            keys = [int(k) for k in rng.permutation(5)[:len(keys)]]  # an optimizer's parameter ids
        items = {}
        for i, key in enumerate(keys):
            label = key if kind == "dict" else i
            child = f"{name}.{label}" if name else str(label)
            roll = rng.random()
            if roll < 0.5:
                items[key] = self.tensor(child)
            elif roll < 0.75 or depth >= 2:
                items[key] = self.metadata[child] = pick(rng, SCALARS)
            else:
                items[key] = self.container(child, depth + 1)
        values = list(items.values())
        return items if kind == "dict" else values if kind == "list" else tuple(values)

    def pickle(self, legacy: bool) -> Pickle:
        return Pickle(legacy).value(self.root)


def zip_file(storages: dict, data_pkl: bytes, rng, drop: str | None = None, byteorder: bytes = b"little") -> bytes:
    """torch.save's zip: ``storages`` maps each key to (storage class, raw bytes)."""
    folder = pick(rng, ["archive", "model", "x"])
    members = [(f"{folder}/data.pkl", data_pkl), (f"{folder}/byteorder", byteorder)]
    members += [(f"{folder}/data/{key}", raw) for key, (_, raw) in storages.items() if key != drop]
    members.append((f"{folder}/version", b"3\n"))
    return zip_bytes(members, pick(rng, [0, 8]))  # stored or deflated


def legacy_file(storages: dict, main: bytes, storage_sizes: dict | None = None) -> bytes:
    """Magic number, protocol version, sys_info, the object, the storage keys, then each storage."""
    sys_info = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}
    out = [Pickle().value(MAGIC).encoded(), Pickle().value(1001).encoded(), Pickle().value(sys_info).encoded(),
           main, Pickle().value(list(storages)).encoded()]
    for key, (storage, raw) in storages.items():
        numel = len(raw) // np.dtype(STORAGES[storage]).itemsize
        out += [(storage_sizes or {}).get(key, numel).to_bytes(8, "little", signed=True), raw]
    return b"".join(out)


def mutant(rng, state: State, legacy: bool) -> tuple[bytes, str]:
    tokens, what = mutant_tokens(rng, state.pickle(legacy))
    kind = pick(rng, ["pickle", "pickle", "pickle", "record", "file bytes", "truncate"])
    if legacy:
        if kind == "record" and state.storages:
            key = pick(rng, list(state.storages))
            size = int(pick(rng, [-1, 0, 2**62, 2**63 - 1, len(state.storages[key][1]) + 1]))
            return legacy_file(state.storages, state.pickle(True).encoded(), {key: size}), f"legacy storage size {size}"
        raw = legacy_file(state.storages, encoded(tokens) if kind == "pickle" else state.pickle(True).encoded())
    else:
        if kind == "record":
            if state.storages and rng.random() < 0.5:
                key = pick(rng, list(state.storages))
                return zip_file(state.storages, state.pickle(False).encoded(), rng, drop=key), f"record {key} missing"
            order = pick(rng, [b"big", b"", b"LITTLE", b"little" * 10])
            raw = zip_file(state.storages, state.pickle(False).encoded(), rng, byteorder=order)
            return raw, f"byteorder {order[:8]!r}"
        raw = zip_file(state.storages, encoded(tokens) if kind == "pickle" else state.pickle(False).encoded(), rng)
        if kind == "file bytes" and rng.random() < 0.5:
            return field_mutant(rng, raw)
    if kind == "pickle":
        return raw, f"pickle {what}"
    return (splice(rng, raw), "bytes changed") if kind == "file bytes" else (truncated(rng, raw), "truncated")


def make(rng, folder, mutate: bool):
    state, legacy = State(rng), rng.random() < 0.3
    path = folder / "model.pt"
    form = "legacy" if legacy else "zip"
    if not mutate:
        raw = legacy_file(state.storages, state.pickle(True).encoded()) if legacy else \
            zip_file(state.storages, state.pickle(False).encoded(), rng)
        path.write_bytes(raw)
        return path, Expected(state.tensors, state.metadata), f"pytorch {form}: valid"
    raw, what = mutant(rng, state, legacy)
    path.write_bytes(raw)
    return path, None, f"pytorch {form}: {what}"
