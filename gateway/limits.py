"""Every named limit in one place, each with why it is what it is."""

from __future__ import annotations

# Policy files larger than this are refused at load: a policy is hand-written text, and a huge
# file is far more likely a mistake (or an attack on the loader) than a real policy.
MAX_POLICY_FILE_BYTES = 1_000_000

# An expression longer than this is refused at load; CEL cost grows with size and no sensible
# guard needs more.
MAX_EXPRESSION_CHARS = 10_000

# Rules in one policy set; beyond this the matching index and the decision log both get unwieldy.
MAX_RULES = 20_000

# Distinct tool names whose matching rules the index remembers; past this the cache is cleared
# so that a flood of unknown names cannot grow memory without bound.
MAX_INDEXED_TOOL_NAMES = 10_000

# Regexes used by `redact` are compiled at load; a pattern longer than this is refused.
MAX_REDACT_PATTERN_CHARS = 1_000

# Depth of nested containers walked by rewrite/redact; deeper values are left as they are.
MAX_VALUE_DEPTH = 64

# The text used in place of a redacted match.
REDACTED = "[REDACTED]"

# Sessions kept in memory by the store (the rest are read back from SQLite when seen again).
MAX_CACHED_SESSIONS = 10_000

# The longest text of an upstream failure kept in the audit log.
MAX_AUDIT_ERROR_CHARS = 2_000

# How often policy files are checked for changes when no interval is configured.
DEFAULT_RELOAD_SECONDS = 1.0

# Bytes of JSON arguments a call may carry (overridable by `limits.max_argument_bytes`).
MAX_ARGUMENT_BYTES = 1_000_000

# While a call waits for approval, a progress notification is sent this often (seconds).
APPROVAL_PROGRESS_SECONDS = 15.0

# How often the approval sweeper looks for requests whose time is up (seconds).
APPROVAL_SWEEP_SECONDS = 1.0

# The longest `?wait=` a REST caller may ask for (seconds).
MAX_REST_WAIT_SECONDS = 300.0

# Webhook delivery: attempts per event, the first retry delay (doubled each time), per-try timeout.
WEBHOOK_ATTEMPTS = 4
WEBHOOK_FIRST_RETRY_SECONDS = 0.5
WEBHOOK_TIMEOUT_SECONDS = 5.0

# A YAML document may expand to at most this many values (aliases count each time they are
# used), and nest this deep: both stop "billion laughs" files and runaway recursion.
MAX_YAML_NODES = 50_000
MAX_YAML_DEPTH = 64

# HTTP upstreams: connections per upstream, and how long an idle one is kept. Kept under the 5 s
# that uvicorn and Node servers keep theirs, so the gateway never writes to a closed connection.
UPSTREAM_MAX_CONNECTIONS = 100
UPSTREAM_KEEPALIVE_SECONDS = 2.0

# `GET /v1/approvals` returns at most this many requests a page.
MAX_APPROVALS_PAGE = 500

# SQLite: how long a write waits for another connection or process holding the file locked before
# it fails with a clear "store unavailable" error. Writes run on the store's worker thread, so this
# wait never blocks the event loop.
SQLITE_BUSY_TIMEOUT_SECONDS = 2.0

# An approved call being executed is claimed by one gateway process with a lease of this many
# seconds, renewed every APPROVAL_HEARTBEAT_SECONDS while it runs. A claim whose lease has run out
# belongs to a process that died: only then is the call marked "interrupted" (by any process).
APPROVAL_LEASE_SECONDS = 15.0
APPROVAL_HEARTBEAT_SECONDS = 3.0

# How long an approved request may still be executed after its decision, when the rule's
# `approval.valid_for` does not say (seconds). After that a retry needs a new approval.
DEFAULT_APPROVAL_VALID_SECONDS = 600.0

# If the one execution's result cannot be stored (the database is locked), storing it is retried
# this often until it succeeds; the claim's lease is renewed meanwhile, so no one marks it interrupted.
APPROVAL_RESULT_RETRY_SECONDS = 0.5

# A caller waiting for an approved call that another gateway process is running re-reads the
# request this often (seconds); a run in this process wakes its waiters at once.
APPROVAL_POLL_SECONDS = 0.5

# The longest filter text `GET /v1/approvals` accepts (tool, principal, q): names and search
# words are short; a longer one is a mistake or an attempt to make the search expensive.
MAX_APPROVALS_FILTER_CHARS = 200
