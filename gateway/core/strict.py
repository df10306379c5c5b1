"""The one strict base of the models of documents people write: the config, policies, calls and test suites."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """A model that refuses keys it does not declare: a misspelt key is an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid")
