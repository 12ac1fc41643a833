"""A small pickle assembler. A pickle is kept as a list of tokens (one
opcode with its argument each), so a mutant can change one value, one
global or one opcode and leave the rest well formed."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..case import interesting_int, pick


@dataclass(frozen=True)
class Tensor:
    """A tensor leaf: a view of storage ``key`` (``numel`` elements of torch
    storage class ``storage``), pickled as torch.save pickles it."""
    storage: str
    key: str
    numel: int
    offset: int
    size: tuple
    stride: tuple


@dataclass
class Token:
    kind: str   # "int", "str", "global", "op"
    value: object
    raw: bytes


def encode_int(v: int) -> bytes:
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if 0 <= v < 65536:
        return b"M" + struct.pack("<H", v)
    if -(2**31) <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return (b"\x8a" + bytes([len(raw)]) if len(raw) < 256 else b"\x8b" + struct.pack("<i", len(raw))) + raw


def encode_str(s: str) -> bytes:
    raw = s.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def encode_global(qualname: str) -> bytes:
    module, _, name = qualname.rpartition(".")
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


class Pickle:
    def __init__(self, legacy: bool = False):
        self.tokens: list[Token] = [Token("op", "PROTO", b"\x80\x02")]
        self.legacy = legacy  # legacy persistent ids carry a sixth item, the view

    def op(self, raw: bytes) -> "Pickle":
        self.tokens.append(Token("op", raw, raw))
        return self

    def int(self, v: int) -> "Pickle":
        self.tokens.append(Token("int", v, encode_int(v)))
        return self

    def str(self, s: str) -> "Pickle":
        self.tokens.append(Token("str", s, encode_str(s)))
        return self

    def global_(self, qualname: str) -> "Pickle":
        self.tokens.append(Token("global", qualname, encode_global(qualname)))
        return self

    def value(self, v) -> "Pickle":
        """Any of None, bool, int, float, str, list, tuple, dict and Tensor."""
        if v is None or isinstance(v, bool):
            return self.op({None: b"N", True: b"\x88", False: b"\x89"}[v])
        if isinstance(v, int):
            return self.int(v)
        if isinstance(v, float):
            return self.op(b"G" + struct.pack(">d", v))
        if isinstance(v, str):
            return self.str(v)
        if isinstance(v, Tensor):
            return self.tensor(v)
        if isinstance(v, tuple):
            self.op(b"(")
            for item in v:
                self.value(item)
            return self.op(b"t")
        if isinstance(v, list):
            self.op(b"]").op(b"(")
            for item in v:
                self.value(item)
            return self.op(b"e")
        self.op(b"}").op(b"(")
        for key, item in v.items():
            self.value(key).value(item)
        return self.op(b"u")

    def tensor(self, t: Tensor) -> "Pickle":
        self.global_("torch._utils._rebuild_tensor_v2").op(b"(")
        self.op(b"(").str("storage").global_(f"torch.{t.storage}").str(t.key).str("cpu").int(t.numel)
        if self.legacy:
            self.op(b"N")
        self.op(b"t").op(b"Q")
        self.int(t.offset).value(tuple(t.size)).value(tuple(t.stride)).op(b"\x89")
        self.global_("collections.OrderedDict").op(b")").op(b"R")
        return self.op(b"t").op(b"R")

    def encoded(self) -> bytes:
        return encoded(self.tokens)


#: Globals a mutant may put in place of another: allowed ones used wrongly, and refused ones.
GLOBALS = ["torch.FloatStorage", "torch.LongStorage", "torch.HalfStorage", "torch.BoolStorage",
           "torch.ComplexFloatStorage", "torch.QInt8Storage", "torch.storage.UntypedStorage", "torch.float32",
           "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter",
           "torch._tensor._rebuild_from_type_v2", "torch.Size", "collections.OrderedDict", "builtins.set",
           "_codecs.encode", "torch.Tensor", "os.system", "builtins.eval", "builtins.getattr", "posix.system",
           "torch._utils._rebuild_tensor_v2.__globals__", "numpy.core.multiarray._reconstruct"]
STRINGS = ["storage", "module", "", "../../etc/passwd", "0", "x" * 65, "cuda:0", "\ud800", "latin1"]
OPCODES = [b"(", b")", b"t", b"R", b"Q", b"0", b"1", b"2", b"b", b"e", b"u", b"s", b"a", b"d", b"l", b"N",
           b"\x85", b"\x86", b"\x87", b"\x81", b"\x92", b"\x93", b"\x94", b"\x8f", b"\x90", b"\x91", b"h\x00",
           b"q\x00", b"j\xff\xff\xff\xff", b"i", b"o", b"\x82\x01", b"P", b"\x97", b"\x95" + b"\xff" * 8, b"."]


def mutant_tokens(rng, p: Pickle) -> tuple[list[Token], str]:
    """A copy of the tokens with one changed, removed, repeated or inserted."""
    tokens = list(p.tokens)
    at = int(rng.integers(1, len(tokens)))
    old = tokens[at]
    kind = pick(rng, ["value", "value", "value", "delete", "repeat", "insert"])
    if kind == "value" and old.kind == "int":
        new = interesting_int(rng, old.value)
        tokens[at] = Token("int", new, encode_int(new))
        return tokens, f"int {old.value} -> {new}"
    if kind == "value" and old.kind == "str":
        new = pick(rng, STRINGS)
        tokens[at] = Token("str", new, encode_str(new))
        return tokens, f"str {old.value[:20]!r} -> {new[:20]!r}"
    if kind == "value" and old.kind == "global":
        new = pick(rng, GLOBALS)
        tokens[at] = Token("global", new, encode_global(new))
        return tokens, f"global {old.value} -> {new}"
    if kind == "delete":
        del tokens[at]
        return tokens, f"token {old.raw[:8]!r} removed"
    if kind == "repeat":
        tokens.insert(at, old)
        return tokens, f"token {old.raw[:8]!r} repeated"
    new = pick(rng, OPCODES)
    tokens.insert(at, Token("op", new, new))
    return tokens, f"opcode {new[:4]!r} inserted"


def encoded(tokens: list[Token]) -> bytes:
    return b"".join(t.raw for t in tokens) + b"."
