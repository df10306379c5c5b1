"""The C++ engine's checked expressions as trees: read, changed and planned again, never as text.

cel-expr-python gives a checked expression as a serialized ``cel.expr.CheckedExpr`` inside a
``google.protobuf.Any`` and plans one back with ``Env.deserialize``. This module reads that
protobuf wire format into nested field lists, only as deep as the expression tree goes (every
other field is carried through as it was), for the four changes the engine makes to what it
runs: bind ``matches`` to the gateway's cached-RE2 function (``rename_calls``), write a file
variable's checked tree in where a rule reads it (``inline``), join ``when`` and
``messageExpression`` into one program (``conditional``), and list the conditions a call's rules
and tallies evaluate as one program (``listed``). Ids stay unique, and the type and
reference maps follow the nodes, so the planner sees a tree the checker could have produced.

Field numbers are those of cel-spec's ``checked.proto`` and ``syntax.proto``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["Checked", "Node", "bound_names", "calls", "conditional", "decode", "encode", "idents", "inline", "listed",
           "nodes", "rename_calls", "selection", "size"]

Field = list[Any]  # [number, wire type, value]: an int, bytes, or a decoded message (list of fields)
Node = list[Field]  # one decoded message

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# message -> {field number: message it holds}; other length-delimited fields stay bytes
_SCHEMA: dict[str, dict[int, str]] = {
    "Any": {2: "CheckedExpr"},
    "CheckedExpr": {4: "Expr"},  # the maps (2, 3) stay bytes: only their keys are read (``_entry``)
    "MapEntry": {},
    "Expr": {4: "Ident", 5: "Select", 6: "Call", 7: "List", 8: "Struct", 9: "Comprehension"},
    "Ident": {},
    "Select": {1: "Expr"},
    "Call": {1: "Expr", 3: "Expr"},
    "List": {1: "Expr"},
    "Struct": {2: "Entry"},
    "Entry": {3: "Expr", 4: "Expr"},
    "Comprehension": {2: "Expr", 4: "Expr", 5: "Expr", 6: "Expr", 7: "Expr"},
}
# Expr.id; Call.function; Select.operand, Select.field, Select.test_only; Ident.name
_ID, _CALL, _SELECT, _IDENT, _LIST, _FUNCTION, _ARGS = 2, 6, 5, 4, 7, 2, 3


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _put_varint(value: int, out: bytearray) -> None:
    value &= (1 << 64) - 1  # negative int64s take ten bytes, as protobuf writes them
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def decode(data: bytes, message: str = "Any") -> Node:
    """The fields of ``data``, the expression tree's messages decoded too."""
    schema, fields, pos, end = _SCHEMA[message], [], 0, len(data)
    while pos < end:
        key = data[pos]  # keys and lengths are nearly always one byte: read those without a call
        key, pos = (key, pos + 1) if key < 0x80 else _varint(data, pos)
        number, kind = key >> 3, key & 7
        value: Any
        if kind == _LEN:
            size = data[pos]
            size, pos = (size, pos + 1) if size < 0x80 else _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
            if number in schema:
                value = decode(value, schema[number])
        elif kind == _VARINT:
            value, pos = _varint(data, pos)
        elif kind in (_I64, _I32):
            size = 8 if kind == _I64 else 4
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        fields.append([number, kind, value])
    return fields


def encode(node: Node) -> bytes:
    """``node`` in the protobuf wire format again."""
    out = bytearray()
    for number, kind, value in node:
        key = number << 3 | kind
        if key < 0x80:  # field numbers under 16: a one-byte key, the common case
            out.append(key)
        else:
            _put_varint(key, out)
        if kind == _LEN:
            body = encode(value) if type(value) is list else value
            size = len(body)
            if size < 0x80:
                out.append(size)
            else:
                _put_varint(size, out)
            out += body
        elif kind == _VARINT:
            if 0 <= value < 0x80:
                out.append(value)
            else:
                _put_varint(value, out)
        else:
            out += value
    return bytes(out)


def _get(node: Node, number: int) -> Any:
    return next((value for n, _, value in node if n == number), None)


def _text(node: Node, number: int) -> str | None:
    value = _get(node, number)
    return value.decode() if isinstance(value, bytes) else None


class Checked:
    """One checked expression, decoded: its tree and its type and reference maps by node id."""

    def __init__(self, serialized: bytes) -> None:
        # decoded afresh each time (changes use it up); nothing decoded is kept, so the collector
        # has no more objects to walk once loading is done
        self.wrapper = decode(serialized)
        self.body: Node = _get(self.wrapper, 2)
        self.expr: Node = _get(self.body, 4)

    def serialize(self) -> bytes:
        """The expression in the form ``Env.deserialize`` reads."""
        return encode(self.wrapper)

    def entries(self, number: int) -> dict[int, bytes]:
        """The type map (3) or reference map (2): node id -> the rest of its entry (the value, encoded)."""
        return dict(_entry(entry) for n, _, entry in self.body if n == number)

    def add_entries(self, number: int, entries: Mapping[int, bytes]) -> None:
        """Add type (3) or reference (2) map entries."""
        for key, rest in entries.items():
            out = bytearray(b"\x08")
            _put_varint(key, out)
            self.body.append([number, _LEN, bytes(out) + rest])


def _entry(data: bytes) -> tuple[int, bytes]:
    """A map entry's key and the rest of it; the key comes first as protobuf writes maps."""
    if data[:1] == b"\x08":
        key, pos = _varint(data, 1)
        return key, data[pos:]
    fields = decode(data, "MapEntry")  # another order: read it the long way
    rest = encode([f for f in fields if f[0] != 1])
    return _get(fields, 1) or 0, rest


def nodes(expr: Node) -> Iterator[Node]:
    """Every expression node under (and including) ``expr``."""
    stack = [(expr, "Expr")]
    while stack:
        node, message = stack.pop()
        if message == "Expr":
            yield node
        schema = _SCHEMA[message]
        stack.extend((value, schema[n]) for n, kind, value in node if kind == _LEN and n in schema)


def rename_calls(checked: Checked, names: Mapping[str, str]) -> bool:
    """Call every function named in ``names`` by its new name; whether any was."""
    renamed = False
    for node in nodes(checked.expr):
        call = _get(node, _CALL)
        name = _text(call, _FUNCTION) if call is not None else None
        if name is not None and name in names:
            for field in call:
                if field[0] == _FUNCTION:
                    field[2] = names[name].encode()
            renamed = True
    return renamed


def calls(expr: Node) -> Iterator[str]:
    """The name of every function the expression calls."""
    for node in nodes(expr):
        call = _get(node, _CALL)
        name = _text(call, _FUNCTION) if call is not None else None
        if name is not None:
            yield name


def selection(node: Node, root: str) -> str | None:
    """``NAME`` when ``node`` is ``root.NAME`` (not ``has(root.NAME)``)."""
    select = _get(node, _SELECT)
    if select is None or _get(select, 3):
        return None
    operand = _get(select, 1)
    ident = _get(operand, _IDENT) if operand is not None else None
    return _text(select, 2) if ident is not None and _text(ident, 1) == root else None


def idents(expr: Node) -> set[str]:
    """Every identifier the tree reads, comprehension variables included."""
    return {name for node in nodes(expr) if (ident := _get(node, _IDENT)) is not None
            and (name := _text(ident, 1)) is not None}


def bound_names(expr: Node) -> set[str]:
    """The names the tree's comprehensions bind (iteration and accumulator variables)."""
    found: set[str] = set()
    for node in nodes(expr):
        loop = _get(node, 9)
        if loop is not None:
            found.update(name for number in (1, 3, 8) if (name := _text(loop, number)))
    return found


def size(checked: Checked) -> int:
    """How many expression nodes the tree has."""
    return sum(1 for _ in nodes(checked.expr))


def _max_id(checked: Checked) -> int:
    return _max_id_of(checked.expr)


def _max_id_of(expr: Node) -> int:
    return max(_get(node, _ID) or 0 for node in nodes(expr))


def _renumbered(other: Checked, offset: int) -> tuple[Node, dict[int, bytes], dict[int, bytes]]:
    """``other``'s tree with every id moved by ``offset`` (in place: ``other`` is used up), its maps moved alike."""
    tree = other.expr
    for node in nodes(tree):
        for field in node:
            if field[0] == _ID:
                field[2] += offset
        struct = _get(node, 8)
        for number, _, entry in struct or ():
            if number == 2:
                for field in entry:
                    if field[0] == 1:
                        field[2] += offset
    types = {key + offset: value for key, value in other.entries(3).items()}
    references = {key + offset: value for key, value in other.entries(2).items()}
    return tree, types, references


def _graft(host: Checked, other: Checked, offset: int | None = None) -> Node:
    """``other``'s tree with ids unused in ``host`` (``other`` is used up); its map entries added to ``host``'s.

    ``offset``: ``host``'s largest id, when the caller knows it.
    """
    tree, types, references = _renumbered(other, _max_id(host) if offset is None else offset)
    host.add_entries(3, types)
    host.add_entries(2, references)
    return tree


def inline(host: Checked, root: str, values: Callable[[str], Checked | None]) -> bool:
    """Replace each ``root.NAME`` with ``values(NAME)``'s tree; False (``host`` unchanged in meaning) when
    ``root`` is read any other way, a value is missing, or a comprehension would capture a name it reads.
    ``values`` gives a fresh decoding on every call (each is used up by the place it is written in).
    """
    sites = [(node, name) for node in nodes(host.expr) if (name := selection(node, root)) is not None]
    if sum(1 for node in nodes(host.expr) if _text(_get(node, _IDENT) or [], 1) == root) != len(sites):
        return False  # has(root.x), root["x"], root as a whole: what is read is not a plain selection
    found = {name: values(name) for _, name in sites}
    captured = bound_names(host.expr)
    if root in captured or any(value is None or idents(value.expr) & captured for value in found.values()):
        return False
    used: set[str] = set()
    for node, name in sites:
        value = values(name) if name in used else found[name]
        used.add(name)
        node[:] = _graft(host, value)  # type: ignore[arg-type]
    return True


def conditional(when: Checked, message: Checked) -> Checked:
    """``when ? [message] : []`` from the two trees (both are used up: the result is ``when``'s decoding)."""
    offset = _max_id(when)
    tree = _graft(when, message, offset)
    next_id = max(offset, _max_id_of(tree))

    def expr(kind: int, body: Node) -> Node:
        nonlocal next_id
        next_id += 1
        return [[_ID, _VARINT, next_id], [kind, _LEN, body]]

    condition = list(when.expr)
    call = [[_FUNCTION, _LEN, b"_?_:_"], [_ARGS, _LEN, condition],
            [_ARGS, _LEN, expr(_LIST, [[1, _LEN, tree]])], [_ARGS, _LEN, expr(_LIST, [])]]
    when.expr[:] = expr(_CALL, call)
    return when


def listed(trees: Sequence[Checked]) -> Checked:
    """``[t1, t2, ...]`` from the trees (all used up: the result is the first one's decoding), ids kept unique."""
    host = trees[0]
    elements = [list(host.expr)]
    offset = _max_id(host)
    for other in trees[1:]:
        tree = _graft(host, other, offset)
        offset = max(offset, _max_id_of(tree))
        elements.append(tree)
    host.expr[:] = [[_ID, _VARINT, offset + 1], [_LIST, _LEN, [[1, _LEN, tree] for tree in elements]]]
    return host
