"""A tensor-parallel engine whose ranks `torchrun` started (`torchrun --nproc-per-node N -m engine.cli
generate|serve ... --tensor-parallel-size N`), instead of rank 0 starting them (engine/backends/rank_processes.py).

Every process torchrun starts runs the same command line. Rank 0 runs it as usual: the engine, its scheduler, sampler
and front end; ranks 1..N-1 become workers before the command runs (engine/cli/main.py): they join the group through
torchrun's rendezvous (`env://`: MASTER_ADDR, MASTER_PORT) and wait for the WorkerArgs rank 0 broadcasts once it
knows them (checkpoint, KV pool size, backend options), then run the worker loop of tensor_parallel_worker.py.
The group forms before any rank loads weights, so its timeout covers rank 0's loading; a rank that dies is
torchrun's to handle: it ends the others.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

# The group's timeout when torchrun started the ranks: it forms before rank 0 loads the model and knows the workers'
# arguments, so it must outlast loading a large checkpoint (a collective in a step waits as long for a hung rank).
LAUNCHED_GROUP_TIMEOUT_S = 1800.0
ENV_INIT = "env://"


@dataclass(frozen=True)
class TorchrunLaunch:
    rank: int
    world: int
    local_world: int  # ranks on this host


def torchrun_launch(environ: Mapping[str, str] = os.environ) -> TorchrunLaunch | None:
    """This process's place among the ranks torchrun started, else None: its RANK, LOCAL_RANK, WORLD_SIZE (over 1) and
    the rendezvous's MASTER_ADDR / MASTER_PORT set. A world of one is no launch to join (some environments set these
    variables for a single process)."""
    needed = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if not all(environ.get(k) for k in needed) or int(environ["WORLD_SIZE"]) < 2:
        return None
    world = int(environ["WORLD_SIZE"])
    return TorchrunLaunch(int(environ["RANK"]), world, int(environ.get("LOCAL_WORLD_SIZE", world)))


def check_launch(launch: TorchrunLaunch, world: int, backend: str) -> None:
    """ValueError, naming the flags, when the ranks torchrun started cannot run a `world`-rank engine on `backend`."""
    if launch.world != world:
        raise ValueError(f"--tensor-parallel-size {world} under torchrun, which started {launch.world} processes "
                         "(--nproc-per-node x --nnodes): give both the same number")
    if backend == "cuda" and launch.local_world != launch.world:
        raise ValueError("--backend cuda runs its ranks' all-reduces over peer memory on one host: torchrun started "
                         f"{launch.local_world} of its {launch.world} ranks here (use one node)")


# torch.distributed is imported where it is used: finding out whether torchrun started this process (every CLI start
# asks) must not import torch.


def join_launched_group(launch: TorchrunLaunch) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=ENV_INIT, rank=launch.rank, world_size=launch.world,
                            timeout=timedelta(seconds=LAUNCHED_GROUP_TIMEOUT_S))


def hand_out_worker_args(worker_args: Callable[[int, str], Any], world: int) -> None:
    """Rank 0, in the group: every worker its WorkerArgs (one broadcast of all of them)."""
    import torch.distributed as dist

    dist.broadcast_object_list([[worker_args(rank, ENV_INIT) for rank in range(world)]], src=0)


def run_launched_worker(launch: TorchrunLaunch) -> int:
    """Ranks 1..N-1 of a torchrun launch: join, take this rank's WorkerArgs from rank 0, run the worker loop; the exit
    status. Rank 0 ending without handing any (its command failed before the engine, or asked for no ranks) ends
    this one too: torchrun reports rank 0's error."""
    import torch.distributed as dist

    from engine.backends.tensor_parallel_worker import run_worker

    join_launched_group(launch)
    box: list[Any] = [None]
    try:
        dist.broadcast_object_list(box, src=0)
    except (RuntimeError, dist.DistBackendError):
        dist.destroy_process_group()
        return 1
    run_worker(box[0][launch.rank])
    return 0
