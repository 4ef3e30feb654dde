"""Sorts compute-sanitizer racecheck's hazards (its default report: one block per writer site, one line per reader site)
into the interpreter's known handoffs, and fails on any other.

racecheck orders shared-memory accesses by barriers it models (__syncthreads, named barriers) but not by mbarriers or
by acquire/release flags, which is how the interpreter's roles hand data to each other. So a clean step reports these,
each ordered in the kernel (csrc/interpreter/roles.cuh, consumer.cuh, state.cuh):
- slot words: the controller writes an instruction's slot (run_controller, derive_kv_stream) and arrives on the slot's
  `slot_full` mbarrier; the loader and the consumers read it after waiting on that barrier, and the controller rewrites
  it only after both arrived on `slot_free`;
- issued pages: the loader publishes a page it armed with st.release.shared (`ring_issued`, the one word written that
  way), the consumers read it with ld.acquire.shared (wait_page_issued) before waiting on the page's `page_full`
  mbarrier; racecheck also pairs that store with the consumers' plain reads of the ring cursor, the words right after
  it (RingWalk, the tile page loops), which the loader never writes and consumer barriers order;
- the low cap: a volatile hint (set_low_cap_from / low_cap) that the loader re-reads before every copy, unordered by
  design: a stale value changes only how many copies it keeps in flight for a while.
A hazard outside these (e.g. between two consumer warps on the ops' own shared buffers) is a real race until shown
otherwise. Usage: python -m dev.racecheck_triage RACECHECK_OUTPUT (exit status 1 on an unknown hazard)."""
from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HEAD = re.compile(r"Race reported between (Read|Write) access at (.+?) in (\S+:\d+)\s*$")
PAIR = re.compile(r"and (Read|Write) access at (.+?) in (\S+:\d+) \[(\d+) hazards?\]")
SLOT_WRITERS = ("mk::vm::run_controller(", "mk::vm::derive_kv_stream(")
RELEASE_WRITER = "mk::tk::store_release_shared("
LOW_CAP = ("mk::vm::low_cap(", "mk::vm::set_low_cap_from(")


@dataclass(frozen=True)
class Hazard:
    first: str  # "Write mk::vm::run_controller(...) roles.cuh:52"
    second: str
    count: int


def _site(access: str, function: str, where: str) -> str:
    return f"{access} {function} {where.rsplit('/', 1)[-1]}"


def parse(text: str) -> list[Hazard]:
    """Every (site, site, count) line of a racecheck report (frames of a clone prefix kept as printed)."""
    out: list[Hazard] = []
    first: str | None = None
    for line in text.splitlines():
        line = line.removeprefix("=========").strip()
        if m := HEAD.search(line):
            first = _site(*m.groups())
        elif (m := PAIR.search(line)) and first is not None:
            out.append(Hazard(first, _site(*m.groups()[:3]), int(m.group(4))))
    return out


def kind(h: Hazard) -> str | None:
    """The known handoff a hazard belongs to, or None."""
    sites = (h.first, h.second)
    writes = [s for s in sites if s.startswith("Write ")]
    if any(w in s for s in writes for w in SLOT_WRITERS):
        return "slot words (slot_full / slot_free mbarriers)"
    if any(RELEASE_WRITER in s for s in writes):
        return "issued pages (ring_issued release / acquire)"
    if all(any(f in s for f in LOW_CAP) for s in sites):
        return "the low cap (a volatile hint)"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dev.racecheck_triage RACECHECK_OUTPUT", file=sys.stderr)
        return 2
    hazards = parse(Path(argv[0]).read_text(errors="replace"))
    kinds: Counter[str] = Counter()
    unknown = [h for h in hazards if kind(h) is None]
    for h in hazards:
        kinds[kind(h) or "UNKNOWN"] += h.count
    for name, n in kinds.most_common():
        print(f"{n:>8} {name}")
    for h in unknown:
        print(f"unknown hazard ({h.count}): {h.first}  <->  {h.second}")
    print(f"{len(hazards)} reader sites, {len(unknown)} outside the known handoffs")
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
