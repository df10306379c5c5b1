"""The Dockerfile, read as text (no Docker here): what it installs and copies exists in the repository,
and it installs the `otlp` extra, so `tracing: {enabled: true}` exports from the image
(tests/observe/test_otlp_export.py exports with that extra installed)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(name: str) -> list[str]:
    """The arguments of every ``name`` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.split(None, 1)[:1] == [name]]


def test_the_image_installs_the_project_with_the_otlp_extra_and_only_extras_that_exist() -> None:
    installs = [word for run in instructions("RUN") for command in run.split("&&")
                if "pip install" in command for word in shlex.split(command) if word.startswith(".")]
    assert installs == [".[otlp]"]
    extras = {e.strip() for i in installs for e in i.removeprefix(".[").removesuffix("]").split(",")}
    assert extras <= set(PYPROJECT["project"]["optional-dependencies"])
    assert any("opentelemetry-exporter-otlp" in d for d in PYPROJECT["project"]["optional-dependencies"]["otlp"])


def test_what_the_image_copies_and_serves_exists() -> None:
    for copy in instructions("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            assert (REPO / source).exists(), source
    [cmd] = instructions("CMD")
    config = next(word for word in shlex.split(cmd.strip("[]").replace(",", " ")) if word.endswith(".yaml"))
    assert (REPO / config).is_file()
