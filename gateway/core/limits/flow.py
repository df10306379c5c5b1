"""Bounds on what a run carries between its calls: labels, distinct values, history (docs/policy-language.md)."""

# The calls ``session.history`` keeps, oldest first: enough for "after a read of X, within the last N calls" rules,
# small enough to read at every call (the decision log has every call).
RUN_HISTORY_KEPT = 64
# Labels a run may carry. A run that would carry more fails closed (the call is refused), so a flood of labels
# from a tool's result can never push out the one a rule looks for.
MAX_RUN_LABELS = 256
# One label's length, and how many one rule may add at once: labels name kinds of data, not the data.
MAX_LABEL_CHARS = 64
MAX_LABELS_PER_RULE = 16
# The distinct values a distinct tally keeps (``session.seen.ID``); the count goes on past it, and a value not
# among those kept counts as new (a cap errs on the strict side).
MAX_SEEN_VALUES = 1000
# A longer distinct value is kept as ``sha256:<hex>`` of it: still distinct, no longer readable.
MAX_SEEN_VALUE_CHARS = 256
