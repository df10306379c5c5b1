"""Limits of the model proxy (POST /v1/chat/completions)."""

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
# Tool-call ids whose agent-run result was recorded (its audit event written), per gateway process: every request
# repeats the conversation's results, and each is recorded once (oldest forgotten first: a forgotten one is
# recorded again; it is still decided on every request).
MODEL_RESULTS_KEPT = 10_000
# Agent tool declarations kept compiled (name, description, schema -> its validator): agents send the same
# tools with every request, and compiling a schema's validator cost more than deciding three calls.
MODEL_AGENT_TOOLS_KEPT = 1_024

# The most one streamed model answer may send in all (the bytes of all its events), like
# MAX_MODEL_RESPONSE_BYTES for a whole answer: past it the stream is cut and the agent gets an error. Its
# duration is bounded as a whole answer's is, by the entry's `timeout` (MODEL_TIMEOUT_SECONDS), not per read.
MAX_MODEL_STREAM_BYTES = 16 * 1024 * 1024
# The longest part of a model upstream's own error message relayed to the agent (characters).
MAX_MODEL_ERROR_CHARS = 1_000
# A configured model key shorter than this is a placeholder ("EMPTY", "ollama") that ordinary text contains:
# it is taken out of the upstream's error messages, but not out of the model's answers.
MIN_SCRUBBED_ANSWER_SECRET_CHARS = 16
