"""Two panels side by side against a log-scaled sweep axis (batch size, concurrency), saved as a PNG: the figure
`megakernel bench --batch 1,8,...` and `megakernel bench-serve --sweep ...` draw. matplotlib (headless) is imported
only when a figure is drawn; the module imports no torch."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def sweep_figure(path: str | Path, xs: Sequence[int], width: float, title: str = "") -> Iterator[tuple[Any, Any]]:
    """Yields the (left, right) axes to draw on; afterwards both get log x ticks at `xs` and a grid, the figure
    `title`, and it is written to `path` (folders made) and closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(width, 4))
    try:
        yield left, right
        for ax in (left, right):
            ax.set_xscale("log")
            ax.set_xticks(list(xs), [str(x) for x in xs])
            ax.grid(alpha=0.3)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    finally:
        plt.close(fig)
