"""Ranks started by torchrun (engine/backends/torchrun_launch.py): `torchrun --nproc-per-node 2 -m engine.cli generate
--tensor-parallel-size 2` on CPUs (the torch backend over gloo) prints what one process prints; an `LLM(...)` script
every rank runs works the same; a launch the engine cannot use ends with an error naming the flags, not a hang."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.torchrun_launch import TorchrunLaunch, check_launch, torchrun_launch

ROOT = Path(__file__).resolve().parents[2]
GENERATE = ["generate", "--backend", "torch", "--dtype", "float32", "--prompt", "hello world", "--max-tokens", "6",
            "--temperature", "0", "--ignore-eos"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _torchrun(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           *args], capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)


def test_the_environment_says_whether_torchrun_started_this_process() -> None:
    assert torchrun_launch({}) is None
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
           "MASTER_PORT": "29500"}
    assert torchrun_launch(env) == TorchrunLaunch(rank=1, world=4, local_world=2)
    assert torchrun_launch({**env, "RANK": "0", "WORLD_SIZE": "1"}) is None  # one process: nothing to join
    with pytest.raises(ValueError, match="--tensor-parallel-size 2 under torchrun, which started 4"):
        check_launch(TorchrunLaunch(0, 4, 4), 2, "torch")
    with pytest.raises(ValueError, match="one host"):
        check_launch(TorchrunLaunch(0, 4, 2), 4, "cuda")
    check_launch(TorchrunLaunch(0, 4, 2), 4, "torch")  # gloo ranks may span hosts


def test_generate_under_torchrun_prints_what_one_process_prints(tiny_checkpoint: str) -> None:
    one = subprocess.run([sys.executable, "-m", "engine.cli", *GENERATE, "--model", tiny_checkpoint],
                         capture_output=True, text=True, timeout=240, env=_env(), cwd=ROOT)
    assert one.returncode == 0, one.stderr[-2000:]
    two = _torchrun("-m", "engine.cli", *GENERATE, "--model", tiny_checkpoint, "--tensor-parallel-size", "2")
    assert two.returncode == 0, two.stderr[-2000:]
    texts = lambda out: [ln for ln in out.splitlines() if ln.startswith("---")]  # noqa: E731 - not the timing line
    assert texts(two.stdout) == texts(one.stdout) and texts(one.stdout)


def test_an_llm_script_every_rank_runs(tiny_checkpoint: str, tmp_path: Path) -> None:
    script = tmp_path / "two_ranks.py"
    script.write_text(
        "import sys\n"
        "from engine import LLM, SamplingParams\n"
        f"llm = LLM({tiny_checkpoint!r}, backend='torch', dtype='float32', progress=False, tensor_parallel_size=2)\n"
        "out = llm.generate([{'prompt_token_ids': [5, 17, 200]}], SamplingParams(temperature=0, max_tokens=5,"
        " ignore_eos=True))\n"
        "print('tokens', list(out[0].outputs[0].token_ids))\n"
        "llm.close()\n")
    run = _torchrun(str(script))
    assert run.returncode == 0, run.stderr[-2000:]
    from engine import LLM, SamplingParams

    want = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False).generate(
        [{"prompt_token_ids": [5, 17, 200]}], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    assert run.stdout.strip().splitlines() == [f"tokens {list(want[0].outputs[0].token_ids)}"]  # rank 0 alone prints


def test_a_launch_the_engine_cannot_use_is_an_error_naming_the_flags(tiny_checkpoint: str) -> None:
    run = _torchrun("-m", "engine.cli", *GENERATE, "--model", tiny_checkpoint, timeout=180)  # tensor_parallel_size 1
    assert run.returncode != 0
    assert "--tensor-parallel-size 1 under torchrun, which started 2 processes" in run.stderr


def test_serve_under_torchrun_refuses_an_engine_process() -> None:
    import argparse

    from engine.cli.main import _check_torchrun

    args = argparse.Namespace(command="serve", tensor_parallel_size=2, backend="torch", engine_process=True)
    with pytest.raises(ValueError, match="--engine-process: not under torchrun"):
        _check_torchrun(args, TorchrunLaunch(rank=0, world=2, local_world=2))


def test_serve_under_torchrun_keeps_its_engine_by_default() -> None:
    """--engine-process is on by default, but not in a process torchrun started (its engine must stay there): there
    the default is off and only an explicit --engine-process is refused."""
    import argparse

    from engine.cli.main import _check_torchrun
    from server.serve_options import engine_process

    launched = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert engine_process(None, {}) is True
    assert engine_process(None, launched) is False
    assert engine_process(False, {}) is False and engine_process(True, launched) is True
    args = argparse.Namespace(command="serve", tensor_parallel_size=2, backend="torch", engine_process=None)
    _check_torchrun(args, TorchrunLaunch(rank=0, world=2, local_world=2))  # the default: no error
