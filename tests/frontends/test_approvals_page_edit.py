"""Editing a held call's arguments on the approvals page (issue 24), in a real headless Chromium against a real
gateway on loopback: the agent's held call completes with the edited arguments, and what the page shows of hostile
arguments and of the refusals is text, never markup."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from approval_support import PEOPLE, call_meta, finished, in_background, policy, text_of, transfer_tool
from browser_support import chromium_page, needs_browser

try:
    from playwright.async_api import expect
except ImportError:  # CI installs it with the `test` extra
    expect = None

pytestmark = [pytest.mark.session_loop, needs_browser]

HOSTILE = "<img src=x onerror=document.title='pwned'>"  # no double quote: JSON shows it as it is
ASKED = {"to": HOSTILE, "amount": 90}
RULES = policy(
    "  - id: transfers-need-ops\n    tools: [ops_transfer]\n    action: approve\n    message: Transfers need ops.\n"
    '    approval: {approvers: ["group:ops"], timeout: 60s, hold: 60s}\n',
    "  - id: no-big-transfers\n    tools: [ops_transfer]\n    when: args.amount > 100\n    action: reject\n"
    "    message: Transfers over 100 are not allowed.\n")
LABEL = "Arguments to approve the call with (JSON)"


async def test_an_approver_edits_the_arguments_on_the_page_and_the_held_call_runs_with_them(bench):
    assert expect is not None
    bench.upstream.tools["transfer"] = transfer_tool()
    gw = await bench.start(RULES)
    cid, edited = f"c-{uuid.uuid4().hex}", {"to": HOSTILE, "amount": 50}
    async with bench.mcp(gw, "alice") as client, in_background(client.call_tool(
            "ops_transfer", ASKED, meta=call_meta(cid), read_timeout_seconds=120)) as call, \
            chromium_page(watch=[gw.url]) as (page, errors):
        approval_id = (await bench.wait_pending(gw, cid))["id"]
        await page.goto(f"{gw.url}/approvals/{approval_id}")
        await page.get_by_test_id("key-input").fill(PEOPLE["bob"][0])
        await page.get_by_test_id("key-submit").click()
        card = page.locator(f'[data-approval-id="{approval_id}"]')
        await expect(card.locator('[data-key="to"]')).to_contain_text(HOSTILE)  # the hostile value, as text

        # The editor opens from the keyboard, labelled, with the arguments as the agent asked them.
        toggle = card.get_by_test_id("edit")
        await toggle.focus()
        await page.keyboard.press("Enter")
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        area = card.get_by_label(LABEL)
        await expect(area).to_be_focused()
        assert json.loads(await area.input_value()) == ASKED
        # The page refreshes every 2 s: the approver typing keeps the focus, and the text.
        status = page.get_by_test_id("status")
        await expect(status).to_have_text(re.compile("^Updated"))
        await expect(status).not_to_have_text(await status.text_content() or "")
        await expect(area).to_be_focused()

        # An edit the policies refuse: the page says which rule, as text; the request stays pending.
        await area.fill(json.dumps({"to": HOSTILE, "amount": 500}))
        await card.get_by_test_id("approve-edited").click()
        await expect(card.get_by_test_id("card-error")).to_contain_text(
            "Edit refused: The policies reject the edited call (rule approvals/no-big-transfers: Transfers over 100 "
            "are not allowed.)")
        # An argument the tool does not take, named by a hostile key: the refusal shows it as text.
        await area.fill(json.dumps({**ASKED, HOSTILE: 1}))
        await card.get_by_test_id("approve-edited").click()
        await expect(card.get_by_test_id("card-error")).to_contain_text(HOSTILE)
        await area.fill("{amount: 5")
        await card.get_by_test_id("approve-edited").click()
        await expect(card.get_by_test_id("card-error")).to_contain_text("The arguments are not valid JSON")
        assert (await bench.approval(gw, approval_id))["state"] == "pending" and bench.upstream.runs == []

        await area.fill(json.dumps(edited))
        await card.get_by_test_id("approve-edited").click()
        await expect(page.get_by_test_id("notice")).to_have_text(
            "Approved with edited arguments: ops_transfer requested by alice")
        result = await finished(call)
        await expect(card.get_by_test_id("edit-by")).to_have_text("bob")
        await expect(card.get_by_test_id("edit-arguments")).to_contain_text(HOSTILE)
        await expect(card.get_by_test_id("editor")).to_be_hidden()
        await expect(card.locator("img")).to_have_count(0)
        assert await page.title() != "pwned"
        assert errors == []

    # The agent's held call ran once, with the edited arguments, and its model reads that they were edited.
    assert bench.upstream.runs == [("transfer", edited)]
    assert result.is_error is False and result.structured_content["args"] == edited
    assert text_of(result).startswith("Note: an approver edited the arguments of this call before it ran.")
