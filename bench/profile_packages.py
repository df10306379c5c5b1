"""Sum a profile by package: where the gateway's CPU goes, as shares of self time.

    python bench/profile_packages.py FILE [--top N]

FILE is what ``bench/gateway.py --profile FILE`` (cProfile) or ``--sample FILE`` (py-spy's collapsed
stacks) wrote. Each function's self time (``tottime``; for py-spy, the samples in which it is the
innermost Python frame, so time in a C extension counts for the Python function that called it) is
credited to the package its file belongs to: the gateway's own modules by subpackage
(``gateway.frontends``, ``gateway.pipeline``, ...), installed libraries by their top-level package
(``mcp``, ``anyio``, ``httpx2``, ...), the standard library by module (``asyncio``, ``json``, ...), and C
built-ins as ``(built-ins)``. cProfile slows the process several times over, so read the shares, not the
seconds. py-spy does not slow anything down: its shares are the process's own, and it also gives the
share of samples with any of the gateway's own functions on the stack ("gateway.* or what it called").
"""

from __future__ import annotations

import argparse
import pstats
import re
import sys
import sysconfig
from collections import defaultdict
from collections.abc import Iterator, Sequence
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
    totals: dict[str, float] = defaultdict(float)
    if _is_sampled(stats_file):
        for frames, count in _stacks(stats_file):
            totals[package_of(frames[-1])] += count
    else:
        stats = pstats.Stats(str(stats_file))
        for (filename, _line, _name), row in stats.stats.items():  # type: ignore[attr-defined]
            totals[package_of(filename)] += row[2]
    whole = sum(totals.values()) or 1.0
    return sorted(((name, seconds / whole) for name, seconds in totals.items()), key=lambda item: -item[1])


def under_gateway(stats_file: Path) -> float | None:
    """py-spy: the share of samples with one of the gateway's own functions on the stack (None for cProfile)."""
    if not _is_sampled(stats_file):
        return None
    inside = whole = 0
    for frames, count in _stacks(stats_file):
        whole += count
        if any(package_of(f).startswith("gateway") and package_of(f) not in _ENTRY for f in frames):
            inside += count
    return inside / whole if whole else 0.0


# The gateway's entry points, under every stack of a serving process (``gateway serve`` runs uvicorn).
_ENTRY = {"gateway", "gateway.cli"}

# One frame of py-spy's collapsed stacks: "function (file:line)".
_FRAME = re.compile(r"^.* \((?P<file>.+):\d+\)$")


def _is_sampled(path: Path) -> bool:
    """Whether ``path`` holds py-spy's collapsed stacks (text) rather than cProfile's stats (marshal)."""
    with path.open("rb") as f:
        head = f.read(4096)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return bool(text) and text.split("\n", 1)[0].rsplit(" ", 1)[-1].isdigit()


def _stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """Each collapsed stack's file names, outermost first, and how many samples it had."""
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        files = [m["file"] for frame in stack.split(";") if (m := _FRAME.match(frame))]
        if files and count.isdigit():
            yield files, int(count)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stats", type=Path,
                        help="a cProfile stats file (bench/gateway.py --profile FILE) or py-spy's stacks (--sample)")
    parser.add_argument("--top", type=int, default=25, help="how many packages to print")
    args = parser.parse_args(argv)
    rows = shares(args.stats)
    ours = sum(share for name, share in rows if name.startswith("gateway"))
    for name, share in rows[:args.top]:
        print(f"{share * 100:6.1f}%  {name}")
    print(f"{ours * 100:6.1f}%  (all of gateway.*)")
    called = under_gateway(args.stats)
    if called is not None:
        print(f"{called * 100:6.1f}%  (gateway.* or what it called)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
