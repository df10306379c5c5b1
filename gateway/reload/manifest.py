"""A manifest of policy files and their SHA-256, so that a set is loaded only whole and as reviewed.

`gateway check --write-manifest` writes it; with `reload.manifest` configured the gateway loads a set
only when every file it would load is listed with the same digest and no listed file is missing.
Paths in it are relative to the manifest's own directory (as written, not through symlinks), in
``/`` form and sorted, so the same files give the same bytes on every machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.core.diagnostics import Diagnostic
from gateway.core.limits import MAX_MANIFEST_BYTES

__all__ = ["MANIFEST_NAME", "MANIFEST_VERSION", "build_manifest", "render_manifest", "verify_manifest",
           "write_manifest"]

MANIFEST_NAME = "policies.manifest.json"
MANIFEST_VERSION = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_HINT = "run `gateway check --write-manifest` after the policy files are complete, and write the manifest last"


def _name(file: Path, manifest: Path) -> str:
    """``file`` relative to the manifest's directory, in ``/`` form."""
    return Path(os.path.relpath(file.absolute(), manifest.absolute().parent)).as_posix()


def _sha256(file: Path) -> str:
    with file.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def build_manifest(files: Sequence[Path], manifest: Path) -> dict[str, Any]:
    """The manifest of ``files`` for a manifest written at ``manifest``; raises ``OSError`` if one is unreadable."""
    return {"version": MANIFEST_VERSION, "files": {_name(f, manifest): _sha256(f) for f in files}}


def render_manifest(data: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, one trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_manifest(path: Path, text: str) -> None:
    """Write atomically (a temp file beside it, then rename), so a reader never sees half a manifest."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read(path: Path) -> tuple[dict[str, str] | None, str]:
    """The manifest's ``files`` map, or None and why not."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        return None, f"cannot read the manifest: {exc.strerror or exc}"
    if len(raw) > MAX_MANIFEST_BYTES:
        return None, f"the manifest is larger than {MAX_MANIFEST_BYTES} bytes"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"the manifest is not valid JSON ({exc})"
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return None, f"the manifest is not a version {MANIFEST_VERSION} manifest"
    files = data.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) and _SHA256.match(v)
                                              for k, v in files.items()):
        return None, "the manifest's 'files' must map relative paths to SHA-256 hex digests"
    return files, ""


def verify_manifest(path: Path, contents: Mapping[Path, bytes], source: Path | None = None) -> list[Diagnostic]:
    """Why the files and bytes in ``contents`` do not match the manifest at ``path`` (none: they match
    exactly). ``source`` is where to read it, when that differs (the file ``path`` resolved to)."""
    listed, why = _read(source or path)
    if listed is None:
        return [Diagnostic("manifest-invalid", why, str(path), hint=_HINT)]
    problems: list[Diagnostic] = []
    seen: set[str] = set()
    for file, raw in contents.items():
        name = _name(file, path)
        seen.add(name)
        if name not in listed:
            problems.append(Diagnostic("manifest-mismatch", f"{name} is not in the manifest", str(file), hint=_HINT))
        elif hashlib.sha256(raw).hexdigest() != listed[name]:
            problems.append(Diagnostic("manifest-mismatch", f"{name} does not match its SHA-256 in the manifest",
                                       str(file), hint=_HINT))
    for name in sorted(set(listed) - seen):
        problems.append(Diagnostic("manifest-mismatch", f"{name} is in the manifest but not among the policy files",
                                   str(path), hint=_HINT))
    return problems
