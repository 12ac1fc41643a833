"""Hostile pickles in PyTorch checkpoints (the zip's data.pkl, or one of the
five pickles of a legacy file).

- code execution: a global that runs code (os.system, eval, ...) reached
  through every opcode that names or calls one. It must be refused with
  FormatError, and the command must not run (its sentinel file must not exist);
- algorithmic complexity: dicts and sets whose integer keys all hash alike
  (k * (2**61 - 1)), shared references that expand exponentially
  (billion laughs), deep nesting and cycles, and deflate bombs of pickle
  opcodes. Each must end, in time, in FormatError or a correct load;
- huge declared lengths and counts, which must be refused before anything
  that large is allocated.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import candle_api as c
from candle_api.errors import FormatError
from candle_formats.pytorch import MAX_PICKLE

from ..case import Case, pick
from ..files.pickle import encode_global, encode_int, encode_str
from ..files.torch import legacy_file, zip_file
from ..files.zips import zip_bytes
from .formats import read_all

PROTO = b"\x80\x02"
MARK, TUPLE, REDUCE, STOP = b"(", b"t", b"R", b"."
CALLABLES = ["os.system", "posix.system", "builtins.eval", "builtins.exec", "subprocess.check_call",
             "subprocess.Popen", "os.popen", "pty.spawn", "builtins.__import__", "importlib.import_module",
             "pickle.loads", "numpy.load", "builtins.getattr", "torch.load", "nt.system", "code.interact"]


def _call(qualname: str, args: list, via: str) -> bytes:
    """qualname(*args) through GLOBAL, STACK_GLOBAL, INST, OBJ or NEWOBJ."""
    module, _, name = qualname.rpartition(".")
    packed = b"".join(encode_str(a) if isinstance(a, str) else encode_int(a) for a in args)
    if via == "INST":
        return MARK + packed + b"i" + module.encode() + b"\n" + name.encode() + b"\n"
    if via == "OBJ":
        return MARK + encode_global(qualname) + packed + b"o"
    callee = encode_str(module) + encode_str(name) + b"\x93" if via == "STACK_GLOBAL" else encode_global(qualname)
    return callee + MARK + packed + TUPLE + (b"\x81" if via == "NEWOBJ" else REDUCE)


def code_execution(rng, sentinel: Path) -> tuple[bytes, str]:
    qualname, via = pick(rng, CALLABLES), pick(rng, ["GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "NEWOBJ"])
    command = f"touch {sentinel}"
    args = {"builtins.eval": [f"open({str(sentinel)!r}, 'w')"], "builtins.exec": [f"open({str(sentinel)!r}, 'w')"],
            "subprocess.check_call": [command], "subprocess.Popen": [command]}.get(qualname, [command])
    disguise = pick(rng, ["plain", "plain", "in a dict", "dotted name", "as a storage type"])
    if disguise == "dotted name":  # an allowed global's attribute: STACK_GLOBAL resolves dotted names
        body = encode_str("torch._utils") + encode_str("_rebuild_tensor_v2.__globals__") + b"\x93"
        return PROTO + body + STOP, "torch._utils._rebuild_tensor_v2.__globals__ via STACK_GLOBAL"
    if disguise == "as a storage type":  # a persistent id naming a callable as its storage class
        body = MARK + encode_str("storage") + encode_global(qualname) + encode_str("0") + encode_str("cpu") + \
            encode_int(1) + TUPLE + b"Q"
        return PROTO + body + STOP, f"{qualname} as a storage class"
    body = _call(qualname, args, via)
    if disguise == "in a dict":
        body = b"}" + encode_str("state") + body + b"s"
    return PROTO + body + STOP, f"{qualname} via {via}{', in a dict' * (disguise == 'in a dict')}"


def colliding_keys(rng) -> tuple[bytes, str]:
    """Integer keys that all hash to 0 (Python hashes ints modulo 2**61 - 1). A loader that hashed them
    into a dict would take minutes on 100,000 (n^2 / 2 probes), past the family's 20 s timeout."""
    n = pick(rng, [20_000, 50_000, 100_000])
    container = pick(rng, ["dict", "OrderedDict", "set", "frozenset"])
    value = {"dict": b"N", "OrderedDict": b"N\x86"}.get(container, b"")  # (key, None) pairs for OrderedDict
    items = [encode_int(k * (2**61 - 1) * pick(rng, [1, -1])) + value for k in range(1, n + 1)]
    batches = [b"".join(items[i:i + 1000]) for i in range(0, n, 1000)]  # as pickle batches SETITEMS
    if container == "dict":
        body = b"}" + b"".join(MARK + batch + b"u" for batch in batches)
    elif container == "OrderedDict":
        pairs = b"]" + b"".join(MARK + batch + b"e" for batch in batches)
        body = encode_global("collections.OrderedDict") + MARK + pairs + TUPLE + REDUCE
    elif container == "set":
        body = b"\x8f" + b"".join(MARK + batch + b"\x90" for batch in batches)
    else:
        body = MARK + b"".join(batches) + b"\x91"
    return PROTO + b"}" + encode_str("x") + body + b"s" + STOP, f"{n} colliding int keys in a {container}"


def billion_laughs(rng) -> tuple[bytes, str]:
    """Each level a container of ten references to the level below."""
    levels, kind = pick(rng, [20, 30, 60]), pick(rng, ["list", "tuple", "dict"])
    out = PROTO + encode_str("lol") + b"\x94"
    for level in range(levels):
        refs = b"".join((encode_str(f"k{i}") if kind == "dict" else b"") + b"h" + bytes([level]) for i in range(10))
        out += b"0" + {"list": b"]" + MARK + refs + b"e", "tuple": MARK + refs + TUPLE,
                       "dict": b"}" + MARK + refs + b"u"}[kind]
        out += b"\x94"  # POP the level below (the memo keeps it), MEMOIZE this one for the next
    return out + STOP, f"{levels} levels of ten shared references in {kind}s"


def deep(rng) -> tuple[bytes, str]:
    depth, kind = pick(rng, [1000, 100_000, 500_000]), pick(rng, ["list", "tuple", "dict", "cycle"])
    if kind == "cycle":  # a list that contains itself
        return PROTO + b"]\x94h\x00a" + STOP, "a list containing itself"
    if kind == "list":
        body = b"]" * depth + b"a" * (depth - 1)
    elif kind == "tuple":
        body = MARK * depth + b"N" + TUPLE * depth
    else:
        body = (b"}" + encode_str("k")) * depth + b"}" + b"s" * depth
    return PROTO + body + STOP, f"{kind}s nested {depth} deep"


def huge_lengths(rng) -> tuple[bytes, str]:
    """An opcode declaring far more than the file holds, or filling the stack or memo."""
    op = pick(rng, ["BINUNICODE8", "BINBYTES8", "BINUNICODE", "LONG4", "FRAME", "LONG_BINPUT", "LONG_BINGET",
                    "MARKs", "stack", "memo", "big ints"])
    n = pick(rng, [2**31 - 1, 2**32 - 1, 2**62, 2**63 - 1, 2**64 - 1])
    body = {
        "BINUNICODE8": lambda: b"\x8d" + struct.pack("<Q", n % 2**64) + b"abc",
        "BINBYTES8": lambda: b"\x8e" + struct.pack("<Q", n % 2**64) + b"abc",
        "BINUNICODE": lambda: b"X" + struct.pack("<I", n % 2**32) + b"abc",
        "LONG4": lambda: b"\x8b" + struct.pack("<i", 2**31 - 1) + b"\x01" * 16,
        "FRAME": lambda: b"\x95" + struct.pack("<Q", n % 2**64) + b"N",
        "LONG_BINPUT": lambda: b"N" + b"r" + struct.pack("<I", n % 2**32),
        "LONG_BINGET": lambda: b"j" + struct.pack("<I", n % 2**32),
        "MARKs": lambda: MARK * 2_000_000 + b"N",
        "stack": lambda: b"N" * 2_000_000,
        "memo": lambda: b"N" + b"\x94" * 2_000_000,
        "big ints": lambda: b"}" + b"".join(encode_int(i) + b"\x8a\xff" + bytes([i % 256]) * 255 + b"s"
                                            for i in range(20_000)),
    }[op]()
    return PROTO + body + STOP, f"{op} ({n})"


def deflate_bomb(rng) -> tuple[bytes, str]:
    """A few hundred KiB of deflated data.pkl that inflates to MiBs of cheap opcodes: within
    MAX_PICKLE (loaded or refused in seconds) and past it (refused at once). Within it, 2 MiB more
    often than 8, which the pickle VM takes 6 s to walk: they were most of the quick run's time."""
    n = pick(rng, [1 << 20] * 15 + [MAX_PICKLE // 4] * 3 + [MAX_PICKLE] * 2)
    return PROTO + b"N0" * n + b"N" + STOP, f"deflated data.pkl of {2 * n >> 20} MiB of NONE/POP"


ATTACKS = {"code execution": code_execution, "colliding keys": colliding_keys, "billion laughs": billion_laughs,
           "deep nesting": deep, "huge lengths": huge_lengths, "deflate bomb": deflate_bomb}
#: case index -> attack: code execution most often, the slow deflate bombs least
CYCLE = ["code execution"] * 5 + ["huge lengths"] * 3 + ["colliding keys", "billion laughs", "deep nesting"] * 2 + \
    ["deflate bomb"]


def make(rng, index, tmp) -> Case:
    sentinel = tmp / "pwned"
    attack = CYCLE[index % len(CYCLE)]
    data_pkl, what = code_execution(rng, sentinel) if attack == "code execution" else ATTACKS[attack](rng)
    legacy = attack != "deflate bomb" and rng.random() < 0.3
    path = tmp / "model.pt"
    if attack == "deflate bomb":
        raw = zip_bytes([("archive/data.pkl", data_pkl), ("archive/byteorder", b"little")], zipfile.ZIP_DEFLATED)
    else:
        raw = legacy_file({}, data_pkl) if legacy else zip_file({}, data_pkl, rng)
    path.write_bytes(raw)

    def run():
        tf = c.load(path)
        read_all(tf)
        assert attack != "code execution", f"a pickle calling {what} loaded"
        return "loaded"

    def check():
        assert not sentinel.exists(), f"the pickle ran code: {sentinel.name} was created"

    return Case(f"{attack}: {what} ({'legacy' if legacy else 'zip'})", run, (FormatError,), check)

