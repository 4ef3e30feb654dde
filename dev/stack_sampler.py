"""Where a Python process's threads spend their time, by sampling every thread's stack about once a millisecond
(no profiler hooks, so the sampled process runs at its own speed). Run any module under it:
    python -m dev.stack_sampler OUT.txt engine.cli serve --model DIR ...
OUT.txt is rewritten every few seconds (a process ended by a signal still leaves its last report): per thread, the
functions on the most samples, inclusive (anywhere on the stack) and exclusive (on top). A thread shown in a C call
that releases the GIL (a socket write, a CUDA synchronisation, select) may be waiting there for the GIL back."""
from __future__ import annotations

import collections
import runpy
import sys
import threading
import time
from pathlib import Path

INTERVAL_S = 0.001
REPORT_EVERY_S = 5.0
TOP = 45


class StackSampler:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.inclusive: collections.Counter[tuple[str, str]] = collections.Counter()
        self.exclusive: collections.Counter[tuple[str, str]] = collections.Counter()
        self.samples: collections.Counter[str] = collections.Counter()

    def run(self) -> None:
        me, last = threading.get_ident(), time.monotonic()
        while True:
            names = {t.ident: t.name for t in threading.enumerate()}
            for tid, frame in sys._current_frames().items():
                if tid != me:
                    self._add(names.get(tid, str(tid)), frame)
            if time.monotonic() - last > REPORT_EVERY_S:
                last = time.monotonic()
                self.out.write_text(self.report())
            time.sleep(INTERVAL_S)

    def _add(self, thread: str, frame) -> None:  # noqa: ANN001 - a frame object
        self.samples[thread] += 1
        seen: set[str] = set()
        top = True
        while frame is not None:
            code = frame.f_code
            where = f"{code.co_filename.rsplit('site-packages/', 1)[-1]}:{code.co_name}"
            if top:
                self.exclusive[(thread, where)] += 1
                top = False
            if where not in seen:
                self.inclusive[(thread, where)] += 1
                seen.add(where)
            frame = frame.f_back

    def report(self) -> str:
        lines = []
        for thread, total in self.samples.most_common():
            lines.append(f"== {thread}: {total} samples")
            rows = sorted(((w, c) for (t, w), c in self.inclusive.items() if t == thread), key=lambda r: -r[1])
            for where, c in rows[:TOP]:
                lines.append(f"  incl {100 * c / total:5.1f}%  excl {100 * self.exclusive[(thread, where)] / total:5.1f}%"
                             f"  {where}")
        return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m dev.stack_sampler OUT.txt MODULE [ARGS...]")
    sampler = StackSampler(Path(sys.argv[1]))
    threading.Thread(target=sampler.run, name="stack-sampler", daemon=True).start()
    module, sys.argv = sys.argv[2], sys.argv[2:]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sampler.out.write_text(sampler.report())


if __name__ == "__main__":
    main()
