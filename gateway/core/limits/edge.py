"""Limits of the agent side: connections and requests, calls and their values, MCP sessions and tasks, the audit log."""

# Calls of 2026-07-28 clients waiting for the client's answers to an upstream's question (gateway/
# frontends/mcp/round_trips.py); past this, the oldest can no longer be resumed and waits out its call timeout.
MAX_PENDING_ROUND_TRIPS = 10_000
# How long a 2026-07-28 call that ended while its client was being asked keeps its outcome for the client's
# next request (with the answers and the state it was given); past it, the state is expired.
ROUND_TRIP_RESULT_SECONDS = 60.0

# The longest text of an upstream failure kept in the audit log.
MAX_AUDIT_ERROR_CHARS = 2_000

# Bytes of JSON arguments a call may carry (overridable by `limits.max_argument_bytes`).
MAX_ARGUMENT_BYTES = 1_000_000

# The longest `?wait=` a REST caller may ask for (seconds).
MAX_REST_WAIT_SECONDS = 300.0

# The decision log: a value (arguments, a result, a diff) whose JSON is larger than this goes into
# an event as its SHA-256, its size and a preview, never whole (overridable by
# `audit.max_value_bytes`): a 100 MB argument must not write a 100 MB line.
AUDIT_MAX_VALUE_BYTES = 65_536

# The longest audit line (overridable by `audit.max_event_bytes`): room for a few values at their
# limit; past it the largest fields are summarised until the line fits.
AUDIT_MAX_EVENT_BYTES = 262_144

# The preview kept of a summarised value: enough to recognise it, never enough to matter in size.
AUDIT_PREVIEW_BYTES = 1_024

# Containers are summarised member by member this many levels down (so `{"to": "x", "memo": <huge>}`
# keeps `to` and summarises only `memo`); deeper, the whole value is summarised.
AUDIT_BOUND_DEPTH = 3

# Permissions of a newly created audit file: it holds call arguments, so only the gateway's user.
AUDIT_FILE_MODE = 0o600

# Room kept in every audit line for its chain fields (`,"chain":"<32 hex>","seq":N,"prev":"<64 hex>"`:
# 143 bytes at a 20-digit seq), so a line with them is still within `audit.max_event_bytes`.
AUDIT_CHAIN_FIELDS_BYTES = 160

# A signed checkpoint every this many events when `audit.sign.every` is not set: one Ed25519
# signature (about 50 µs) per thousand events is noise beside their writes.
AUDIT_CHECKPOINT_EVERY = 1_000

# The smallest `audit.rotate.max_bytes`: below it a file would hold a handful of events.
AUDIT_ROTATE_MIN_BYTES = 65_536

# `gateway audit verify` reads at most this much of one line: far past any `audit.max_event_bytes` a
# config would set, and what bounds its memory (a longer line is not an event the gateway wrote).
AUDIT_VERIFY_MAX_LINE_BYTES = 16 * 1024 * 1024

# Problems `gateway audit verify` lists per chain before it only counts the rest (a scrambled file
# would otherwise print one per line).
AUDIT_VERIFY_PROBLEMS_PER_CHAIN = 20

# Values at the edges (gateway/core/values.py). Arguments and results nest at most this many levels:
# plenty for real tool schemas, and it keeps every walker (redaction, rewrites, both CEL engines,
# JSON encoders) well inside Python's stack. Integers have at most this many digits: Python's own
# cap is 4,300, and the work of parsing one grows with the square of its length.
MAX_VALUE_NESTING = 64
MAX_JSON_INTEGER_DIGITS = 1_000

# A call id or session id a caller names is at most this long (policies see both).
MAX_ID_CHARS = 256

# Open MCP sessions per principal when `limits.max_sessions_per_principal` is not set: enough for
# many agents behind one key, far below the SDK's 10,000 for the whole server.
DEFAULT_MAX_SESSIONS_PER_PRINCIPAL = 100

# Open `subscriptions/listen` streams (MCP 2026-07-28 change notifications). Each holds an open HTTP
# response; an agent needs one or two, so a key may hold a few dozen, and all of them together stay
# at half the default connection cap (DEFAULT_MAX_CONNECTIONS), leaving the rest for calls.
MAX_LISTEN_STREAMS_PER_PRINCIPAL = 32
MAX_LISTEN_STREAMS = 256

# How long a 2026-07-28 client may reuse a tools/list result (`ttlMs`). The list depends on the
# principal, the policy revision and the upstreams, so it is always `cacheScope: private`; short,
# because a client that does not listen for changes sees a reload's effect only after this long
# (a call to a tool that was hidden meanwhile is refused by policy all the same), and long enough
# that an agent's turn of several calls does not list the tools again for each one.
TOOL_LIST_TTL_MS = 5_000

# Calls one principal may have running at once when `limits.per_principal.max_concurrent_calls`
# is not set (held calls waiting for approval count): one key cannot take every upstream connection.
DEFAULT_MAX_CONCURRENT_CALLS = 256

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

# A gateway task is kept this long after it is created unless the client asks for less (milliseconds); its
# result can be fetched until then. Clients may ask for up to MAX_TASK_TTL_MS.
DEFAULT_TASK_TTL_MS = 600_000
MAX_TASK_TTL_MS = 3_600_000

# Tasks one principal may hold at once (ended ones included, until their TTL); more are refused, so a client
# cannot grow the gateway's memory without bound.
MAX_TASKS_PER_PRINCIPAL = 200

# How long the tool of a call made as a task may run, when `limits.task_timeout` does not say (seconds): a task
# is for work longer than a client waits on one request; an upstream's own `timeout` still holds.
DEFAULT_TASK_TIMEOUT_SECONDS = 600.0

# The poll interval suggested to clients (milliseconds).
TASK_POLL_INTERVAL_MS = 500

# A 2026-07-28 client that declared the tasks extension gets a plain result when the call ends within this
# time, and a task otherwise (a held call, a long-running or task-only tool).
TASK_GRACE_SECONDS = 1.0

# --- shares of connections and held calls (gateway/frontends/http/shares.py) ---

# One key's share of the connections when `http.max_connections_per_principal` is not set: this
# fraction of `http.max_connections` (64 of the default 512), so one key, or a few, cannot take them all.
CONNECTION_SHARE_DIVISOR = 8

# Connections kept for approvers, admins and metrics keys on the approvals API, the admin API and
# /metrics when `http.reserved_connections` is not set: this fraction of `http.max_connections` (32 of
# 512), at least one, so a decision can be made while agents have filled the rest.
RESERVED_CONNECTION_DIVISOR = 16

# Retry-After (seconds) of a request refused for its share: held calls answer within their hold and
# most requests within a second, so a slot is usually free again by then.
SHARE_RETRY_AFTER_SECONDS = 1

# Calls one principal may hold open on a connection while they wait for an approval, when
# `limits.per_principal.max_held_calls` is not set. Past it, such a call is answered "pending, call
# again" at once (MCP and the model proxy may answer later; a REST `?wait=` is the caller's choice and
# counts too): waiting calls of one key cannot fill its connection share, let alone the gateway's.
# Calls made as MCP tasks hold no connection and do not count (MAX_TASKS_PER_PRINCIPAL bounds them).
DEFAULT_MAX_HELD_CALLS_PER_PRINCIPAL = 16

# How long clients and caches may keep the protected resource metadata (RFC 9728, `Cache-Control:
# max-age`): it changes only when the config does, and clients fetch it again on their next 401 anyway.
RESOURCE_METADATA_MAX_AGE_SECONDS = 3_600
