"""How the server's processes log: the server's and the engine's lines on stderr, shaped like uvicorn's. Used by
`megakernel serve` (server/cli.py) and by its engine process (server/engine_child.py), which configures its own."""
from __future__ import annotations

import logging
import sys


def configure_logging(level: str) -> None:
    """The server's own lines look like uvicorn's ("INFO:     ...") on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    for name in ("server", "engine"):  # the engine's lines: each step shape compiled (step_builder_cache.py)
        root = logging.getLogger(name)
        root.handlers[:] = [handler]
        root.setLevel(level.upper())
        root.propagate = False
