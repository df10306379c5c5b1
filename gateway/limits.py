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

# --- the HTTP edge (each overridable under `http:` in gateway.yaml) ---

# Request bodies are counted while they are read and refused (413) past this many bytes; the
# default leaves room for `limits.max_argument_bytes` of arguments plus the JSON around them.
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
BODY_OVERHEAD_BYTES = 64 * 1024

# The request line and headers together; h11 and nginx default to 8-64 KiB, and no client of the
# gateway sends more than a few hundred bytes of headers (431 past this).
DEFAULT_MAX_HEADER_BYTES = 64 * 1024

# A client has this long, from its first byte, to send the request line and headers (a new
# connection has it from the moment it connects): slow-header ("slowloris") clients are dropped.
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0

# The whole body must arrive within this long after the headers (408 otherwise): 2 MiB needs only
# ~0.6 Mbit/s, so a legitimate client is never cut off, and a dripping one cannot hold a connection.
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0

# Open client connections. Past it, the oldest connection that has not yet sent its headers (or
# sits idle between requests) is closed to make room; only when every connection is busy with a
# request is the new one answered 503. Well under the usual 1,024 open files per process.
DEFAULT_MAX_CONNECTIONS = 512

# After refusing a request whose body or headers were still arriving, the connection keeps
# reading (and discarding) for up to this long and this many bytes before it is closed, so the
# client reads the refusal instead of a "connection reset" (closing with unread input sends RST,
# and the client's kernel drops the answer).
LINGER_SECONDS = 2.0
LINGER_MAX_BYTES = 4 * 1024 * 1024
