"""The worker processes of a tensor-parallel backend (ranks 1..N-1; this process is rank 0): one fresh interpreter
each (`python -m engine.backends.tensor_parallel_worker ARGS`, ARGS a pickle of its WorkerArgs), so a caller's main
module (a script without a `__main__` guard, `python -m engine.cli`, a notebook) is never imported again there;
the group's rendezvous in a temporary directory; every step's command broadcast to them over the group; a worker
that exited named before the next command, never a hang. Under torchrun the ranks are torchrun's instead
(engine/backends/torchrun_launch.py): this process joins them and hands them their arguments."""
from __future__ import annotations

import atexit
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from datetime import timedelta
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch.distributed as dist

from engine.backends.torchrun_launch import (check_launch, hand_out_worker_args, join_launched_group,
                                             run_launched_worker, torchrun_launch)
from engine.errors import EngineFatalError


class RankProcesses:
    def __init__(self, world: int, worker_args: Callable[[int, str], Any], backend: str = "torch") -> None:
        """Start ranks 1..world-1; `worker_args(rank, init_method)` is what each is given (a WorkerArgs). Started by
        torchrun (`backend` must suit its ranks: check_launch), this process joins the group torchrun's ranks form
        and hands them their WorkerArgs instead; a rank other than 0 runs the worker loop here and exits with it."""
        self.world = world
        self.workers: list[subprocess.Popen[bytes]] = []
        self._rendezvous: str | None = None
        self._joined = False
        self._ended = False
        # A process that exits without closing its engine still ends the ranks' loops, so they exit cleanly (under
        # torchrun a rank left waiting on a closed connection counts as a failed launch).
        atexit.register(_end_at_exit, weakref.ref(self))
        launch = torchrun_launch()
        if launch is not None:
            check_launch(launch, world, backend)
            if launch.rank != 0:  # an `LLM(...)` in a script every rank runs: this rank serves rank 0's engine
                raise SystemExit(run_launched_worker(launch))
            join_launched_group(launch)
            self.init_method = "env://"
            hand_out_worker_args(worker_args, world)
            self._joined = True
            return
        self._rendezvous = tempfile.mkdtemp(prefix="megakernel-tp-")
        self.init_method = "file://" + os.path.join(self._rendezvous, "store")
        # The workers import this very code, wherever it is imported from here (an installed package or a checkout)
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        for rank in range(1, world):
            args_path = os.path.join(self._rendezvous, f"rank{rank}.pkl")
            with open(args_path, "wb") as f:
                pickle.dump(worker_args(rank, self.init_method), f)
            self.workers.append(subprocess.Popen(
                [sys.executable, "-m", "engine.backends.tensor_parallel_worker", args_path], env=env))

    def join(self, timeout_s: float) -> None:
        """Rank 0 joins the workers' group (after loading its shard, while they load theirs); under torchrun it
        already has."""
        if not self._joined:
            dist.init_process_group("gloo", init_method=self.init_method, rank=0, world_size=self.world,
                                    timeout=timedelta(seconds=timeout_s))
            self._joined = True

    def check(self, grace_s: float = 0.0) -> None:
        """EngineFatalError naming the first worker that exited; `grace_s`: how long to give a worker seen failing
        (a collective's lost connection) to be seen exited, which may come a moment after."""
        deadline = time.monotonic() + grace_s
        while grace_s > 0 and self.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        for rank, proc in enumerate(self.workers, start=1):
            if proc.poll() is not None:
                raise EngineFatalError(f"tensor-parallel rank {rank} exited (exit code {proc.returncode}); "
                                       "the engine cannot run without it")

    def command(self, cmd: object) -> None:
        """Send every worker `cmd` (they run it as this process does its part); None ends them."""
        self.check()
        dist.broadcast_object_list([cmd], src=0)

    @contextmanager
    def collective(self) -> Iterator[None]:
        """A step's collectives with the workers: one that fails (a rank lost mid-step) raises EngineFatalError,
        naming the rank where it exited."""
        try:
            yield
        except (RuntimeError, dist.DistBackendError) as exc:
            self.check(grace_s=2.0)
            raise EngineFatalError(f"tensor-parallel step failed: {exc}") from exc

    def end(self, release: Callable[[], None] = lambda: None) -> None:
        """Tell the workers to end (after their current command), run `release` (this rank's own resources), leave
        the group and wait for them."""
        if self._ended:
            return
        self._ended = True
        try:
            if self.alive() and self._joined:
                dist.broadcast_object_list([None], src=0)
            release()
        finally:
            if self._joined and dist.is_initialized():
                dist.destroy_process_group()
            self.stop()

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.workers)

    def stop(self) -> None:
        """Wait for the workers to end (a few seconds), killing any that does not; the rendezvous removed."""
        for proc in self.workers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._rendezvous is not None:
            shutil.rmtree(self._rendezvous, ignore_errors=True)


def _end_at_exit(ranks: weakref.ReferenceType[RankProcesses]) -> None:
    obj = ranks()
    if obj is not None:
        try:
            obj.end()  # nothing when it was ended already
        except Exception:  # noqa: BLE001 - at exit, a group already broken has nothing left to end
            pass
