"""Resource URIs in the one form a read is decided on and sent upstream, or refused.

A policy decides a read on the URI's text (a rule's glob) and on the variables of the template it
fits (``args``); the upstream reads what its server makes of the same text. MCP servers
percent-decode template variables (the SDK's ``UriTemplate.match`` unquotes each one) and resolve
paths, so ``file:///public/%2e%2e/finance/q3.txt`` and ``file:///%66inance/q3.txt`` name what
``file:///finance/q3.txt`` names. ``normalise`` gives the form both sides then see, after RFC 3986
section 6.2.2 (and RFC 3987 for non-ASCII text):

    scheme    lower case
    host      where it names a machine (http, https, ws, wss, ftp, file): lower case, without the
              scheme's default port, ``file://localhost/`` as ``file:///``; another scheme's
              authority is the server's own identifier (``records://{id}``) and keeps its case
    escapes   decoded, except those of RFC 3986's reserved characters, which stay escapes with
              upper-case hex (``%3a`` is ``%3A``) because decoding them would change how the URI splits
    path      dot segments removed (RFC 3986 section 5.2.4) when the path is hierarchical

It refuses, with the reason (``UnclearUriError``), what servers could read in more than one way:

    ``%2F``                 one segment to the URI, two to a file system once decoded
    ``\\`` or ``%5C``        a separator to Windows and WHATWG parsers, a character to others
    control characters      C0, DEL and C1 (NUL above all), raw or escaped; lone surrogates
    broken escapes          ``%`` without two hex digits; escapes that are not UTF-8
    double escapes          ``%25`` then two hex digits: a server that decodes twice reads another name
    dot segments that stay  in an opaque path (``notes:a/../b``) or as the authority (``records://..``)
    folded segments         an empty one inside the path (``a//b``), one ending in ``.`` or a space
                            (file systems fold them into another name)
    non-NFC text            two spellings of one name
"""

from __future__ import annotations

import re
import string
import unicodedata

from gateway.core.errors import UnclearUriError

__all__ = ["normalise"]

# RFC 3986 Appendix B, the one regular expression every URI fits.
_PARTS = re.compile(r"(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.DOTALL)
_RESERVED = frozenset(":/?#[]@!$&'()*+,;=")
_HEX = frozenset(string.hexdigits)
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_DOUBLE_ESCAPE = re.compile(r"%25[0-9A-Fa-f]{2}")
_MACHINE_HOSTS = frozenset({"http", "https", "ws", "wss", "ftp", "file"})
_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}
_ESCAPE_OR_TEXT = re.compile(r"%[0-9A-F]{2}|[^%]+")


def normalise(uri: str) -> str:
    """``uri`` in normal form; ``UnclearUriError`` when it has no single reading."""
    if _FORBIDDEN.search(uri):
        raise UnclearUriError("it contains a control character")
    if "\\" in uri:
        raise UnclearUriError("it contains a backslash, a path separator to some servers and not to others")
    found = _PARTS.fullmatch(uri)
    assert found is not None  # every string fits (each part is optional)
    scheme, authority, path, query, fragment = found.groups()
    out = ""
    if scheme is not None:
        scheme = scheme.lower()
        out += scheme + ":"
    if authority is not None:
        authority = _decoded(authority)
        if authority in (".", ".."):
            raise UnclearUriError(f"its authority is the dot segment {authority!r}")
        if scheme in _MACHINE_HOSTS:
            authority = _machine(scheme, authority)
        out += "//" + authority
    out += _path(_decoded(path), hierarchical=authority is not None or path.startswith("/"))
    if query is not None:
        out += "?" + _decoded(query)
    if fragment is not None:
        out += "#" + _decoded(fragment)
    if _DOUBLE_ESCAPE.search(out):
        raise UnclearUriError("it has a double escape (%25 then two hex digits), read differently by servers "
                              "that decode twice")
    if not unicodedata.is_normalized("NFC", out):
        raise UnclearUriError("its text is not in Unicode normal form C")
    return out


def _machine(scheme: str, authority: str) -> str:
    """A host that names a machine: lower case, the scheme's default port dropped, ``file://localhost/`` as
    ``file:///`` (RFC 3986 section 6.2.3, RFC 8089)."""
    user, at, host = authority.rpartition("@")
    host = _ESCAPE_OR_TEXT.sub(_lower_text, host)
    name, colon, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if colon and port in ("", _DEFAULT_PORTS.get(scheme)):
        host = name
    if scheme == "file" and not at and host == "localhost":
        host = ""
    return user + at + host


def _lower_text(found: re.Match[str]) -> str:
    """A run of text in lower case; an escape (upper-case hex already) as it is."""
    text = found.group(0)
    return text if text.startswith("%") else text.lower()


def _decoded(part: str) -> str:
    """Escapes decoded, but those of reserved characters (kept, upper case) and ``%`` (kept as ``%25``)."""
    if "%" not in part:
        return part
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        if part[i] != "%":
            j = part.find("%", i)
            j = n if j < 0 else j
            out.append(part[i:j])
            i = j
            continue
        run = bytearray()  # a run of escapes: the UTF-8 bytes of one or more characters
        while i < n and part[i] == "%":
            pair = part[i + 1:i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                raise UnclearUriError("it has a '%' that is not followed by two hex digits")
            run.append(int(pair, 16))
            i += 3
        try:
            text = run.decode("utf-8")
        except UnicodeDecodeError:
            raise UnclearUriError("it has escapes that are not UTF-8") from None
        for char in text:
            if char == "/":
                raise UnclearUriError("it has an encoded '/' (%2F), one path segment to some servers and two "
                                      "to others")
            if char == "\\":
                raise UnclearUriError("it has an encoded backslash (%5C)")
            if _FORBIDDEN.match(char):
                raise UnclearUriError("it has an encoded control character")
            out.append(f"%{ord(char):02X}" if char in _RESERVED or char == "%" else char)
    return "".join(out)


def _path(path: str, *, hierarchical: bool) -> str:
    """The decoded path with its dot segments removed; refused when a segment would be read two ways."""
    if not path:
        return path
    rooted = path.startswith("/")
    segments = path.split("/")[1:] if rooted else path.split("/")
    if "" in segments[:-1]:
        raise UnclearUriError("its path has an empty segment ('//'), which file systems ignore")
    if not hierarchical:
        if "." in segments or ".." in segments:
            raise UnclearUriError("it has a dot segment in a path that has no root to resolve it against")
        kept = segments
    else:
        kept = []
        for i, segment in enumerate(segments):
            last = i == len(segments) - 1
            if segment in (".", ".."):
                if segment == ".." and kept:
                    kept.pop()
                if last:
                    kept.append("")  # /a/b/.. is /a/
            else:
                kept.append(segment)
    if any(s.endswith((".", " ")) for s in kept):
        raise UnclearUriError("a path segment ends in '.' or a space, which some file systems drop")
    return ("/" if rooted else "") + "/".join(kept)
