"""A page for people is its HTML with each style sheet and script inlined, and a CSP that allows those by hash."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

import pytest

from gateway.frontends.inlined_page import inlined_page

STATIC = resources.files("gateway.frontends") / "static"


def _hash(name: str) -> str:
    text = (STATIC / name).read_text(encoding="utf-8")
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_each_inlined_file_is_allowed_by_its_hash_and_nothing_else() -> None:
    page = inlined_page("approvals.html", ["common.css", "approvals.css"],
                        ["common.js", "approvals_run.js", "approvals_edit.js", "approvals_card.js", "approvals.js"])
    csp = dict(part.split(" ", 1) for part in page.headers["content-security-policy"].split("; "))
    assert csp["script-src"].split() == [_hash(n) for n in ("common.js", "approvals_run.js", "approvals_edit.js",
                                                            "approvals_card.js", "approvals.js")]
    assert csp["style-src"].split() == [_hash("common.css"), _hash("approvals.css")]
    assert csp["default-src"] == "'none'" and csp["connect-src"] == "'self'" and csp["form-action"] == "'none'"
    body = page.body.decode()
    assert not re.search(r"/\*! [\w.]+ \*/", body)  # every marker replaced
    assert (STATIC / "common.js").read_text(encoding="utf-8") in body


def test_a_file_the_html_has_no_place_for_is_refused_at_build() -> None:
    with pytest.raises(RuntimeError, match=r"static/approvals.html must contain '/\*! console.js \*/' exactly once"):
        inlined_page("approvals.html", ["common.css"], ["console.js"])
