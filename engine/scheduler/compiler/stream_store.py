"""Compiled streams kept on disk between runs, so a restarted server (or a second `generate`) loads the streams of the
step shapes it met before instead of compiling them again.

Why: a server's warm-up compiles some forty step shapes before it serves anyone (30 s on an H200 host, most of it
Python building instruction streams), and every process start paid it again. A stream is a pure function of the
compiler's code, the model's dimensions, the page size, the build parameters, the device's SM count and the shape
key, so a file named by the shape key in a directory named by a fingerprint of all the rest is valid for as long as
that fingerprint holds; a change to the compiler's sources makes a new directory. A file is the StreamPayload
(stream_payload.py) pickled and zlib-compressed (a 2 064-token step of the 1B: 107 000 instructions, 32.5 MB of
arrays, 2.6 MB on disk; loading it took 90 ms against 0.95 s to compile it, on the development CPU). Files are only
ever read by the user who wrote them (the cache lives under $MEGAKERNEL_CACHE_DIR, like the built CUDA modules).
Writes are atomic (a temporary file renamed), so processes sharing the directory see whole files or none; a file that
fails to load is treated as missing and rewritten.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import tempfile
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_cache import BuildParams, CompiledStream
from engine.scheduler.compiler.stream_payload import StreamPayload, from_payload, to_payload
from engine.scheduler.compiler.target import TargetDevice
from models.llama.step_batch import StepBatch

log = logging.getLogger(__name__)

# What a stream is a function of besides its inputs: the instruction formats and opcodes, and the compiler.
_SOURCES = ("engine/instructions", "engine/scheduler/compiler")
_ROOT = Path(__file__).resolve().parents[3]
# Fingerprint directories kept (the most recently used): older ones are streams of other models or older code.
KEEP_FINGERPRINTS = 8


def code_fingerprint() -> str:
    """sha256 of the sources streams are built by (their paths and contents)."""
    h = hashlib.sha256()
    for top in _SOURCES:
        for path in sorted((_ROOT / top).rglob("*.py")):
            h.update(str(path.relative_to(_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


# Longest file stem spelt out from a shape key. A key carries each sequence's KV split count where they differ (a step
# of 128 sequences: some 130 numbers), and file systems refuse names over 255 bytes (ENAMETOOLONG): longer keys are
# named by their first numbers and a hash of the whole key (`load` checks the key stored in the file).
MAX_STEM_CHARS = 120


def stream_file_stem(key: tuple[int, ...]) -> str:
    stem = "_".join(str(k) for k in key)
    if len(stem) <= MAX_STEM_CHARS:
        return stem
    head = "_".join(str(k) for k in key[:4])
    return f"{head}_h{hashlib.sha256(stem.encode()).hexdigest()[:32]}"


class StreamStore:
    """Streams of one (code, model dims, page size, build parameters, device) on disk, by shape key."""

    def __init__(self, root: Path, dims: ModelDims, page_size: int, params: BuildParams, device: TargetDevice) -> None:
        h = hashlib.sha256(code_fingerprint().encode())
        h.update(repr((dims, page_size, params, device)).encode())
        self.root = Path(root)
        self.dir = self.root / h.hexdigest()[:24]
        self.dims = dims
        self.cost = params.cost
        self.loaded = 0  # streams read from disk
        self._pruned = False
        self._writer: ThreadPoolExecutor | None = None  # the file writes of `save`, off the calling thread
        self._writes: list[Future[None]] = []

    def __getstate__(self) -> dict[str, object]:
        """Pickled for a background build's worker process (compile_and_save): without the writer thread."""
        state = dict(self.__dict__)
        state["_writer"], state["_writes"] = None, []
        return state

    def _path(self, key: tuple[int, ...]) -> Path:
        return self.dir / (stream_file_stem(key) + ".stream")

    def load(self, key: tuple[int, ...], batch: StepBatch) -> CompiledStream | None:
        """`key`'s stream with its step args patched for `batch`, or None when there is no (readable) file."""
        path = self._path(key)
        try:
            payload = pickle.loads(zlib.decompress(path.read_bytes()))
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 (a torn or foreign file: compiled again, and rewritten)
            log.warning("stream store: %s unreadable (%s); compiling the stream again", path, exc)
            return None
        if not isinstance(payload, StreamPayload) or payload.key != key:
            return None
        if self.loaded == 0:  # in use (the prune order is the directories' times); a read-only cache still serves
            with contextlib.suppress(OSError):
                os.utime(self.dir)
        cs = from_payload(payload, self.dims)
        cs.patch(batch)
        self.loaded += 1
        return cs

    def save(self, key: tuple[int, ...], cs: CompiledStream) -> None:
        """Write `cs` as `key`'s file, on a writer thread: the payload's arrays, compression and I/O cost the
        calling thread (the engine's, right after a compile) nothing (on the development CPU they took 0.2 s for a
        2 064-token step); an error is logged, never raised: the store is an optimisation."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="megakernel-stream-store")
        self._writes = [f for f in self._writes if not f.done()]
        self._writes.append(self._writer.submit(lambda: self.save_payload(key, to_payload(cs, self.cost))))

    def flush(self) -> None:
        """Until every `save` so far is written (tests; files a process leaves unwritten are compiled again)."""
        wait(self._writes)
        self._writes = []

    def save_payload(self, key: tuple[int, ...], payload: StreamPayload) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not self._pruned:
                self._prune()
            blob = zlib.compress(pickle.dumps(payload, protocol=5), 1)
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, self._path(key))
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)  # left only where the write or the rename failed
        except OSError as exc:
            log.warning("stream store: could not write %s (%s)", self._path(key), exc)

    def compile_and_save(self, key: tuple[int, ...], compile_job: Callable[[], StreamPayload]) -> StreamPayload:
        """`compile_job()`'s payload, written as `key`'s file first (a background build's worker: the engine thread
        then only adopts it)."""
        payload = compile_job()
        self.save_payload(key, payload)
        return payload

    def _prune(self) -> None:
        """Remove fingerprint directories beyond the KEEP_FINGERPRINTS most recently used (this one is used now)."""
        self._pruned = True
        os.utime(self.dir)
        dirs = sorted((d for d in self.root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
        for old in dirs[KEEP_FINGERPRINTS:]:
            with contextlib.suppress(OSError):  # another process pruning it too
                for f in old.iterdir():
                    f.unlink(missing_ok=True)
                old.rmdir()
