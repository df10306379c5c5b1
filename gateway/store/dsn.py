"""A PostgreSQL DSN in messages: which database it names, and text about it with no secret left in.

libpq quotes the connection string when it cannot parse it (``... in URI: "postgresql://u:pw@[h"``),
and a DSN that does parse can still reach a message whole. A DSN that does not parse cannot be read
for its password, so ``DsnScrubber`` finds the secret spans the way libpq would look for them (the
user info of a URI up to its last ``@``, a ``password`` query parameter, a ``password=`` keyword
with its quoted or bare value) and refuses any quoted fragment of a message that overlaps one, on
top of replacing every occurrence of the DSN and of each secret.
"""

from __future__ import annotations

import re
import urllib.parse

import psycopg
from psycopg.conninfo import conninfo_to_dict

__all__ = ["DsnScrubber", "describe_dsn"]

_HIDDEN = "***"
_URI = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
# ``password=value`` in the keyword form, or in a URI's query: a quoted value (possibly unterminated) or a bare one.
_KEYWORD = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s&]*)", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]*)"')


def describe_dsn(dsn: str) -> str:
    """The database a DSN names, for messages: host, port and database, never the password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "the configured PostgreSQL database"
    return f"postgresql://{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


def _secret_spans(dsn: str) -> list[tuple[int, int]]:
    """Where in ``dsn`` a password may be, parsed or not (start, end)."""
    spans = [(m.start(1), m.end(1)) for m in _KEYWORD.finditer(dsn) if m.end(1) > m.start(1)]
    if match := _URI.match(dsn):
        at = dsn.rfind("@")  # libpq takes the last '@': a password may hold a raw one
        if at > match.end():
            spans.append((match.end(), at))  # user and password both: a user name is no great loss
    return spans


class DsnScrubber:
    """Removes a DSN's secrets (and the DSN itself) from any text about it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._spans = _secret_spans(dsn)
        secrets = {dsn[start:end] for start, end in self._spans}
        try:
            password = conninfo_to_dict(dsn).get("password")
        except psycopg.Error:
            password = None
        if password:
            secrets.add(str(password))
        secrets |= {urllib.parse.unquote(s) for s in secrets}
        # longest first, so that a secret holding another is replaced whole
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)
        self._where = describe_dsn(dsn)

    def _overlaps_secret(self, fragment: str) -> bool:
        if not fragment:
            return False
        start = self.dsn.find(fragment)
        while start != -1:
            end = start + len(fragment)
            if any(start < s_end and s_start < end for s_start, s_end in self._spans):
                return True
            start = self.dsn.find(fragment, start + 1)
        return False

    def __call__(self, text: str) -> str:
        """``text`` with the DSN named by its database and no secret of it left."""
        text = text.replace(self.dsn, self._where) if self.dsn else text
        text = _QUOTED.sub(lambda m: f'"{_HIDDEN}"' if self._overlaps_secret(m.group(1)) else m.group(0), text)
        for secret in self._secrets:
            text = text.replace(secret, _HIDDEN)
        return text.strip()
