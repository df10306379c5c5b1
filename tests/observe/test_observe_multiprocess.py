"""Metrics across worker processes: with PROMETHEUS_MULTIPROC_DIR shared, a scrape of any process adds up all."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from gateway.auth.keys import hash_key
from gateway.observe.metrics import MULTIPROC_ENV, families, prepare_multiprocess_dir

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

SCRAPER_KEY = "scraper-key-mp-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def _process(config_file: Path, env: dict[str, str]) -> AsyncIterator[str]:
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", str(config_file), "--port", str(port), "--log-level", "warning",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env})
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(base_url=url) as client:
            for _ in range(600):
                if process.returncode is not None:
                    assert process.stderr is not None
                    pytest.fail(f"gateway exited: {(await process.stderr.read()).decode()}")
                with contextlib.suppress(httpx2.TransportError):
                    if (await client.get("/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 20)


def _calls(text: bytes, outcome: str) -> float:
    return sum(v for name, labels, v in families(text)
               if name == "gateway_calls_total" and labels == {"upstream": "api", "outcome": outcome})


async def test_a_scrape_of_one_worker_counts_the_calls_of_both(tmp_path, configs, http_api, keys):
    shared = tmp_path / "metrics"
    shared.mkdir()
    (shared / "stale.db").write_bytes(b"left from an earlier run")
    env = {MULTIPROC_ENV: str(shared)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MULTIPROC_ENV, str(shared))
        assert prepare_multiprocess_dir() == str(shared)  # what `serve --workers` does before starting them
    assert list(shared.iterdir()) == []

    scraper = {"principal": {"id": "scraper"}, "sha256": hash_key(SCRAPER_KEY), "metrics": True}
    api_keys: list[dict[str, Any]] = [*configs.api_keys("alice"), scraper]
    files = []
    for name in ("a", "b"):
        config = configs.base(configs.http_upstream("api", http_api.url), auth={"api_keys": api_keys})
        files.append(configs.write(tmp_path / name, config, {"p.yaml": "policy: p\nrules: []\n"}))
    alice = {"Authorization": f"Bearer {keys['alice']}"}
    async with _process(files[0], env) as a, _process(files[1], env) as b:
        for url, count in ((a, 2), (b, 3)):
            async with httpx2.AsyncClient(base_url=url, headers=alice) as client:
                for i in range(count):
                    response = await client.post("/v1/tools/api_search/invoke", json={"arguments": {"q": f"{i}"}})
                    assert response.json()["decision"] == "allow", response.text
        scraped = []
        for url in (a, b):
            async with httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {SCRAPER_KEY}"}) as client:
                response = await client.get("/metrics")
                assert response.status_code == 200
                scraped.append(response.content)
    assert [_calls(text, "allow") for text in scraped] == [5, 5]
    assert len([p for p in shared.iterdir() if p.name.startswith("counter_")]) == 2  # one file per process
