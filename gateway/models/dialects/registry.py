"""Which model APIs this build speaks: ``gateway.models.dialects.<api>`` defines ``DIALECT`` (a ``Dialect``).

An API is listed here once; its module is imported when first asked for, so an API whose module is absent
is simply not available (its endpoint is not served, and a `models:` entry naming it is a config error).
"""

from __future__ import annotations

import importlib
from functools import cache

from gateway.models.dialects.base import Dialect

__all__ = ["APIS", "available", "dialect"]

APIS = ("chat", "responses", "messages")  # models[].api (gateway/config/model.py)


@cache
def _load(api: str) -> Dialect | None:
    try:
        module = importlib.import_module(f"gateway.models.dialects.{api}")
    except ModuleNotFoundError as exc:
        if exc.name != f"gateway.models.dialects.{api}":
            raise  # the module is there but one of its imports is not: a real error
        return None
    found: Dialect = module.DIALECT
    return found


def dialect(api: str) -> Dialect:
    """The dialect of ``api``; ``LookupError`` naming the api when it is not available."""
    found = _load(api) if api in APIS else None
    if found is None:
        raise LookupError(f"the model API {api!r} is not available in this build (available: "
                          f"{', '.join(available())})")
    return found


def available() -> tuple[str, ...]:
    """The APIs this build speaks, in ``APIS`` order."""
    return tuple(api for api in APIS if _load(api) is not None)
