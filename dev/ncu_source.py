"""Per-SASS-instruction stall samples from Nsight Compute's source page (`dev/ncu_source.sh`).

ncu's warp-state sampling counts, per instruction address, how often a sampled warp sat there and why
(`stall_*` columns). A sample stands for a slice of warp time, so summing a region's samples and dividing
by how many times the region ran gives its cost per execution (e.g. of integer divisions or the opcode switch between an op's input and its
page loop).

Usage: python -m dev.ncu_source out/ncu_source.csv.gz [--top 30] [--region 0x70030:0x703b0 ...]
       [--warp-us-per-sample X]   (X = warps per SM x SMs x kernel µs / total samples; printed otherwise
                                   as samples per execution)
"""
from __future__ import annotations

import argparse
import csv
import gzip
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SassRow:
    offset: int  # bytes from the first instruction of the kernel
    text: str
    executed: float  # warp-level executions
    samples: float
    stalls: dict[str, float]  # reason -> samples (issued and not-issued together)


def load_source_csv(path: str | Path) -> list[SassRow]:
    """Rows of `ncu --page source --csv --print-source sass` (plain or .gz); errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ncu source CSV not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    header_at = next((i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"]), None)
    if header_at is None:
        raise ValueError(f"{path}: no 'Address,Source' header (export with --page source --csv --print-source sass)")
    header = rows[header_at]
    col = {name: k for k, name in enumerate(header)}
    for need in ("Instructions Executed", "# Samples"):
        if need not in col:
            raise ValueError(f"{path}: column {need!r} missing (profile with --section SourceCounters "
                             f"--section WarpStateStats)")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(r: list[str], name: str) -> float:
        try:
            return float(r[col[name]])
        except (ValueError, IndexError):
            return 0.0

    body = [r for r in rows[header_at + 1:] if r and r[0].startswith("0x")]
    if not body:
        raise ValueError(f"{path}: no instruction rows")
    base = int(body[0][0], 16)
    return [SassRow(int(r[0], 16) - base, r[1].strip(), num(r, "Instructions Executed"), num(r, "# Samples"),
                    {h[len("stall_"):]: num(r, h) for h in reasons if num(r, h) > 0}) for r in body]


@dataclass(frozen=True)
class RegionCost:
    samples: float
    executions: float  # the most-executed instruction of the region (its entries, for straight-line code)
    stalls: dict[str, float]

    def per_execution(self, warp_us_per_sample: float | None) -> float:
        """Samples (or warp-µs, given the scale) per execution of the region."""
        per = self.samples / self.executions if self.executions else 0.0
        return per * warp_us_per_sample if warp_us_per_sample else per


def region_cost(rows: list[SassRow], lo: int, hi: int) -> RegionCost:
    """Samples of the instructions at offsets [lo, hi)."""
    sel = [r for r in rows if lo <= r.offset < hi]
    if not sel:
        raise ValueError(f"no instruction in [{lo:#x}, {hi:#x})")
    stalls: dict[str, float] = {}
    for r in sel:
        for k, v in r.stalls.items():
            stalls[k] = stalls.get(k, 0.0) + v
    return RegionCost(sum(r.samples for r in sel), max(r.executed for r in sel), stalls)


def summary(rows: list[SassRow], top: int, regions: list[tuple[int, int]], warp_us: float | None) -> str:
    total = sum(r.samples for r in rows) or 1.0
    executed = [r for r in rows if r.executed > 0]
    by_reason: dict[str, float] = {}
    for r in rows:
        for k, v in r.stalls.items():
            by_reason[k] = by_reason.get(k, 0.0) + v
    lines = [f"{len(rows)} instructions ({16 * len(rows) / 1024:.0f} KB), {len(executed)} executed "
             f"({16 * len(executed) / 1024:.0f} KB), {total:.0f} samples",
             "stall reasons: " + ", ".join(f"{k} {100 * v / total:.1f}%"
                                           for k, v in sorted(by_reason.items(), key=lambda x: -x[1])[:8])]
    unit = "warp-µs" if warp_us else "samples"
    for lo, hi in regions:
        c = region_cost(rows, lo, hi)
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(c.stalls.items(), key=lambda x: -x[1])[:4])
        lines.append(f"region [{lo:#x}, {hi:#x}): {c.samples:.0f} samples over {c.executions:.0f} executions = "
                     f"{c.per_execution(warp_us):.3f} {unit} each ({reasons})")
    lines.append(f"top {top} instructions by samples (offset, executions, samples, main reasons):")
    for r in sorted(rows, key=lambda r: -r.samples)[:top]:
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r.stalls.items(), key=lambda x: -x[1])[:2])
        lines.append(f"  {r.offset:#08x}  {r.text[:56]:<56} {r.executed:>9.0f} {r.samples:>7.0f}  {reasons}")
    return "\n".join(lines)


def _region(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    return int(lo, 0), int(hi, 0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--region", type=_region, action="append", default=[], help="LO:HI byte offsets")
    ap.add_argument("--warp-us-per-sample", type=float, default=None)
    args = ap.parse_args(argv)
    print(summary(load_source_csv(args.csv), args.top, args.region, args.warp_us_per_sample))


if __name__ == "__main__":
    main()
