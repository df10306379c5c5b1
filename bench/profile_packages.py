"""Sum a cProfile stats file by package: where the gateway's CPU goes, as shares of self time.

    python bench/profile_packages.py FILE [--top N]

FILE is what ``bench/gateway.py --profile FILE`` wrote. Each function's self time (``tottime``) is
credited to the package its file belongs to: the gateway's own modules by subpackage
(``gateway.frontends``, ``gateway.pipeline``, ...), installed libraries by their top-level package
(``mcp``, ``anyio``, ``httpx2``, ...), the standard library by module (``asyncio``, ``json``, ...), and C
built-ins as ``(built-ins)``. cProfile slows the process several times over, so read the shares, not the
seconds.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import sysconfig
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def package_of(filename: str) -> str:
    """The package a profiled function's file belongs to."""
    if filename.startswith("~") or filename.startswith("<"):
        return "(built-ins)"
    path = Path(filename)
    parts = path.parts
    if "site-packages" in parts:
        rest = parts[parts.index("site-packages") + 1:]
        return rest[0].removesuffix(".py") if rest else "(site-packages)"
    if "gateway" in parts:
        rest = parts[len(parts) - 1 - parts[::-1].index("gateway"):]
        return ".".join(rest[:2]).removesuffix(".py") if len(rest) > 2 else "gateway"
    try:
        relative = path.resolve().relative_to(_STDLIB)
    except ValueError:
        return "(other)"
    return relative.parts[0].removesuffix(".py")


def shares(stats_file: Path) -> list[tuple[str, float]]:
    """(package, share of all self time), largest first."""
    stats = pstats.Stats(str(stats_file))
    totals: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), row in stats.stats.items():  # type: ignore[attr-defined]
        totals[package_of(filename)] += row[2]
    whole = sum(totals.values()) or 1.0
    return sorted(((name, seconds / whole) for name, seconds in totals.items()), key=lambda item: -item[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stats", type=Path, help="a cProfile stats file (bench/gateway.py --profile FILE)")
    parser.add_argument("--top", type=int, default=25, help="how many packages to print")
    args = parser.parse_args(argv)
    rows = shares(args.stats)
    ours = sum(share for name, share in rows if name.startswith("gateway"))
    for name, share in rows[:args.top]:
        print(f"{share * 100:6.1f}%  {name}")
    print(f"{ours * 100:6.1f}%  (all of gateway.*)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
