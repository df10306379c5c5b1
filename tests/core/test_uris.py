"""``gateway.core.uris.normalise``: the one form of a resource URI, or a refusal that says why (a pure table)."""

from __future__ import annotations

import pytest

from gateway.core.errors import ItemRefusedError, UnclearUriError
from gateway.core.uris import normalise

NORMAL = [
    # already normal
    ("file:///finance/q3.txt", "file:///finance/q3.txt"),
    ("records://13", "records://13"),
    ("notes://users/alice", "notes://users/alice"),
    ("", ""),
    ("x", "x"),
    ("file:///", "file:///"),
    ("file:///dir/", "file:///dir/"),
    # escapes of unreserved characters are decoded, in either case
    ("file:///%66inance/q3.txt", "file:///finance/q3.txt"),
    ("file:///%46%49%4e%41%4E%43%45", "file:///FINANCE"),
    ("records://%31%33", "records://13"),
    ("records://%313", "records://13"),
    ("notes://users/%61lice", "notes://users/alice"),
    ("file:///a%7e%2D%5f", "file:///a~-_"),
    # a reserved character's escape stays one, upper case; '%' stays %25
    ("notes://users/a%2cb", "notes://users/a%2Cb"),
    ("file:///a%3fb%23c", "file:///a%3Fb%23c"),
    ("file:///100%25", "file:///100%25"),
    ("file:///100%25-off", "file:///100%25-off"),
    # other characters are decoded: a space, non-ASCII text (UTF-8)
    ("file:///a%20b", "file:///a b"),
    ("file:///caf%C3%A9", "file:///café"),
    ("file:///café", "file:///café"),
    # dot segments, escaped or not, removed from hierarchical paths (RFC 3986 5.2.4)
    ("file:///./finance/q3.txt", "file:///finance/q3.txt"),
    ("file:///public/../finance/q3.txt", "file:///finance/q3.txt"),
    ("file:///public/%2e%2e/finance/q3.txt", "file:///finance/q3.txt"),
    ("file:///public/%2E%2e/finance/q3.txt", "file:///finance/q3.txt"),
    ("file:///public/.%2E/finance/q3.txt", "file:///finance/q3.txt"),
    ("file:///../finance/q3.txt", "file:///finance/q3.txt"),  # '..' at the root stays at the root
    ("file:///../../../finance", "file:///finance"),
    ("file:///a/b/..", "file:///a/"),
    ("file:///a/b/.", "file:///a/b/"),
    ("file:///a/./b/../c", "file:///a/c"),
    ("notes://users/bob/../alice", "notes://users/alice"),
    ("notes://users/..", "notes://users/"),
    ("file:///a/..b/c..d", "file:///a/..b/c..d"),  # not dot segments
    # scheme lower case; host lower case where it names a machine, kept elsewhere
    ("FILE:///Finance", "file:///Finance"),
    ("HTTP://User@EXAMPLE.com/A", "http://User@example.com/A"),
    ("records://ABC", "records://ABC"),
    ("http://EX%2aMPLE.com/", "http://ex%2Ample.com/"),  # the escape keeps its upper-case hex
    ("http://example.com:80/a", "http://example.com/a"),
    ("https://example.com:443/a", "https://example.com/a"),
    ("https://example.com:/a", "https://example.com/a"),
    ("https://example.com:8443/a", "https://example.com:8443/a"),
    ("http://[::1]/a", "http://[::1]/a"),
    ("http://[::1]:80/a", "http://[::1]/a"),
    ("file://localhost/finance/q3.txt", "file:///finance/q3.txt"),
    ("file://LOCALHOST/finance/q3.txt", "file:///finance/q3.txt"),
    ("file://server/share", "file://server/share"),
    ("records://x:80", "records://x:80"),
    # query and fragment: escapes only
    ("notes://users/a?x=%2e%2e&y=%3D#%7e", "notes://users/a?x=..&y=%3D#~"),
]

UNCLEAR = [
    ("file:///finance%2Fq3.txt", "encoded '/' (%2F)"),
    ("file:///finance%2fq3.txt", "encoded '/' (%2F)"),
    ("file:///public/..%2Ffinance", "encoded '/' (%2F)"),
    ("notes://users/x?path=a%2Fb", "encoded '/' (%2F)"),
    ("file:///public\\..\\finance", "backslash"),
    ("file:///public/..%5cfinance", "encoded backslash (%5C)"),
    ("file:///a%00", "encoded control character"),
    ("file:///a%0a", "encoded control character"),
    ("file:///a%7F", "encoded control character"),
    ("file:///a%C2%85", "encoded control character"),  # NEL, a C1 control, as UTF-8
    ("file:///a\x00", "control character"),
    ("file:///a\tb", "control character"),
    ("file:///a\x85", "control character"),
    ("file:///a\ud800", "control character"),  # a lone surrogate
    ("file:///a%", "'%' that is not followed by two hex digits"),
    ("file:///a%4", "'%' that is not followed by two hex digits"),
    ("file:///a%zz", "'%' that is not followed by two hex digits"),
    ("file:///a%ff", "not UTF-8"),
    ("file:///a%C3", "not UTF-8"),
    ("file:///public/%252e%252e/finance", "double escape"),
    ("file:///public/%25%32%65", "double escape"),  # %25 then escaped hex digits: %2e once decoded
    ("file:///a%252F", "double escape"),
    ("records://..", "authority is the dot segment"),
    ("records://%2e", "authority is the dot segment"),
    ("notes:users/../secret", "no root"),
    ("notes:./secret", "no root"),
    ("users/%2e%2e/secret", "no root"),
    ("file:////finance", "empty segment"),
    ("file:///a//b", "empty segment"),
    ("file:///a//../b", "empty segment"),
    ("file:///finance./q3.txt", "ends in '.' or a space"),
    ("file:///finance/q3.txt.", "ends in '.' or a space"),
    ("file:///finance/...", "ends in '.' or a space"),
    ("file:///finance%20/q3.txt", "ends in '.' or a space"),
    ("file:///cafe%CC%81", "normal form C"),  # e + combining acute: café spelled another way
]


@pytest.mark.parametrize(("uri", "normal"), NORMAL)
def test_a_uri_is_normalised(uri: str, normal: str) -> None:
    assert normalise(uri) == normal
    assert normalise(normal) == normal  # the normal form is a fixed point


@pytest.mark.parametrize(("uri", "reason"), UNCLEAR)
def test_a_uri_with_more_than_one_reading_is_refused_with_the_reason(uri: str, reason: str) -> None:
    with pytest.raises(UnclearUriError) as refused:
        normalise(uri)
    assert reason in refused.value.reason
    assert str(refused.value) == f"This resource URI is refused: {refused.value.reason}."
    assert isinstance(refused.value, ItemRefusedError) and refused.value.code == "unclear-uri"
