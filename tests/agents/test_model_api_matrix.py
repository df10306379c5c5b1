"""Every policy action through the model proxy, for every model API, whole and streamed (tests/agents/api_matrix.py).

Each API's side (tests/agents/matrix_<api>.py: its official client and its scripted fake model) runs the
same cells; an API whose side is not in this tree is not listed. The wrong-api cell pairs every API with
every other one. Cells of one API and mode with the same config share a gateway (each cell's runs are its
own): a gateway per config, not per cell.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from agent_stage import STEP_SECONDS, CountingUpstream, SharedGateways, Stage
from api_matrix import CELLS, Cell, Side, cell_wrong_api
from loopback import serve_app

from gateway.models.dialects.registry import APIS, available

SIDES: dict[str, Side] = {api: importlib.import_module(f"matrix_{api}").SIDE for api in APIS
                          if api in available() and importlib.util.find_spec(f"matrix_{api}") is not None}
PAIRS = [(api, other) for api in SIDES for other in available() if other != api]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fakes() -> AsyncIterator[dict[str, tuple[Any, str]]]:
    """Every side's scripted fake model, served once for the module, and its base URL."""
    running: dict[str, tuple[Any, str]] = {}
    async with contextlib.AsyncExitStack() as stack:
        for api, side in SIDES.items():
            fake = side.fake()
            running[api] = fake, await stack.enter_async_context(
                serve_app(fake.app(), lifespan="off", startup=STEP_SECONDS))
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateways(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SharedGateways]:
    """The module's gateways, stopped after its last cell."""
    async with contextlib.AsyncExitStack() as stack:
        yield SharedGateways(tmp_path_factory.mktemp("matrix-gateways"), stack)


@contextlib.asynccontextmanager
async def cell_of(api: str, stream: bool, fakes: dict[str, tuple[Any, str]], root: Path,
                  upstream: CountingUpstream, gateways: SharedGateways) -> AsyncIterator[Cell]:
    """A fresh cell: the side's fake with no hooks, the upstream reset, the API and mode's shared gateways."""
    fake, url = fakes[api]
    fake.hooks.clear()
    upstream.reset()
    async with contextlib.AsyncExitStack() as stack:
        stage = Stage(root, fake, url, upstream, stack, shared=(gateways, f"{api}:{stream}"))
        yield Cell(stage, SIDES[api], stream, fake, url)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("api", list(SIDES))
async def test_cell(api: str, name: str, stream: bool, fakes: dict[str, tuple[Any, str]], tmp_path: Path,
                    counting_upstream: CountingUpstream, gateways: SharedGateways) -> None:
    skip = SIDES[api].skip
    why = skip.get(name) or skip.get(f"{name}:{'streamed' if stream else 'whole'}")
    if why:
        pytest.skip(why)
    async with cell_of(api, stream, fakes, tmp_path, counting_upstream, gateways) as cell:
        await CELLS[name](cell)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("api", "other"), PAIRS)
async def test_an_entry_of_another_api_is_a_400_in_the_endpoints_format(
        api: str, other: str, stream: bool, fakes: dict[str, tuple[Any, str]], tmp_path: Path,
        counting_upstream: CountingUpstream, gateways: SharedGateways) -> None:
    async with cell_of(api, stream, fakes, tmp_path, counting_upstream, gateways) as cell:
        await cell_wrong_api(cell, other)
