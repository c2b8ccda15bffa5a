"""A pickle interpreter that builds only plain values, for reading torch checkpoints.

``pickle.Unpickler`` lets a file reach any object it is handed: BUILD writes into an
object's ``__dict__`` (frozen dataclasses included) or calls its ``__setstate__``, and
a global named by ``find_class`` is a live object of the importing module. This
machine runs the opcodes itself and can therefore say what each one may touch:

- it creates only ``None``, booleans, ints, floats, strings, tuples, lists and dicts;
  APPEND goes only into a list it made, SETITEM only into a dict (or an ``OrderedDict``
  the handler made), with a string or a small non-negative integer as the key;
- GLOBAL, REDUCE, BINPERSID and BUILD are the handler's: it answers a global with a
  token, decides what a call of that token makes, maps persistent ids, and accepts or
  refuses each BUILD. The machine never sets an attribute on anything.

It reads the opcodes ``torch.save`` writes (protocol 2, plus the framing, MEMOIZE,
SHORT_BINUNICODE and STACK_GLOBAL of protocol 4); any other opcode is refused. The
stack, the memo and the marks are plain lists and a dict bounded by the pickle's
length, which the caller caps.
"""

from __future__ import annotations

import struct
import sys
from collections import OrderedDict
from typing import Any, Protocol

from onespeech.features.errors import CheckpointFormatError

PLAIN_VALUES = (str, int, float, bool, type(None))
# ints below the modulus hash to themselves, so no two such keys collide; ints the file
# picks to share one hash would make each dict insert walk all the others (quadratic)
_HASH_MODULUS = sys.hash_info.modulus


def is_plain_key(key: object) -> bool:
    """A key a state dict uses: a parameter name, or an integer id in an optimizer's state."""
    return type(key) is str or (type(key) is int and 0 <= key < _HASH_MODULUS)


class PickleHandler(Protocol):
    """The opcodes that give meaning to names: the machine asks, the handler answers or raises."""

    def find_global(self, module: str, name: str) -> object: ...

    def reduce(self, func: object, args: tuple[Any, ...]) -> object: ...

    def persistent(self, pid: object) -> object: ...

    def build(self, obj: object, state: object) -> None: ...


class _Malformed(Exception):
    """Raised inside the machine; :func:`run_pickle` turns it into a CheckpointFormatError."""


class _Reader:
    """The machine's input: ``data[pos:]``, never past ``end``."""

    def __init__(self, data: bytes | memoryview, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end
        self.hit_end = False  # a read asked for bytes past ``end``

    def take(self, n: int) -> bytes:
        if self.pos + n > self.end:
            self.hit_end = True
            raise _Malformed(f"an opcode argument of {n} bytes runs past the end")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def line(self) -> str:
        stop = min(self.end, self.pos + 256)  # module and attribute names are short
        for i in range(self.pos, stop):
            if self.data[i] == 0x0A:
                text = bytes(self.data[self.pos : i])
                self.pos = i + 1
                return _utf8(text)
        self.hit_end = stop == self.end
        raise _Malformed("a GLOBAL name without its newline in 256 bytes")

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as e:
        raise _Malformed(f"a string that is not UTF-8 ({e})") from None


class _Machine:
    def __init__(self, reader: _Reader, handler: PickleHandler) -> None:
        self.r, self.handler = reader, handler
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    def pop(self) -> Any:
        if not self.stack or (self.marks and len(self.stack) == self.marks[-1]):
            raise _Malformed("an opcode needs a value the stack does not hold")
        return self.stack.pop()

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise _Malformed("an opcode needs a MARK that was never set")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def top(self) -> Any:
        if not self.stack or (self.marks and len(self.stack) == self.marks[-1]):
            raise _Malformed("an opcode needs a value the stack does not hold")
        return self.stack[-1]

    def get(self, index: int) -> None:
        if index not in self.memo:
            raise _Malformed(f"memo entry {index} is read before it is written")
        self.stack.append(self.memo[index])

    def set_items(self, target: Any, items: list[Any]) -> None:
        if type(target) not in (dict, OrderedDict) or len(items) % 2:
            raise _Malformed(f"SETITEM into a {type(target).__name__} (or an odd number of items)")
        for key, value in zip(items[::2], items[1::2], strict=True):
            if not is_plain_key(key):
                raise _Malformed(
                    f"a dict key of type {type(key).__name__}; keys are strings or integers in 0..2**61-2"
                )
            target[key] = value

    def append(self, target: Any, items: list[Any]) -> None:
        if type(target) is not list:
            raise _Malformed(f"APPEND to a {type(target).__name__}, not a list")
        target.extend(items)

    def run(self) -> Any:
        r, push = self.r, self.stack.append
        while True:
            code = r.take(1)
            if code == b".":  # STOP
                value = self.pop()
                if self.stack or self.marks:
                    raise _Malformed("values left on the stack at STOP")
                return value
            step = _OPCODES.get(code)
            if step is None:
                raise _Malformed(f"opcode {code!r}, which torch.save does not write")
            step(self, r, push)


def _proto(m: _Machine, r: _Reader, push: Any) -> None:
    if not 2 <= r.uint(1) <= 5:
        raise _Malformed("a PROTO other than 2..5")


def _tuple(n: int) -> Any:
    def step(m: _Machine, r: _Reader, push: Any) -> None:
        items = [m.pop() for _ in range(n)]
        push(tuple(reversed(items)))

    return step


def _append(m: _Machine, r: _Reader, push: Any) -> None:
    value = m.pop()
    m.append(m.top(), [value])


def _appends(m: _Machine, r: _Reader, push: Any) -> None:
    items = m.pop_mark()
    m.append(m.top(), items)


def _setitem(m: _Machine, r: _Reader, push: Any) -> None:
    value = m.pop()
    key = m.pop()
    m.set_items(m.top(), [key, value])


def _setitems(m: _Machine, r: _Reader, push: Any) -> None:
    items = m.pop_mark()
    m.set_items(m.top(), items)


def _global(m: _Machine, r: _Reader, push: Any) -> None:
    module = r.line()
    name = r.line()
    push(m.handler.find_global(module, name))


def _reduce(m: _Machine, r: _Reader, push: Any) -> None:
    args = m.pop()
    func = m.pop()
    if type(args) is not tuple:
        raise _Malformed(f"REDUCE with arguments of type {type(args).__name__}, not a tuple")
    push(m.handler.reduce(func, args))


def _build(m: _Machine, r: _Reader, push: Any) -> None:
    state = m.pop()
    m.handler.build(m.top(), state)


def _stack_global(m: _Machine, r: _Reader, push: Any) -> None:
    name, module = m.pop(), m.pop()
    if type(module) is not str or type(name) is not str:
        raise _Malformed("STACK_GLOBAL with names that are not strings")
    push(m.handler.find_global(module, name))


def _memoize(m: _Machine, r: _Reader, push: Any) -> None:
    m.memo[len(m.memo)] = m.top()


def _put(width: int) -> Any:
    def step(m: _Machine, r: _Reader, push: Any) -> None:
        m.memo[r.uint(width)] = m.top()

    return step


_OPCODES: dict[bytes, Any] = {
    b"\x80": _proto,
    b"\x95": lambda m, r, push: r.take(8),  # FRAME: a length hint; the opcodes follow inline
    b"(": lambda m, r, push: m.marks.append(len(m.stack)),
    b"0": lambda m, r, push: m.pop(),
    b"1": lambda m, r, push: m.pop_mark(),
    b"N": lambda m, r, push: push(None),
    b"\x88": lambda m, r, push: push(True),
    b"\x89": lambda m, r, push: push(False),
    b"J": lambda m, r, push: push(struct.unpack("<i", r.take(4))[0]),
    b"K": lambda m, r, push: push(r.uint(1)),
    b"M": lambda m, r, push: push(r.uint(2)),
    b"\x8a": lambda m, r, push: push(int.from_bytes(r.take(r.uint(1)), "little", signed=True)),
    b"\x8b": lambda m, r, push: push(int.from_bytes(r.take(r.uint(4)), "little", signed=True)),
    b"G": lambda m, r, push: push(struct.unpack(">d", r.take(8))[0]),
    b"X": lambda m, r, push: push(_utf8(r.take(r.uint(4)))),
    b"\x8c": lambda m, r, push: push(_utf8(r.take(r.uint(1)))),
    b")": lambda m, r, push: push(()),
    b"t": lambda m, r, push: push(tuple(m.pop_mark())),
    b"\x85": _tuple(1),
    b"\x86": _tuple(2),
    b"\x87": _tuple(3),
    b"]": lambda m, r, push: push([]),
    b"a": _append,
    b"e": _appends,
    b"}": lambda m, r, push: push({}),
    b"s": _setitem,
    b"u": _setitems,
    b"q": _put(1),
    b"r": _put(4),
    b"\x94": _memoize,
    b"h": lambda m, r, push: m.get(r.uint(1)),
    b"j": lambda m, r, push: m.get(r.uint(4)),
    b"c": _global,
    b"\x93": _stack_global,
    b"R": _reduce,
    b"Q": lambda m, r, push: push(m.handler.persistent(m.pop())),
    b"b": _build,
}


def run_pickle(
    data: bytes | memoryview, pos: int, handler: PickleHandler, *, what: str, max_bytes: int
) -> tuple[Any, int]:
    """Interpret the pickle at ``data[pos:]``; return its object and the position after its STOP.

    Raises
    ------
    CheckpointFormatError
        A malformed pickle, an opcode outside the set above, or a pickle longer than
        ``max_bytes`` (``what`` names it in the message).
    CheckpointRefusedError, CheckpointFormatError
        Whatever the handler raises, unchanged.
    """
    end = min(len(data), pos + max_bytes)
    reader = _Reader(data, pos, end)
    try:
        value = _Machine(reader, handler).run()
    except _Malformed as e:
        if reader.hit_end and end < len(data):
            raise CheckpointFormatError(
                f"{what} is longer than max_pickle_bytes ({max_bytes}); a state dict's pickle is far smaller"
            ) from None
        raise CheckpointFormatError(f"{what} is not a readable pickle ({e})") from None
    return value, reader.pos
