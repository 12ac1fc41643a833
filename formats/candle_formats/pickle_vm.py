"""A pickle interpreter that never runs code, for reading PyTorch checkpoints.

It interprets the opcodes of pickle protocols 2 to 5 (and the binary protocol 1
opcodes they use) over plain Python values. A global is looked up in an
allow-list given by the caller and replaced by the object listed there: a
:class:`Function` (our own implementation, never the real one) for the
callables REDUCE / NEWOBJ may call, or an inert marker. Any other global is
refused when the GLOBAL / STACK_GLOBAL opcode is read, before anything could be
called. Persistent ids go to a callback; BUILD only sets instance attributes of
dicts (an OrderedDict's ``_metadata``), which are ignored.

Refused outright: INST and OBJ (protocol 0/1 instantiation), EXT1/2/4 (the
copyreg extension registry can name any global), text persistent ids, out-of-band
buffers, and the protocol 0 text opcodes, which torch.save never writes.

Hostile pickles cannot hang or exhaust memory: every opcode consumes at least
one byte, so the opcodes run are bounded by the size; every length is checked
against the data; the stack and the memo are capped; integers are capped at
``MAX_LONG_BYTES``, set members and dict keys must be scalars (hashing a nested
tuple built from shared references could take exponential time) that few other
keys hash alike (see :func:`scalar`), and the work of the opcodes that touch
many items (TUPLE, APPENDS, SETITEMS, calls...) is charged against a budget
proportional to the bytes read so far.

Every problem raises :class:`PickleError` with the offset of the opcode.
"""

from __future__ import annotations

import struct
import sys
from typing import Any, Callable, Mapping

#: Most items the stack may hold, and most memo entries.
MAX_STACK = 1 << 20
MAX_MEMO = 1 << 20
#: Longest LONG4 integer, in bytes (state dicts hold small ints).
MAX_LONG_BYTES = 1024
#: Longest GLOBAL line (a dotted module name or a qualified name).
MAX_NAME = 1024
#: Work allowed per byte of pickle read (plus a constant): items copied by
#: TUPLE/LIST/DICT/APPENDS/SETITEMS..., and arguments of calls.
WORK_PER_BYTE = 16
WORK_BASE = 1 << 16

#: Types allowed as dict keys and set members: cheap to hash, whatever the pickle.
SCALARS = (str, int, float, bool, type(None), bytes)
#: CPython hashes an int to its residue modulo this prime, so the multiples of
#: it all hash alike and a dict of n of them costs n**2 probes. Below it, no
#: two ints share a hash (but -1 and -2).
HASH_MODULUS = sys.hash_info.modulus


class PickleError(Exception):
    """A pickle the VM refuses; ``pos`` is the offset of the opcode (set by the VM)."""

    def __init__(self, reason: str, pos: int | None = None):
        super().__init__(reason)
        self.reason, self.pos = reason, pos


class Function:
    """An allowed callable global. ``fn`` is our implementation; calls are
    checked against its number of parameters before it runs."""

    __slots__ = ("qualname", "fn", "min_args", "max_args")

    def __init__(self, qualname: str, fn: Callable):
        self.qualname, self.fn = qualname, fn
        code = fn.__code__
        self.max_args = code.co_argcount
        self.min_args = code.co_argcount - len(fn.__defaults__ or ())

    def call(self, args: tuple):
        if not self.min_args <= len(args) <= self.max_args:
            expected = (f"{self.min_args}" if self.min_args == self.max_args
                        else f"{self.min_args} to {self.max_args}")
            raise PickleError(f"{self.qualname} called with {len(args)} arguments, expected {expected}")
        return self.fn(*args)

    def __repr__(self) -> str:
        return self.qualname


def describe(value) -> str:
    """A short description of a pickled value for error messages (never the
    value itself: it may be huge or deeply shared)."""
    if isinstance(value, Function):
        return value.qualname
    if isinstance(value, (str, bytes)) and len(value) <= 40:
        return repr(value)
    if isinstance(value, (int, float, bool, type(None))):
        text = repr(value)
        return text if len(text) <= 40 else f"an int of {len(text)} digits"
    return f"a {type(value).__name__}"


def unpickle(data, start: int, allowed: Mapping[str, Any],
             persistent_load: Callable[[Any], Any] | None = None) -> tuple[Any, int]:
    """Runs the pickle at ``data[start:]`` (bytes, or an mmap) up to its STOP.
    ``allowed`` maps ``"module.name"`` to what the global stands for;
    ``persistent_load(pid)`` resolves BINPERSID (None: refused). Returns the
    object and the offset just past the STOP opcode."""
    vm = _VM(data, start, allowed, persistent_load)
    return vm.run()


class _VM:
    def __init__(self, data, start, allowed, persistent_load):
        self.data, self.pos, self.start = data, start, start
        self.allowed, self.persistent_load = allowed, persistent_load
        self.stack: list = []
        self.marks: list[int] = []  # stack lengths at each open MARK
        self.floor = 0              # items below the innermost mark are out of reach
        self.memo: dict[int, Any] = {}
        self.work = 0

    def run(self) -> tuple[Any, int]:
        op_pos = self.pos
        try:
            while True:
                op_pos = self.pos
                code = self.read(1)[0]
                handler = _OPCODES.get(code)
                if handler is None:
                    raise PickleError(_refusal(code))
                if handler(self) is _STOP:
                    if self.marks or len(self.stack) != 1:
                        raise PickleError(f"STOP with {len(self.stack)} objects on the stack and "
                                          f"{len(self.marks)} open marks, expected exactly one object")
                    return self.stack[0], self.pos
        except PickleError as exc:
            if exc.pos is None:
                exc.pos = op_pos
            raise

    # ---- reading ----------------------------------------------------------------------------
    def read(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise PickleError(f"truncated pickle: needs {n} more bytes at offset {self.pos}, "
                              f"the data ends at {len(self.data)}")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def unpack(self, fmt: struct.Struct):
        return fmt.unpack(self.read(fmt.size))[0]

    def read_sized(self, fmt: struct.Struct) -> bytes:
        """A length prefix in format ``fmt``, then that many bytes."""
        n = self.unpack(fmt)
        if n < 0:
            raise PickleError(f"negative length {n}")
        return self.read(n)

    def line(self) -> str:
        end = self.data.find(b"\n", self.pos, self.pos + MAX_NAME + 1)
        if end < 0:
            raise PickleError(f"unterminated or over-long name (more than {MAX_NAME} bytes)")
        return _utf8(self.read(end + 1 - self.pos)[:-1])

    # ---- the stack ---------------------------------------------------------------------------
    def push(self, value) -> None:
        if len(self.stack) >= MAX_STACK:
            raise PickleError(f"the pickle stack exceeds {MAX_STACK} items")
        self.stack.append(value)

    def pop(self):
        if len(self.stack) <= self.floor:
            raise PickleError("stack underflow")
        return self.stack.pop()

    def top(self):
        if len(self.stack) <= self.floor:
            raise PickleError("stack underflow")
        return self.stack[-1]

    def pop_mark(self) -> list:
        if not self.marks:
            raise PickleError("no MARK to pop to")
        mark = self.marks.pop()
        items = self.stack[mark:]
        del self.stack[mark:]
        self.floor = self.marks[-1] if self.marks else 0
        self.charge(len(items))
        return items

    def charge(self, units: int) -> None:
        self.work += units
        if self.work > WORK_PER_BYTE * (self.pos - self.start) + WORK_BASE:
            raise PickleError("the pickle does too much work for its size (repeated references to large objects)")

    # ---- values -----------------------------------------------------------------------------
    def call(self, callable_, args) -> None:
        if not isinstance(callable_, Function):
            raise PickleError(f"cannot call {describe(callable_)}: only allowed functions are callable")
        if type(args) is not tuple:
            raise PickleError(f"{callable_.qualname} called with {describe(args)} instead of an argument tuple")
        self.charge(1 + sum(len(a) for a in args if isinstance(a, (tuple, list, dict, set, frozenset, str, bytes))))
        self.push(callable_.call(args))

    def memo_put(self, index: int) -> None:
        if index not in self.memo and len(self.memo) >= MAX_MEMO:
            raise PickleError(f"the memo exceeds {MAX_MEMO} entries")
        self.memo[index] = self.top()

    def memo_get(self, index: int) -> None:
        if index not in self.memo:
            raise PickleError(f"memo entry {index} is read before it is written")
        self.push(self.memo[index])

    def resolve(self, module: str, name: str) -> None:
        qualname = f"{module}.{name}"
        if qualname not in self.allowed:
            raise PickleError(f"refusing global '{qualname}': not on the allow-list of a PyTorch checkpoint "
                              "(tensor rebuild functions, storage types, dtypes and plain containers)")
        self.push(self.allowed[qualname])


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise PickleError(f"invalid UTF-8 in a string: {exc.reason}") from None


def scalar(value):
    """``value`` if it may be a dict key or set member, else PickleError.

    Every container the VM builds hashes its keys through here, so no pickle
    can make one slow with keys that hash alike: str and bytes hash with
    SipHash keyed per process (no known way to make many collide); ints are
    refused from the hash modulus on (state dicts key by small ints:
    optimizer parameter ids); and at most about 200 floats share a hash (a
    float hashes to its value modulo the same prime, which a 53-bit mantissa
    meets in at most 6 of the 61 exponent classes), so a float key costs a
    bounded number of probes."""
    if type(value) not in SCALARS:
        raise PickleError(f"{describe(value)} cannot be a dict key or set member: only scalars are allowed")
    if type(value) is int and not -HASH_MODULUS < value < HASH_MODULUS:
        raise PickleError(f"{describe(value)} cannot be a dict key or set member: integers of magnitude "
                          f"{HASH_MODULUS} or more hash alike (a container of them takes quadratic time to build)")
    return value


def _dict_target(vm: _VM) -> dict:
    target = vm.top()
    if type(target) is not dict:
        raise PickleError(f"SETITEM(S) on {describe(target)}, not a dict")
    return target


def _list_target(vm: _VM) -> list:
    target = vm.top()
    if type(target) is not list:
        raise PickleError(f"APPEND(S) on {describe(target)}, not a list")
    return target


def _set_items(target: dict, items: list) -> None:
    if len(items) % 2:
        raise PickleError("odd number of items for SETITEMS / DICT")
    for i in range(0, len(items), 2):
        target[scalar(items[i])] = items[i + 1]


# ---- opcode handlers ---------------------------------------------------------------------------
_U8, _U16, _I32, _U32, _U64, _F64 = (struct.Struct(f) for f in ("<B", "<H", "<i", "<I", "<Q", ">d"))
_STOP = object()


def _proto(vm):
    version = vm.read(1)[0]
    if version > 5:
        raise PickleError(f"pickle protocol {version} is newer than 5")


def _frame(vm):
    size = vm.unpack(_U64)  # frames only group reads; check the size and go on
    if vm.pos + size > len(vm.data):
        raise PickleError(f"frame of {size} bytes runs past the end of the data")


def _long(vm, raw: bytes):
    vm.push(int.from_bytes(raw, "little", signed=True))


def _long4(vm):
    n = vm.unpack(_I32)
    if not 0 <= n <= MAX_LONG_BYTES:
        raise PickleError(f"LONG4 of {n} bytes (at most {MAX_LONG_BYTES} allowed)")
    _long(vm, vm.read(n))


def _tuple_n(n: int):
    def handler(vm):
        items = [vm.pop() for _ in range(n)]
        vm.push(tuple(reversed(items)))
    return handler


def _mark(vm):
    vm.marks.append(len(vm.stack))
    vm.floor = len(vm.stack)


def _pop(vm):
    if len(vm.stack) > vm.floor:
        vm.stack.pop()
    else:  # as pickle does: POP with nothing above the mark discards the mark
        vm.pop_mark()


def _setitem(vm):
    value, key = vm.pop(), vm.pop()
    _dict_target(vm)[scalar(key)] = value


def _setitems(vm):
    items = vm.pop_mark()
    _set_items(_dict_target(vm), items)


def _dict(vm):
    target: dict = {}
    _set_items(target, vm.pop_mark())
    vm.push(target)


def _append(vm):
    value = vm.pop()
    _list_target(vm).append(value)


def _appends(vm):
    items = vm.pop_mark()
    _list_target(vm).extend(items)


def _additems(vm):
    items = vm.pop_mark()
    target = vm.top()
    if type(target) is not set:
        raise PickleError(f"ADDITEMS on {describe(target)}, not a set")
    target.update(scalar(item) for item in items)


def _frozenset(vm):
    vm.push(frozenset(scalar(item) for item in vm.pop_mark()))


def _stack_global(vm):
    name, module = vm.pop(), vm.pop()
    if type(module) is not str or type(name) is not str:
        raise PickleError(f"STACK_GLOBAL of {describe(module)} and {describe(name)}, expected two strings")
    vm.resolve(module, name)


def _reduce(vm):
    args = vm.pop()
    vm.call(vm.pop(), args)


def _newobj_ex(vm):
    kwargs, args = vm.pop(), vm.pop()
    if type(kwargs) is not dict or kwargs:
        raise PickleError(f"NEWOBJ_EX with keyword arguments ({describe(kwargs)})")
    vm.call(vm.pop(), args)


def _build(vm):
    state = vm.pop()
    target = vm.top()
    if type(target) is not dict or not (state is None or type(state) in (dict, tuple)):
        raise PickleError(f"BUILD of {describe(target)} with {describe(state)}: only attributes of dicts "
                          "(an OrderedDict's _metadata) can be set, and they are ignored")


def _binpersid(vm):
    pid = vm.pop()
    if vm.persistent_load is None:
        raise PickleError("persistent id where none is expected")
    vm.push(vm.persistent_load(pid))


def _inst(vm):
    module, name = vm.line(), vm.line()
    raise PickleError(f"refusing global '{module}.{name}': the INST opcode instantiates classes")


def _obj(vm):
    items = vm.pop_mark()
    cls = describe(items[0]) if items else "nothing"
    raise PickleError(f"refusing the OBJ opcode: it instantiates {cls}")


_OPCODES: dict[int, Callable[[_VM], Any]] = {
    0x80: _proto,
    0x95: _frame,
    ord("."): lambda vm: _STOP,
    ord("N"): lambda vm: vm.push(None),
    0x88: lambda vm: vm.push(True),
    0x89: lambda vm: vm.push(False),
    ord("J"): lambda vm: vm.push(vm.unpack(_I32)),
    ord("K"): lambda vm: vm.push(vm.unpack(_U8)),
    ord("M"): lambda vm: vm.push(vm.unpack(_U16)),
    0x8A: lambda vm: _long(vm, vm.read_sized(_U8)),
    0x8B: _long4,
    ord("G"): lambda vm: vm.push(vm.unpack(_F64)),
    ord("X"): lambda vm: vm.push(_utf8(vm.read_sized(_U32))),
    0x8C: lambda vm: vm.push(_utf8(vm.read_sized(_U8))),
    0x8D: lambda vm: vm.push(_utf8(vm.read_sized(_U64))),
    # Python 2 str: torch.load decodes it as UTF-8 too
    ord("T"): lambda vm: vm.push(_utf8(vm.read_sized(_I32))),
    ord("U"): lambda vm: vm.push(_utf8(vm.read_sized(_U8))),
    ord("B"): lambda vm: vm.push(vm.read_sized(_U32)),
    ord("C"): lambda vm: vm.push(vm.read_sized(_U8)),
    0x8E: lambda vm: vm.push(vm.read_sized(_U64)),
    0x96: lambda vm: vm.push(vm.read_sized(_U64)),  # BYTEARRAY8, kept as bytes
    ord(")"): lambda vm: vm.push(()),
    ord("t"): lambda vm: vm.push(tuple(vm.pop_mark())),
    0x85: _tuple_n(1),
    0x86: _tuple_n(2),
    0x87: _tuple_n(3),
    ord("]"): lambda vm: vm.push([]),
    ord("l"): lambda vm: vm.push(vm.pop_mark()),
    ord("a"): _append,
    ord("e"): _appends,
    ord("}"): lambda vm: vm.push({}),
    ord("d"): _dict,
    ord("s"): _setitem,
    ord("u"): _setitems,
    0x8F: lambda vm: vm.push(set()),
    0x90: _additems,
    0x91: _frozenset,
    ord("("): _mark,
    ord("0"): _pop,
    ord("1"): lambda vm: vm.pop_mark(),
    ord("2"): lambda vm: vm.push(vm.top()),
    ord("q"): lambda vm: vm.memo_put(vm.unpack(_U8)),
    ord("r"): lambda vm: vm.memo_put(vm.unpack(_U32)),
    0x94: lambda vm: vm.memo_put(len(vm.memo)),
    ord("h"): lambda vm: vm.memo_get(vm.unpack(_U8)),
    ord("j"): lambda vm: vm.memo_get(vm.unpack(_U32)),
    ord("c"): lambda vm: vm.resolve(vm.line(), vm.line()),
    0x93: _stack_global,
    ord("R"): _reduce,
    0x81: _reduce,  # NEWOBJ: cls.__new__(cls, *args); every allowed class builds the same way
    0x92: _newobj_ex,
    ord("b"): _build,
    ord("Q"): _binpersid,
    ord("i"): _inst,
    ord("o"): _obj,
}

_REFUSED = {
    0x82: "EXT1 (the copyreg extension registry can name any global)",
    0x83: "EXT2 (the copyreg extension registry can name any global)",
    0x84: "EXT4 (the copyreg extension registry can name any global)",
    ord("P"): "PERSID (text persistent ids: torch.save writes BINPERSID)",
    0x97: "NEXT_BUFFER (out-of-band buffers)",
    0x98: "READONLY_BUFFER (out-of-band buffers)",
}


def _refusal(code: int) -> str:
    what = _REFUSED.get(code)
    if what is not None:
        return f"refusing opcode {what}"
    return (f"unsupported opcode 0x{code:02x} ({chr(code)!r}): not a pickle opcode of protocols 2-5 "
            "(protocol 0 text opcodes are not used by torch.save)")
