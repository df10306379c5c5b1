"""What the model reads when a held call is answered "pending", in each framework's default settings.

MAF (``tool_result_content="structured_first"``) and pydantic-ai hand the model a result's
``structuredContent`` instead of its text whenever there is one; the OpenAI Agents SDK reads the text
unless ``use_structured_content`` is on. The instruction must be the first thing the model reads in
all three, so the pending answer carries it as its only content (issue 18, item 24).
"""

from __future__ import annotations

import pytest
from agent_stage import Stage
from fake_model import script

DEPLOY = "ops_deploy"

HELD = """
policy: agents
rules:
  - id: payments-need-a-human
    tools: [ops_deploy]
    when: args.service == "payments"
    action: approve
    message: Deploying payments needs someone from ops.
    approval: {approvers: ["group:ops"], hold: 1s}
"""


@pytest.mark.parametrize("framework", ["openai-agents", "maf", "pydantic-ai"])
async def test_the_model_reads_the_instruction_first(stage: Stage, framework: str) -> None:
    await stage.start(HELD)
    run = await stage.run(framework, script((DEPLOY, {"service": "payments"})), seconds=10)
    [seen] = run.tool_results
    assert seen.startswith("Approval pending: this call to ops_deploy needs a person's approval"), seen
    assert f"call {DEPLOY} again with exactly the same arguments" in seen, seen
    assert stage.upstream.runs == []
