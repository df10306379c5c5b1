"""gateway/core/scrub.py: credentials taken out of relayed text, ordinary text left alone."""

from __future__ import annotations

import pytest

from gateway.core.scrub import REDACTED, Scrubber

KEY = "my-model-key-0123456789"


@pytest.mark.parametrize("secret", [
    "Bearer abcdefgh12345678", "bearer eyJhbGciOi.eyJzdWIi.c2lnbmF0dXJl", "Basic dXNlcjpwYXNzd29yZA==",
    "sk-proj-ZYXWVUTSRQPONMLK98765", "sk-ant-api03-abcdefghijklmnop", "ghp_0123456789abcdefghijABCDEFGHIJ",
    "xoxb-1234567890-abcdef", "AIzaSyA0123456789abcdefghijklmnopqrstu", "hf_abcdefghijklmnopqrstuvwx",
    "AKIAIOSFODNN7EXAMPLE",
])
def test_known_credential_shapes_are_taken_out(secret: str) -> None:
    scrubbed = Scrubber().text(f"the upstream said: {secret}, try again")
    assert secret.split()[-1] not in scrubbed and REDACTED in scrubbed and scrubbed.endswith(", try again")


@pytest.mark.parametrize("prose", ["a bearer of bad news", "risk-free", "task-8", "sk-8", "Basic idea"])
def test_ordinary_text_is_left_alone(prose: str) -> None:
    assert Scrubber([KEY]).text(prose) == prose


def test_the_configured_secret_is_taken_out_wherever_it_is() -> None:
    scrubber = Scrubber([KEY, None])
    assert scrubber.text(f"key={KEY};") == f"key={REDACTED};"
    assert scrubber.secrets_in(f'{{"content": "{KEY}"}}'.encode(), shortest=16) == \
        f'{{"content": "{REDACTED}"}}'.encode()


def test_a_short_placeholder_key_is_kept_in_answers_but_not_in_errors() -> None:
    scrubber = Scrubber(["EMPTY"])
    assert scrubber.secrets_in(b"EMPTY SET", shortest=16) == b"EMPTY SET"
    assert scrubber.text("bad key EMPTY") == f"bad key {REDACTED}"
