"""Limits of the store: sessions, runs, usage windows, and several processes sharing one database."""

# Sessions kept in memory by the store (the rest are read back from SQLite when seen again).
MAX_CACHED_SESSIONS = 10_000

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

# /readyz asks the store whether it answers (a `SELECT 1` on the connection calls read sessions with) at most
# once per this many seconds, whoever asks: the probe needs no key, so it must not become load on the database.
STORE_READY_CACHE_SECONDS = 1.0

# How long that question may take before the store counts as not answering (seconds).
STORE_READY_TIMEOUT_SECONDS = 2.0

# `gateway serve --workers N` starts a dead worker again. One that dies within WORKER_QUICK_DEATH_SECONDS of
# starting WORKER_CRASH_LOOP_LIMIT times in a row is in a crash loop (a config broken on disk since the start,
# a store it cannot open): the gateway then stops, exit status 1, so the orchestrator sees it, instead of
# restarting it forever on a shrinking fleet.
WORKER_QUICK_DEATH_SECONDS = 30.0
WORKER_CRASH_LOOP_LIMIT = 5

# Protocol sessions (`Mcp-Session-Id`) whose implicit run each process remembers, and implicit runs whose owning
# session it remembers (gateway/store/implicit_runs.py); the oldest are forgotten first, and a forgotten
# session's next call is placed as a new session's would be.
MAX_TRACKED_PROTOCOL_SESSIONS = 10_000
