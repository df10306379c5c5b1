"""``$ref`` resolution for one OpenAPI operation, over the documents of a ``SpecBundle``.

References are inlined once, when the upstream is built; a recursive schema is unrolled
``MAX_REF_DEPTH`` references deep and is ``{}`` (any value) past that, and an operation's schema
stops growing at ``MAX_SCHEMA_NODES``. A reference that leads nowhere raises ``Bad`` at the
operation, naming the reference (its document and JSON pointer) and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from gateway.upstreams.openapi_spec import SpecBundle

__all__ = ["LITERAL_KEYS", "MAX_REF_DEPTH", "MAX_SCHEMA_NODES", "Bad", "Resolver", "Where"]

# $refs followed along one chain before the schema there is left as {}: deep enough for real
# models, and it is what stops a recursive schema. (Candidate for gateway/core/limits.py.)
MAX_REF_DEPTH = 10
# Schema nodes inlined for one operation; past it further $refs become {}, so that a document
# whose references fan out cannot blow up into an enormous tool schema. (Candidate for limits.py.)
MAX_SCHEMA_NODES = 20_000
# Values that are data, not schemas: never read as $refs or rewritten.
LITERAL_KEYS = frozenset({"example", "examples", "default", "enum", "const"})

Where = tuple[str | int, ...]


class Bad(Exception):
    """One problem with the document, at a JSON path; collected into a ConfigError."""

    def __init__(self, where: Where, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.where, self.code, self.message, self.hint = where, code, message, hint


@dataclass
class Resolver:
    """Inlines ``$ref``s for one operation, within the depth and size limits."""

    bundle: SpecBundle
    where: Where
    nodes: int = 0

    def target(self, node: Any) -> Any:
        """A ``$ref`` object's target (followed until it is not a reference); other nodes as they are."""
        for _ in range(MAX_REF_DEPTH):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            node = self._lookup(node["$ref"])
        return {}

    def schema(self, node: Any, depth: int = 0) -> Any:
        """``node`` with every ``$ref`` inside inlined and OpenAPI 3.0 keywords made JSON Schema."""
        self.nodes += 1
        if isinstance(node, list):
            return [self.schema(v, depth) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            if depth >= MAX_REF_DEPTH or self.nodes > MAX_SCHEMA_NODES:
                return {}
            target = self._lookup(ref)
            siblings = {k: v for k, v in node.items() if k != "$ref"}  # OpenAPI 3.1 allows these
            return self.schema({**target, **siblings} if isinstance(target, dict) else target, depth + 1)
        out = {k: (v if k in LITERAL_KEYS else self.schema(v, depth)) for k, v in node.items()}
        return _json_schema(out)

    def _lookup(self, ref: str) -> Any:
        location, _, pointer = ref.partition("#")
        hint = "check the component's name and path"
        if not location:
            node: Any = self.bundle.root.data
        elif location in self.bundle.documents:
            node = self.bundle.documents[location].data
        elif location in self.bundle.failures:
            raise Bad(self.where, "openapi-ref", f"$ref {ref!r}: {self.bundle.failures[location]}",
                      "external $refs may name files under the spec's directory (a URL spec: its own origin);"
                      " or exclude the operation")
        else:
            raise Bad(self.where, "openapi-ref", f"$ref {ref!r} names another document, which was not loaded",
                      "give the spec as a file or URL so that its external $refs can be read")
        if pointer and not pointer.startswith("/"):
            raise Bad(self.where, "openapi-ref", f"$ref {ref!r} is not a JSON pointer (#/...)", hint)
        for raw in pointer.split("/")[1:] if pointer else ():
            key = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise Bad(self.where, "openapi-ref", f"$ref {ref!r} points at nothing", hint)
        return node


def _json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's ``nullable`` and boolean ``exclusiveMinimum/Maximum`` in JSON Schema's terms."""
    if node.get("nullable") is True and isinstance(node.get("type"), str):
        node = {k: v for k, v in node.items() if k != "nullable"}
        node["type"] = [node["type"], "null"]
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(exclusive), bool):
            node = dict(node)
            if node.pop(exclusive) and bound in node:
                node[exclusive] = node.pop(bound)
    return node
