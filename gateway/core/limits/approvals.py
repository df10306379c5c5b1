"""Limits of human approval: holds, leases, lookups, pages and webhooks."""

# While a call waits for approval, a progress notification is sent this often (seconds).
APPROVAL_PROGRESS_SECONDS = 15.0

# How often the approval sweeper looks for requests whose time is up (seconds).
APPROVAL_SWEEP_SECONDS = 1.0

# Webhook delivery: attempts per event, the first retry delay (doubled each time), per-try timeout.
WEBHOOK_ATTEMPTS = 4
WEBHOOK_FIRST_RETRY_SECONDS = 0.5
WEBHOOK_TIMEOUT_SECONDS = 5.0

# `GET /v1/approvals` returns at most this many requests a page.
MAX_APPROVALS_PAGE = 500

# An approved call being executed is claimed by one gateway process with a lease of this many
# seconds, renewed every APPROVAL_HEARTBEAT_SECONDS while it runs. A claim whose lease has run out
# belongs to a process that died: only then is the call marked "interrupted" (by any process).
APPROVAL_LEASE_SECONDS = 15.0
APPROVAL_HEARTBEAT_SECONDS = 3.0
# A configured lease (store.lease) is renewed this many times per lease, as the default's 15s / 3s.
LEASE_RENEWALS = 5

# How long an approved request may still be executed after its decision, when the rule's
# `approval.valid_for` does not say (seconds). After that a retry needs a new approval.
DEFAULT_APPROVAL_VALID_SECONDS = 600.0

# How long an MCP call that needs approval is held open before the gateway answers "pending"
# (with the request id and "call again with the same arguments"), when the rule's `approval.hold`
# does not say (seconds). Below common MCP clients' read timeouts: the OpenAI Agents SDK gives up
# after 5 s, the TypeScript SDK after 60 s, MAF after 300 s; a client that gave up shows its model
# an error instead of the instruction to call again.
DEFAULT_APPROVAL_HOLD_SECONDS = 4.0

# If the one execution's result cannot be stored (the database is locked), storing it is retried
# this often until it succeeds; the claim's lease is renewed meanwhile, so no one marks it interrupted.
APPROVAL_RESULT_RETRY_SECONDS = 0.5

# A caller waiting for an approved call that another gateway process is running re-reads the
# request this often (seconds); a run in this process wakes its waiters at once.
APPROVAL_POLL_SECONDS = 0.5

# The longest filter text `GET /v1/approvals` accepts (tool, principal, q): names and search
# words are short; a longer one is a mistake or an attempt to make the search expensive.
MAX_APPROVALS_FILTER_CHARS = 200

# How many times a held call looks its approval request up again when the request it found was set aside
# meanwhile (the policies now need other approvers) or replaced by another process; after that the call is
# refused as if the database were busy (fail closed). Each pass is one change by someone else.
APPROVAL_LOOKUP_ATTEMPTS = 4

# A pending request in `GET /v1/approvals` shows its run's labels and this many of the run's latest calls
# (of the RUN_HISTORY_KEPT the run keeps): enough for an approver to see why the call was held, short enough
# to read on a phone.
APPROVAL_RUN_HISTORY_SHOWN = 10
