"""schemathesis against a real gateway on loopback, driven by the gateway's own /openapi.json.

Every operation the document describes gets generated requests, valid ones and (schemathesis's
negative mode) invalid ones, and each answer must:
- never be a 5xx (``not_a_server_error``);
- have a documented status, content type, headers and body schema (the ``*_conformance`` checks),
  so every error really is ``{"error": {"code", "message"}}``;
- accept schema-valid requests and refuse schema-invalid ones with a 4xx (``positive_data_acceptance``,
  ``negative_data_rejection``);
- refuse the same request without a key or with a wrong one (``ignored_auth``).

``unsupported_method`` is left out: an undeclared method on an open route (TRACE /healthz) falls
through to the authenticated mount, which answers 401 or 404 rather than 405. That refuses the
request all the same; a 405 there would need the routing rebuilt.

The schema is the document object itself (``openapi_document()``); test_served_document_is_the_fuzzed_one
proves that is exactly what the gateway serves at /openapi.json. (schemathesis's lazy
``from_fixture`` loader does not work with pytest 9, so the URL is not fetched at collection.)

Time bound: hypothesis' ``max_examples`` per operation, derandomized and without a database, so
CI runs the same cases every time and the file takes well under a minute.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx2
import pytest
import schemathesis
from fuzz_support import KEYS, TOOL_NAMES
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import checks as checks_module

from gateway.frontends.openapi_doc import openapi_document

schema = schemathesis.openapi.from_dict(openapi_document())

CHECKS = [
    checks_module.not_a_server_error, checks_module.status_code_conformance, checks_module.content_type_conformance,
    checks_module.response_headers_conformance, checks_module.response_schema_conformance,
    checks_module.positive_data_acceptance, checks_module.negative_data_rejection,
    checks_module.missing_required_header, checks_module.ignored_auth,
]

# Real tool names and approval ids, mixed into the generated path parameters so that requests
# reach the call pipeline and stored approvals, not only the "unknown" branches. The held tool is
# left out: a generated ?wait= would hold each request for minutes. The approval ids are filled in
# by the ``pending_approvals`` fixture.
REAL: dict[str, list[str]] = {"name": [t for t in TOOL_NAMES if t != "fz_held"], "approval_id": []}


@schema.auth()
class ApproverKey:
    """The approver's key as a Bearer credential (so ``ignored_auth`` knows what to take away)."""

    def get(self, case: Any, context: Any) -> str:
        return KEYS["approver"]

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    """Half the time, a real tool name or approval id instead of the generated one."""
    choices = [st.just(path_parameters)]
    for key, values in REAL.items() if path_parameters else ():
        if key in path_parameters and values:
            choices.append(st.sampled_from(values).map(lambda v, k=key: {**path_parameters, k: v}))
    return st.one_of(*choices)


@pytest.fixture(scope="module")
def pending_approvals(module_fuzz_gateway: Any) -> None:
    """Three pending approval requests on the fuzzed gateway, their ids in ``REAL``."""
    REAL["approval_id"] = []
    for n in range(3):
        response = module_fuzz_gateway.client.post("/v1/tools/fz_held/invoke", json={"arguments": {"n": n}},
                                            headers=module_fuzz_gateway.headers("asker"))
        assert response.status_code == 202, response.text
        REAL["approval_id"].append(response.json()["approval_id"])


def test_served_document_is_the_fuzzed_one(module_fuzz_gateway: Any) -> None:
    """What the gateway serves at /openapi.json, without a key, is the document fuzzed here."""
    response = httpx2.get(f"{module_fuzz_gateway.url}/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == schema.raw_schema


@schema.parametrize()
@settings(max_examples=25, deadline=timedelta(seconds=5), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
def test_gateway_conforms_to_its_openapi(case: Any, module_fuzz_gateway: Any, pending_approvals: None) -> None:
    """Generated requests to each operation: no 5xx, every answer as documented, auth enforced."""
    active = CHECKS
    if case.operation.path == "/v1/tools/{name}/invoke":
        # Arguments are admitted only when policies can see them exactly (integers within int64,
        # no U+0000, no lone surrogates, at most 64 levels deep): rules JSON Schema cannot state, so
        # a schema-valid body may rightly get 400 invalid-input. tests/frontends/test_bad_values.py
        # pins those refusals; every other check still applies to invoke.
        active = [c for c in CHECKS if c is not checks_module.positive_data_acceptance]
    case.call_and_validate(base_url=module_fuzz_gateway.url, checks=active, timeout=10)
    module_fuzz_gateway.assert_healthy()
