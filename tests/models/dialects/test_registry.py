"""dialects/registry.py: the model APIs of this build, by name."""

from __future__ import annotations

import pytest

from gateway.models.dialects.registry import APIS, available, dialect


def test_chat_is_always_available_and_every_available_api_names_its_path() -> None:
    assert "chat" in available() and set(available()) <= set(APIS)
    for api in available():
        found = dialect(api)
        assert found.api == api and found.path == f"/{'chat/completions' if api == 'chat' else api}"


def test_an_api_that_is_not_one_of_the_three_is_refused_naming_the_available_ones() -> None:
    with pytest.raises(LookupError, match=r"'completions' is not available in this build.*chat"):
        dialect("completions")
