"""The front end's signature table stands apart from the cel-python runtime.

Loading and deciding with the default engine must not import celpy at all (its interpreter is
the fallback engine's, not the front end's); each run-time overload of the fallback engine must
be one the table declares, so the checker and the runtime cannot drift apart.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.policy.cel.signatures import SIGNATURES

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_engine_loads_and_decides_without_importing_celpy() -> None:
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from gateway.policy.callspec import CallSpec
        from gateway.policy.load import load_policy_set
        files = sorted(p for p in Path("policies").rglob("*.yaml") if not p.name.endswith("_test.yaml"))
        policy_set = load_policy_set(files, engine="cel-expr-python")
        policy_set.decide(CallSpec.model_validate({"tool": "fs_read", "args": {"path": "/etc/passwd"}}).to_call())
        loaded = sorted(m for m in sys.modules if m == "celpy" or m.startswith("celpy."))
        print(len(policy_set.rules), loaded)
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rules, loaded = run.stdout.split(" ", 1)
    assert int(rules) > 20  # the packs really loaded
    assert loaded.strip() == "[]"


def test_every_run_time_overload_is_declared_in_the_table() -> None:
    from gateway.policy.cel import pure_signatures

    for name, overloads in pure_signatures._IMPLEMENTATIONS.items():
        declared = {o.params for o in SIGNATURES[name]}
        assert {params for params, _ in overloads} <= declared, name


def test_an_overload_the_table_lacks_cannot_be_given_an_implementation() -> None:
    from gateway.policy.cel import pure_signatures

    with pytest.raises(AssertionError, match="not in the signature table"):
        pure_signatures._declare("size", ("int",), len)
