"""Limits of policies and the files they are read from: sizes, expressions, rules, YAML, reloads, diagnostics."""

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

# A YAML document may expand to at most this many values (aliases count each time they are
# used), and nest this deep: both stop "billion laughs" files and runaway recursion.
MAX_YAML_NODES = 50_000
MAX_YAML_DEPTH = 64

# CEL cost bound (Kubernetes refuses admission expressions whose estimated cost is unbounded):
# at most this many comprehensions over inputs of unbounded size (arguments, results, split
# strings) may nest, and an inner one must range over part of the outer element (a walk of
# nested data, linear in the input); one over an independent input is refused at load, since
# its cost is the product of both sizes. Literal lists do not count.
MAX_COMPREHENSION_NESTING = 2

# A file variable is written into the rules that read it (as a tree: one activation per call
# instead of one per set of variables); a variable read many times, by variables read many times,
# grows that tree geometrically, so past this many nodes the variable is bound as a value instead.
MAX_INLINED_NODES = 2_000
# A call's conditions (its rules' and tallies') are evaluated as one listed program (gateway/policy/fused.py)
# while together they stay under this many nodes; past it, one by one as before.
MAX_FUSED_NODES = 8_000

# Parse trees of CEL expressions kept for the typed checker (a reload re-reads mostly the same
# expressions); a tree is a few kilobytes, so this bounds the cache to a few tens of megabytes.
MAX_CACHED_PARSE_TREES = 4096

# A caret snippet under a diagnostic shows at most this many characters of the offending line (a
# window around the column), so that one minified line does not flood a terminal or a CI log.
MAX_SNIPPET_CHARS = 160
