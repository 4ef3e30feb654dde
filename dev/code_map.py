"""Which code a kernel launch executed, as contiguous regions, from Nsight Compute's source page
(`dev/ncu_source.sh` writes the CSV).

Why: under full HBM load an instruction fetch that misses the SM's instruction caches queues behind the
weight streams; a page whose code was evicted costs ≈ 1450 more cycles once more than 64-128 KB of other code
ran in between (dev/microbench/page_in_context.cu). This map says how
much distinct code a decode step runs and where it sits, so a change meant to shrink it can be checked.

Usage: python -m dev.code_map out/ncu_source.csv.gz [--top 25] [--gap 256] [--by-fetch]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from dev.ncu_source import SassRow, load_source_csv

INSTRUCTION_BYTES = 16
# SASS opcodes that tell regions apart at a glance (tensor cores, transcendental, barriers, copies, ...).
MARKERS = ("HMMA", "LDSM", "MUFU.EX2", "MUFU.RSQ", "MUFU.SIN", "SHFL", "RED", "ATOM", "BAR", "SYNCS", "UBLKCP",
           "LDG", "CCTL")


@dataclass(frozen=True)
class CodeRegion:
    lo: int  # byte offset of its first executed instruction
    hi: int  # one past its last executed instruction
    instructions: int  # executed instructions in it
    executions: float  # summed warp-level executions of those instructions
    samples: float
    markers: tuple[str, ...]
    fetch_samples: float = 0.0  # samples of warps stalled for an instruction fetch (ncu's no_instruction)

    @property
    def kib(self) -> float:
        return self.instructions * INSTRUCTION_BYTES / 1024

    @property
    def mean_executions(self) -> float:
        return self.executions / self.instructions


def fetch_stalls(row: SassRow) -> float:
    """Samples of `row` whose warp waited for its instruction to be fetched (ncu names the reason
    no_instruction; shortened names are matched too)."""
    return sum(v for k, v in row.stalls.items() if k.startswith("no_inst"))


def executed_regions(rows: list[SassRow], max_gap: int = 256) -> list[CodeRegion]:
    """Executed instructions grouped into regions, in address order: a run of never-executed code longer
    than `max_gap` bytes (a cold branch, another function) starts a new region."""
    regions: list[CodeRegion] = []
    group: list[SassRow] = []

    def close() -> None:
        if group:
            marks = tuple(m for m in MARKERS if any(m in r.text for r in group))
            regions.append(CodeRegion(group[0].offset, group[-1].offset + INSTRUCTION_BYTES, len(group),
                                      sum(r.executed for r in group), sum(r.samples for r in group), marks,
                                      sum(fetch_stalls(r) for r in group)))

    for r in sorted((r for r in rows if r.executed > 0), key=lambda r: r.offset):
        if group and r.offset - (group[-1].offset + INSTRUCTION_BYTES) > max_gap:
            close()
            group = []
        group.append(r)
    close()
    return regions


def render(regions: list[CodeRegion], top: int, by_fetch: bool = False) -> str:
    """The `top` largest regions (by_fetch: those with the most instruction-fetch stall samples)."""
    total = sum(c.instructions for c in regions)
    fetch = sum(c.fetch_samples for c in regions)
    order = "most fetch stalls" if by_fetch else "largest"
    lines = [f"{len(regions)} executed regions, {total} instructions = {total * INSTRUCTION_BYTES / 1024:.1f} KB, "
             f"{fetch:.0f} fetch-stall samples; the {min(top, len(regions))} {order} (exec = mean warp executions "
             f"per instruction, fetch = no_instruction samples):"]
    key = (lambda c: -c.fetch_samples) if by_fetch else (lambda c: -c.instructions)
    for c in sorted(regions, key=key)[:top]:
        lines.append(f"  [{c.lo:#08x}, {c.hi:#08x})  {c.instructions:5d} instr {c.kib:5.1f} KB  exec "
                     f"{c.mean_executions:9.0f}  samples {c.samples:7.0f}  fetch {c.fetch_samples:6.0f}  "
                     f"{' '.join(c.markers)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--gap", type=int, default=256, help="bytes of never-executed code that split two regions")
    ap.add_argument("--by-fetch", action="store_true", help="rank regions by instruction-fetch stall samples")
    args = ap.parse_args(argv)
    print(render(executed_regions(load_source_csv(args.csv), args.gap), args.top, args.by_fetch))


if __name__ == "__main__":
    main()
