"""`python -m gateway` is the `gateway` command."""

from __future__ import annotations

from gateway.cli import main

raise SystemExit(main())
