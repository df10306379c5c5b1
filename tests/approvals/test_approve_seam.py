"""The approve action at the gateway's approval seam. Approvals are changing: keep this small.

Without an approval service (``NoApprovals``) a call that needs approval is refused; with the
default service a REST caller that does not wait gets 202 and the tool does not run.
"""

from __future__ import annotations

import pytest

from gateway.app import build_gateway
from gateway.pipeline import NoApprovals

pytestmark = pytest.mark.session_loop  # its async tests run in the session loop, where the shared servers live

APPROVE_DELETES = """
policy: p
rules:
  - id: deletes-need-approval
    when: tool.annotations.destructiveHint
    action: approve
    message: Deleting needs a human.
    approval: {approvers: ["group:admins"], timeout: 10m}
"""


async def test_approve_without_an_approval_service_is_refused(tmp_path, configs, http_api, rest, rest_call):
    config = configs.load(configs.write(tmp_path, configs.base(configs.http_upstream("api", http_api.url)),
                                        {"p.yaml": APPROVE_DELETES}))
    gateway = build_gateway(config)
    gateway.approvals = NoApprovals()
    async with configs.serve(config, gateway) as running:
        body = await rest_call(rest(running), "api_delete_item", {"item_id": "seam-1"})

    assert (body["decision"], body["is_error"]) == ("reject", True)
    assert body["content"][0]["text"] == "This call needs approval, and this gateway has no approval service."
    assert http_api.seen("seam-1") == []


async def test_approve_with_the_default_service_holds_a_rest_call_that_does_not_wait(start_gateway, configs,
                                                                                     http_api, rest):
    gateway = await start_gateway(configs.base(configs.http_upstream("api", http_api.url)),
                                  {"p.yaml": APPROVE_DELETES})

    response = await rest(gateway).post("/v1/tools/api_delete_item/invoke", json={"arguments": {"item_id": "seam-2"}})

    assert response.status_code == 202
    assert response.json()["decision"] == "pending"
    assert http_api.seen("seam-2") == []
