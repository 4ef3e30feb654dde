"""The tensor-parallel bench's PyTorch baseline, `torch-tp-graph`: the static decoder of the baselines
(engine/bench/static_llama.py) sharded Megatron-style over N GPUs, one process each, its O and down projections'
partial sums all-reduced with NCCL and the LM head's vocabulary split with its logits all-gathered, every decode step
one CUDA graph per rank (the collectives captured in it). This is what "the kernel split at the all-reduces, NCCL
between launches" amounts to when each launch is a CUDA graph of cuBLAS kernels: the design the megakernel's in-kernel
all-reduce is measured against.

`megakernel bench --tensor-parallel-size N` runs it as its last row (`--skip tp-graph` leaves it out;
tensor_parallel_runner). The ranks are fresh interpreters (`python -m engine.bench.tensor_parallel_baseline ARGS`, as
the engine's workers: engine/backends/rank_processes.py), each reading its shard from the bench's checkpoint (or
making random ones, `load_format="dummy"`) onto its GPU; rank 0 writes the result. On CPUs (tests) the same runs eagerly over gloo.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

from engine.bench.baselines import RunResult, capture_cuda_graph, timed_runs
from engine.bench.config import TP_GRAPH
from models.llama.config import LlamaConfig
from models.llama.tensor_parallel import check_tensor_parallel, shard_config, shard_parts
from models.llama.weights import LlamaWeights, dense, load_weights

NAME = TP_GRAPH
# A rank still running after this long is killed and the row fails naming it and its last progress line (the ranks
# print one per stage: set up, weights, graph captured, timed), so a hang and a slow stage read differently.
RANK_TIMEOUT_S = 600


@dataclass(frozen=True)
class RankArgs:
    rank: int
    world: int
    init_method: str
    model_dir: str
    load_format: str
    dtype: str
    prompt: list[int]
    new_tokens: int
    repeats: int
    cuda: bool
    out: str  # rank 0's result (a pickled RunResult)


def _collectives(world: int, cuda: bool):  # noqa: ANN202 - (reduce, gather)
    def reduce(x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x)
        return x

    def gather(x: torch.Tensor) -> torch.Tensor:  # [B, V / N] on each rank -> [B, V], rank order
        if cuda:
            out = torch.empty((world, *x.shape), dtype=x.dtype, device=x.device)
            dist.all_gather_into_tensor(out, x.contiguous())
            parts = out.unbind(0)
        else:
            parts = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)

    return reduce, gather


def run_rank(a: RankArgs) -> None:
    from engine.bench.static_llama import StaticLlama

    device = torch.device("cuda", a.rank) if a.cuda else torch.device("cpu")
    if a.cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if a.cuda else "gloo", init_method=a.init_method, rank=a.rank,
                            world_size=a.world)
    stage = lambda what: print(f"rank {a.rank}: {what}", flush=True)  # noqa: E731 - the parent's last line on failure
    try:
        stage("process group up")
        config = LlamaConfig.from_dir(a.model_dir)
        weights = load_weights(a.model_dir, config, dtype=getattr(torch, a.dtype), device=device, progress=False,
                               parts=shard_parts(config, a.rank, a.world, vocab_parallel=False),
                               load_format=a.load_format)
        per = config.vocab_size // a.world  # the rank's LM head rows (the embedding stays whole: one row a token)
        head = dense(weights.lm_head, weights.dtype)[a.rank * per:(a.rank + 1) * per].contiguous()
        shard = replace(weights, config=shard_config(config, a.world), lm_head=head)
        stage("shard loaded")
        reduce, gather = _collectives(a.world, a.cuda)
        model = StaticLlama(shard, len(a.prompt) + a.new_tokens, reduce=reduce, gather=gather)
        prompt = torch.tensor(a.prompt, dtype=torch.int64, device=device)
        with torch.no_grad():
            step = model.forward
            if a.cuda:
                model.reset()
                step = capture_cuda_graph(model.forward)
                stage("decode step captured")
            result = timed_runs(NAME, model, step, prompt, a.new_tokens, a.repeats,
                                {"ranks": a.world, "collectives": "NCCL" if a.cuda else "gloo",
                                 "step": "one CUDA graph per rank" if a.cuda else "eager"})
        stage("timed")
        if a.rank == 0:
            Path(a.out).write_bytes(pickle.dumps(result))
    finally:
        if not a.cuda:  # NCCL's teardown hangs once a CUDA graph captured its collectives (pytorch issue 115388):
            dist.destroy_process_group()  # a GPU rank ends without it (the process exit frees the communicator)


def run_tensor_parallel_baseline(model_dir: str, prompt: list[int], new_tokens: int, world: int, repeats: int = 3,
                                 load_format: str = "auto", dtype: str = "bfloat16",
                                 cuda: bool = True, timeout_s: float = RANK_TIMEOUT_S) -> RunResult:
    """The `torch-tp-graph` row over `world` ranks (GPUs 0..world-1, or gloo processes on CPUs): every rank's decode
    steps replayed as CUDA graphs; a rank that fails makes it a failed row naming the error."""
    check_tensor_parallel(LlamaConfig.from_dir(model_dir), world)  # the vocabulary too: the LM head is split
    with tempfile.TemporaryDirectory(prefix="megakernel-tp-baseline-") as d:
        out = os.path.join(d, "result.pkl")
        procs, logs = [], []
        for rank in range(world):
            args = RankArgs(rank, world, "file://" + os.path.join(d, "store"), model_dir, load_format, dtype,
                            list(prompt), new_tokens, repeats, cuda, out)
            path = os.path.join(d, f"rank{rank}.pkl")
            Path(path).write_bytes(pickle.dumps(args))
            logs.append(Path(d) / f"rank{rank}.log")  # a file, not a pipe: a killed bench leaves it readable
            with logs[-1].open("w") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", "engine.bench.tensor_parallel_baseline", path],
                                              stdout=log, stderr=subprocess.STDOUT))
        failures = []
        deadline = time.monotonic() + timeout_s
        for rank, p in enumerate(procs):
            try:
                p.wait(timeout=max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                p.wait()
                failures.append(f"rank {rank} still running after {timeout_s:.0f} s: {_last_line(logs[rank])}")
                continue
            if p.returncode != 0:
                failures.append(f"rank {rank} exited with {p.returncode}: {_last_line(logs[rank])}")
        if failures:
            return RunResult(NAME, "failed", reason="; ".join(failures))
        return pickle.loads(Path(out).read_bytes())


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def tensor_parallel_runner(weights: LlamaWeights, config: LlamaConfig, prompt_ids: list[int], new_tokens: int,
                           world: int, cuda: bool = True,
                           timeout_s: float = RANK_TIMEOUT_S) -> tuple[Sequence[int], float]:
    """The bench's `torch-tp-graph` row as an engine runner (engine/bench/engines.py) on the bench's weights: written
    as a checkpoint the ranks read their shards from, or, for weights without data (`--load-format dummy`), a config
    the ranks make random shards for. `cuda`: NCCL over GPUs 0..world-1, else gloo on CPUs. A failed run raises,
    naming the rank."""
    from engine.bench.generate_runner import write_bench_model

    dtype = str(weights.dtype).removeprefix("torch.")
    with tempfile.TemporaryDirectory(prefix="megakernel-bench-tp-") as d:
        model_dir, load_format = write_bench_model(weights, Path(d))
        result = run_tensor_parallel_baseline(str(model_dir), prompt_ids, new_tokens, world, load_format=load_format,
                                              dtype=dtype, cuda=cuda, timeout_s=timeout_s)
    if result.status != "ok" or result.seconds_per_token is None:
        raise RuntimeError(result.reason or f"{NAME} returned no time")
    return result.tokens, result.seconds_per_token


def _main(path: str) -> None:
    """A rank's process: its exit code says how it went, without running the interpreter's teardown, where a
    communicator whose collectives a CUDA graph captured can hang."""
    code = 0
    try:
        run_rank(pickle.loads(Path(path).read_bytes()))
    except BaseException:  # noqa: BLE001 - reported to the parent through the log and the exit code
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _main(sys.argv[1])
