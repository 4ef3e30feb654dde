"""Where the megakernel spills registers: every local-memory load / store (LDL / STL) of an `nvdisasm -g`
listing, counted per (function, source line, kind). `dev/sass_spills.sh` makes the listing from the built
interpreter on a GPU machine (cuobjdump / nvdisasm); this module only parses text, so it runs anywhere.

    python -m dev.sass_spills listing.sass
"""
from __future__ import annotations

import collections
import re
import sys
from collections.abc import Iterable

_FUNCTION = re.compile(r"^\s*\.text\.(\S+):")
_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_LOCAL = re.compile(r"\b(LDL|STL)(\.[\w.]+)?\s")

SpillSite = tuple[str, str, str]  # (function, "file:line", "LDL" | "STL")


def spill_sites(listing: Iterable[str]) -> collections.Counter[SpillSite]:
    """Count LDL / STL instructions by the function and the most recent source-line marker above them."""
    func, where = "?", "?"
    hits: collections.Counter[SpillSite] = collections.Counter()
    for line in listing:
        if m := _FUNCTION.match(line):
            func, where = m.group(1), "?"
        elif m := _LINE.search(line):
            where = f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}"
        elif m := _LOCAL.search(line):
            hits[(func, where, m.group(1))] += 1
    return hits


def report(hits: collections.Counter[SpillSite]) -> str:
    rows = [f"{n:4d} {kind} {where:40s} {func[:60]}" for (func, where, kind), n in sorted(hits.items())]
    return "\n".join(rows) if rows else "no local-memory loads or stores"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dev.sass_spills LISTING", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        print(report(spill_sites(f)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
