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

# The text used in place of a redacted match.
REDACTED = "[REDACTED]"

# Sessions kept in memory by the store (the rest are read back from SQLite when seen again).
MAX_CACHED_SESSIONS = 10_000

# Calls of 2026-07-28 clients waiting for the client's answers to an upstream's question (gateway/frontends/
# frontends/mcp/round_trips.py); past this, the oldest can no longer be resumed and waits out its call timeout.
MAX_PENDING_ROUND_TRIPS = 10_000

# The longest text of an upstream failure kept in the audit log.
MAX_AUDIT_ERROR_CHARS = 2_000

# How often policy files are checked for changes when no interval is configured.
DEFAULT_RELOAD_SECONDS = 1.0

# A changed policy set is loaded only after its files have stayed unchanged this long (unless
# `reload.settle` says otherwise): an editor or a deploy writing several files gets time to finish,
# so a truncated or half-rewritten set is never loaded. The default is this many poll intervals,
# and never less than DEFAULT_SETTLE_SECONDS.
SETTLE_POLLS = 2
DEFAULT_SETTLE_SECONDS = 1.0

# At start, files that change while they are being loaded are loaded again, at most this many times.
POLICY_START_ATTEMPTS = 5

# A policy manifest lists files and digests; one larger than this is refused as not a manifest.
MAX_MANIFEST_BYTES = 1_000_000

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

# Bytes of one upstream response the gateway reads (overridable by `limits.max_response_bytes`).
# Past it the call fails and the connection is cut: a tool result is for a model to read, and a
# hostile or broken upstream must not make the gateway buffer hundreds of megabytes.
MAX_RESPONSE_BYTES = 10 * 1024 * 1024

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

# SQLite: how long a write waits for another connection or process holding the file locked before
# it fails with a clear "store unavailable" error. Writes run on the store's worker thread, so this
# wait never blocks the event loop.
SQLITE_BUSY_TIMEOUT_SECONDS = 2.0
# Reads of a session row that overlapped a write of this process's counts are retried this many times
# (then the view is built from the last read, which can be off by the overlapping write until the next call).
SESSION_READ_ATTEMPTS = 5
# How long such a read waits for a write of that session's counts under way (past the SQLite busy
# timeout, the write has failed and will be retried; the process's own view is used meanwhile).
SESSION_WRITE_WAIT_SECONDS = 2.5
# A write of counts that failed at once (PostgreSQL down: connection refused) is tried again after this,
# not in a hot loop; a SQLite write already waited for its busy timeout.
STORE_WRITE_RETRY_SECONDS = 0.5
# Counts written behind (one process on the store, no write-through) are gathered this long before a write,
# so one transaction carries the whole call (session, usage, implicit run) and its neighbours', not one
# transaction per change (issue 12). Bounds what a crash can lose of counts not yet written.
STORE_WRITE_COALESCE_SECONDS = 0.01
# Seconds a PostgreSQL connection may take to open before the store counts the server as unreachable.
POSTGRES_CONNECT_TIMEOUT_SECONDS = 10
# How often a held call re-reads its approval when the database cannot push changes (SQLite shared by
# several processes): a decision made through another process reaches the held call within this.
APPROVAL_SHARED_POLL_SECONDS = 0.25
# With PostgreSQL's LISTEN/NOTIFY, a held call still re-reads this often, in case a notification was
# missed (the listening connection was re-opened).
APPROVAL_NOTIFY_FALLBACK_SECONDS = 5.0
# `gateway serve --workers N`: how often the parent checks its workers are alive, and how long a
# stopping worker may take to finish its requests before it is killed.
WORKER_POLL_SECONDS = 0.5
WORKER_STOP_SECONDS = 30.0
# Seconds the listening connection waits before it is re-opened after it failed.
STORE_LISTEN_RETRY_SECONDS = 1.0

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

# OpenAPI upstreams: a spec document (or a document its external $refs name) larger than this is
# refused, whether read from a file or fetched from a URL; real specs run to a few MiB (GitHub's
# REST API, among the largest, is about 12 MiB).
MAX_OPENAPI_DOCUMENT_BYTES = 32 * 1024 * 1024

# Documents one spec may pull in through external $refs: real multi-file specs have tens.
MAX_OPENAPI_DOCUMENTS = 100

# A spec URL (and each document its $refs name) must be fetched within this long, at start and in
# `gateway check --config`.
OPENAPI_FETCH_TIMEOUT_SECONDS = 10.0

# --- agent runs (docs/runs.md) ---------------------------------------------------------------------

# How long an implicit run (a client that names no run) lasts without a call when `runs.idle_timeout`
# is not set: longer than any pause of an agent at work, short enough that a run its budget
# terminated frees the key soon.
DEFAULT_RUN_IDLE_SECONDS = 600.0

# Usage windows are counted in buckets of this many seconds: a window is a whole number of them.
USAGE_BUCKET_SECONDS = 60

# The client name (MCP clientInfo or User-Agent) kept to tell implicit runs apart; longer is cut.
MAX_RUN_CLIENT_CHARS = 200

# The most sessions one page of `GET /v1/admin/sessions` returns.
MAX_SESSIONS_PAGE = 500

# CEL cost bound (Kubernetes refuses admission expressions whose estimated cost is unbounded):
# at most this many comprehensions over inputs of unbounded size (arguments, results, split
# strings) may nest, and an inner one must range over part of the outer element (a walk of
# nested data, linear in the input); one over an independent input is refused at load, since
# its cost is the product of both sizes. Literal lists do not count.
MAX_COMPREHENSION_NESTING = 2

# Parse trees of CEL expressions kept for the typed checker (a reload re-reads mostly the same
# expressions); a tree is a few kilobytes, so this bounds the cache to a few tens of megabytes.
MAX_CACHED_PARSE_TREES = 4096

# A caret snippet under a diagnostic shows at most this many characters of the offending line (a
# window around the column), so that one minified line does not flood a terminal or a CI log.
MAX_SNIPPET_CHARS = 160

# `gateway tools` and `gateway check --config` start every upstream to read its tools; one that has
# not answered within this many seconds is reported as unavailable rather than waited for.
CATALOG_START_TIMEOUT_SECONDS = 30.0

# --- upstream supervision (each overridable under `supervision:` in gateway.yaml) ---

# A down upstream is tried again after UPSTREAM_RETRY_FIRST_SECONDS, the wait doubling with each
# failure up to UPSTREAM_RETRY_MAX_SECONDS: a dead service costs one attempt a minute, and one that
# comes back is found within a minute without a restart.
UPSTREAM_RETRY_FIRST_SECONDS = 1.0
UPSTREAM_RETRY_MAX_SECONDS = 60.0

# An upstream that is up is checked this often (a launched process still running, a TCP connect to
# an HTTP service, an MCP ping), and each check may take at most UPSTREAM_CHECK_TIMEOUT_SECONDS.
UPSTREAM_CHECK_SECONDS = 5.0
UPSTREAM_CHECK_TIMEOUT_SECONDS = 5.0

# A 2026-07-28 MCP upstream's subscriptions/listen stream that ended is opened again after this
# long (then its tools are listed again): quick to recover, slow enough not to spin on a server
# that closes every stream at once.
UPSTREAM_LISTEN_RETRY_SECONDS = 1.0

# An MCP upstream's event stream that the SDK closes before its end is read on for at most this
# long and this many bytes, so that a stream about to end hands its connection back to the pool
# (gateway/upstreams/keepalive.py). A server ends a call's stream right after the result: a few
# milliseconds and bytes; anything longer is a stream that is not ending and is closed.
UPSTREAM_DRAIN_SECONDS = 0.2
UPSTREAM_DRAIN_BYTES = 64 * 1024

# While an upstream stays down, its failures are not logged one per retry: one summary line this often.
UPSTREAM_DOWN_SUMMARY_SECONDS = 300.0

# Pages of an upstream's resources/list, resources/templates/list or prompts/list read at most (a server
# that keeps handing out cursors must not keep the gateway listing forever).
MAX_ITEM_LIST_PAGES = 100

# --- the model proxy (POST /v1/chat/completions; each overridable per entry of `models:`) ---

# How many times one request may ask the model: refused or skipped calls, unknown tools and gateway-run
# tools are resolved server-side and the model is asked again; past this the agent gets a final message.
MODEL_MAX_TURNS = 8
# Gateway-run tool calls of one model turn that run at once.
MODEL_TOOL_CONCURRENCY = 4
# How long a model request waits for an approval before it is answered "awaits approval" (model
# clients wait minutes: the OpenAI SDKs time out after 10 minutes).
MODEL_APPROVAL_WAIT_SECONDS = 300.0
# The most one model request may take (the OpenAI SDKs' own default).
MODEL_TIMEOUT_SECONDS = 600.0
# The largest model response (or streamed event) read from a model upstream.
MAX_MODEL_RESPONSE_BYTES = 16 * 1024 * 1024
# Server-side resolved exchanges kept per gateway process, so that a later request of the same
# conversation shows the model its own refused calls again (oldest dropped first).
MODEL_SPLICES_KEPT = 10_000

# Tasks (docs/gateway.md "Tasks"). The TTL the gateway asks an upstream for when it runs a task-only tool: the
# call's own timeout ends the wait much sooner; this only bounds how long the upstream keeps a forgotten task.
UPSTREAM_TASK_TTL_MS = 3_600_000

# How often an upstream task of the 2026-07-28 tasks extension is polled when it suggests no interval (seconds);
# at most ten times this even when it suggests more, so a call ends soon after its task does.
UPSTREAM_TASK_POLL_SECONDS = 0.5

# How long cancelling an upstream task may take before the gateway stops waiting for the acknowledgement.
UPSTREAM_TASK_CANCEL_SECONDS = 5.0

# How long one tasks/get poll of a 2026-07-28 upstream task may take (the call's own deadline bounds the whole wait).
UPSTREAM_TASK_GET_SECONDS = 30.0

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

# issue 18 (b)
# The most one streamed model answer may send in all (the bytes of all its events), like
# MAX_MODEL_RESPONSE_BYTES for a whole answer: past it the stream is cut and the agent gets an error. Its
# duration is bounded as a whole answer's is, by the entry's `timeout` (MODEL_TIMEOUT_SECONDS), not per read.
MAX_MODEL_STREAM_BYTES = 16 * 1024 * 1024
# The longest part of a model upstream's own error message relayed to the agent (characters).
MAX_MODEL_ERROR_CHARS = 1_000
# A configured model key shorter than this is a placeholder ("EMPTY", "ollama") that ordinary text contains:
# it is taken out of the upstream's error messages, but not out of the model's answers.
MIN_SCRUBBED_ANSWER_SECRET_CHARS = 16

# issue 18 (g)
# A message about an argument that does not fit its tool's input schema (gateway/upstreams/argument_errors.py)
# cuts an argument name at this many characters, and a value the schema gives (an enum, a pattern) at
# SCHEMA_VALUE_CHARS; at most MAX_ARGUMENT_PROBLEMS problems are listed in one refusal.
ARGUMENT_NAME_CHARS = 64
SCHEMA_VALUE_CHARS = 160
MAX_ARGUMENT_PROBLEMS = 5

# issue 18 (a)
# Resource templates and listed resource URIs kept parsed or normalised, so a read does not redo it per listed
# item (the upstreams' lists are bounded by MAX_ITEM_LIST_PAGES; this bounds the cache whatever they send).
MAX_CACHED_RESOURCE_URIS = 4096


# issue 18 (F)
# /readyz asks the store whether it answers (a `SELECT 1` on the connection calls read sessions with) at most
# once per this many seconds, whoever asks: the probe needs no key, so it must not become load on the database.
STORE_READY_CACHE_SECONDS = 1.0

# How long that question may take before the store counts as not answering (seconds).
STORE_READY_TIMEOUT_SECONDS = 2.0

# issue 18 (h)
# `gateway serve --workers N` starts a dead worker again. One that dies within WORKER_QUICK_DEATH_SECONDS of
# starting WORKER_CRASH_LOOP_LIMIT times in a row is in a crash loop (a config broken on disk since the start,
# a store it cannot open): the gateway then stops, exit status 1, so the orchestrator sees it, instead of
# restarting it forever on a shrinking fleet.
WORKER_QUICK_DEATH_SECONDS = 30.0
WORKER_CRASH_LOOP_LIMIT = 5

# issue 18 (d) -- shares of connections and held calls (gateway/frontends/http/shares.py) ------------------

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

# issue 18 (e)
# Protocol sessions (`Mcp-Session-Id`) whose implicit run each process remembers, and implicit runs whose owning
# session it remembers (gateway/store/implicit_runs.py); the oldest are forgotten first, and a forgotten
# session's next call is placed as a new session's would be.
MAX_TRACKED_PROTOCOL_SESSIONS = 10_000

# issue 18 (c)
# How many times a held call looks its approval request up again when the request it found was set aside
# meanwhile (the policies now need other approvers) or replaced by another process; after that the call is
# refused as if the database were busy (fail closed). Each pass is one change by someone else.
APPROVAL_LOOKUP_ATTEMPTS = 4
