"""Limits of upstreams: connections, responses, OpenAPI documents, supervision, tasks and listings."""

# HTTP upstreams: connections per upstream, and how long an idle one is kept. Kept under the 5 s
# that uvicorn and Node servers keep theirs, so the gateway never writes to a closed connection.
UPSTREAM_MAX_CONNECTIONS = 100
UPSTREAM_KEEPALIVE_SECONDS = 2.0

# Bytes of one upstream response the gateway reads (overridable by `limits.max_response_bytes`).
# Past it the call fails and the connection is cut: a tool result is for a model to read, and a
# hostile or broken upstream must not make the gateway buffer hundreds of megabytes.
MAX_RESPONSE_BYTES = 10 * 1024 * 1024

# OpenAPI upstreams: a spec document (or a document its external $refs name) larger than this is
# refused, whether read from a file or fetched from a URL; real specs run to a few MiB (GitHub's
# REST API, among the largest, is about 12 MiB).
MAX_OPENAPI_DOCUMENT_BYTES = 32 * 1024 * 1024

# Documents one spec may pull in through external $refs: real multi-file specs have tens.
MAX_OPENAPI_DOCUMENTS = 100

# A spec URL (and each document its $refs name) must be fetched within this long, at start and in
# `gateway check --config`.
OPENAPI_FETCH_TIMEOUT_SECONDS = 10.0

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

# A message about an argument that does not fit its tool's input schema (gateway/upstreams/argument_errors.py)
# cuts an argument name at this many characters, and a value the schema gives (an enum, a pattern) at
# SCHEMA_VALUE_CHARS; at most MAX_ARGUMENT_PROBLEMS problems are listed in one refusal.
ARGUMENT_NAME_CHARS = 64
SCHEMA_VALUE_CHARS = 160
MAX_ARGUMENT_PROBLEMS = 5

# Resource templates and listed resource URIs kept parsed or normalised, so a read does not redo it per listed
# item (the upstreams' lists are bounded by MAX_ITEM_LIST_PAGES; this bounds the cache whatever they send).
MAX_CACHED_RESOURCE_URIS = 4096

# --- credentials the gateway gets for upstreams (gateway/upstreams/credentials.py, token_client.py) ---

# One token request (or the identity provider's discovery document) must be answered within this long
# and this many bytes: token responses are a few KiB, and a slow or hostile IdP must not hold calls.
TOKEN_FETCH_TIMEOUT_SECONDS = 10.0
TOKEN_RESPONSE_MAX_BYTES = 64 * 1024

# A token is used until this long before it expires (at most a quarter of its lifetime), so a call
# never reaches an upstream with a token that lapses on the way or while the upstream checks it.
TOKEN_EXPIRY_MARGIN_SECONDS = 30.0

# Exchanged tokens kept per upstream (one per caller token): past it the least recently used go first.
# Each entry is a hash and a token of a few KiB, so the bound keeps a burst of callers to a few tens of MiB.
MAX_EXCHANGED_TOKENS = 10_000
