"""The ground floor: concepts every room shares (limits, errors, diagnostics, values, time,
durations, globs, YAML positions, document validation). It imports nothing of the gateway's own."""
