"""min_tokens end to end on a tiny random model whose EOS ids are most of the vocabulary and every token the plain
greedy run starts with: without min_tokens a request ends at its first token; with it, it goes on past EOS until it
has min_tokens tokens, step by step and in runs of decode steps (torch backend), and on the vm backend."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from engine import LLM, SamplingParams
from engine.run_stops import RunStops

PROMPTS = ["Hello there", "The quick brown fox jumps", "a", "Numbers: 1 2 3 4 5 6 7"]
EOS_BELOW = 960  # ids 0..959 are EOS ids (about 94% of the tiny vocabulary of 1024)


def _llm(checkpoint: str, decode_steps: int = 1, backend: str = "torch") -> LLM:
    return LLM(checkpoint, backend=backend, dtype="float32", progress=False, max_num_seqs=4,
               decode_steps=decode_steps, num_pages=64)


@pytest.fixture(scope="module")
def eos_checkpoint(tiny_checkpoint: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny checkpoint with EOS ids 0..959 and every first token of the prompts' free greedy runs."""
    free = _llm(tiny_checkpoint).generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
    firsts = {o.outputs[0].token_ids[0] for o in free}
    out = tmp_path_factory.mktemp("eos_ckpt") / "model"
    shutil.copytree(tiny_checkpoint, out)
    config = json.loads((out / "config.json").read_text())
    config["eos_token_id"] = sorted(set(range(EOS_BELOW)) | firsts)
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


def _eos(llm: LLM) -> set[int]:
    return set(llm.engine.config.eos_token_ids)


def _check_held(llm: LLM, tokens: list[int], reason: str | None, p: SamplingParams) -> None:
    """No EOS / stop id among the first min_tokens tokens; a stop by one comes after them."""
    held = _eos(llm) | set(p.stop_token_ids)
    assert len(tokens) >= p.min_tokens
    assert not held & set(tokens[:p.min_tokens])
    if reason == "stop":
        assert len(tokens) > p.min_tokens and tokens[-1] in held
    else:
        assert reason == "length" and len(tokens) == p.max_tokens


def test_eos_ends_a_request_at_its_first_token_without_min_tokens(eos_checkpoint: str) -> None:
    outs = _llm(eos_checkpoint).generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=8))
    assert [(len(o.outputs[0].token_ids), o.outputs[0].finish_reason) for o in outs] == [(1, "stop")] * len(PROMPTS)


@pytest.mark.parametrize("sampled", [False, True])
def test_requests_go_on_past_eos_until_min_tokens_step_by_step_and_in_runs(eos_checkpoint: str,
                                                                         sampled: bool) -> None:
    """Rows with and without min_tokens in one batch (and a stop id): each row keeps its rule, and runs of decode
    steps (the count crossing min_tokens inside a run) give exactly the tokens of one step at a time."""
    base = SamplingParams(temperature=0.9, seed=5, max_tokens=14) if sampled else SamplingParams(temperature=0.0,
                                                                                                 max_tokens=14)
    params = [dataclasses.replace(base, min_tokens=6),
              base,
              dataclasses.replace(base, min_tokens=3, stop_token_ids=[1000, 1001, 1002]),
              dataclasses.replace(base, min_tokens=14)]
    results = []
    for steps in (1, 8):
        llm = _llm(eos_checkpoint, steps)
        outs = llm.generate(PROMPTS, params)
        for o, p in zip(outs, params):
            _check_held(llm, o.outputs[0].token_ids, o.outputs[0].finish_reason, p)
        results.append([(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in outs])
    assert results[0] == results[1]
    assert len(results[0][1][0]) == 1 or sampled  # the row without min_tokens: stopped by EOS at once (greedy)
    assert len(results[0][3][0]) == 14


def test_ignore_eos_still_holds_eos_back_below_min_tokens(eos_checkpoint: str) -> None:
    llm = _llm(eos_checkpoint, 8)
    p = SamplingParams(temperature=0.0, max_tokens=10, min_tokens=4, ignore_eos=True)
    tokens = llm.generate(PROMPTS[0], p)[0].outputs[0].token_ids
    assert len(tokens) == 10 and not _eos(llm) & set(tokens[:4])


def test_the_device_rules_of_a_run_count_stop_ids_from_min_tokens(eos_checkpoint: str) -> None:
    llm = _llm(eos_checkpoint, 8)
    backend = llm.engine.backend
    seen: list[RunStops] = []
    original = backend.decode_steps

    def decode_steps(*args: object, stops: RunStops | None = None, **kw: object) -> int:
        assert stops is not None
        seen.append(stops)
        return original(*args, stops=stops, **kw)  # type: ignore[arg-type]

    backend.decode_steps = decode_steps  # type: ignore[method-assign]
    llm.generate(PROMPTS[:2], [SamplingParams(temperature=0.0, max_tokens=12, min_tokens=9),
                               SamplingParams(temperature=0.0, max_tokens=12, min_tokens=9, ignore_eos=True)])
    assert seen
    generated = 1  # the first token comes from the prompt's step, then the runs
    for stops in seen:
        assert [r.min_count for r in stops.rows] == [9 - generated] * len(stops.rows)
        generated += 8


def test_logprobs_stay_raw_while_eos_is_held_back(eos_checkpoint: str) -> None:
    """The raw argmax (an EOS id) keeps its logprob among the top ones of a step that could not draw it."""
    llm = _llm(eos_checkpoint)
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=3, min_tokens=3, logprobs=1))[0]
    first, entry = out.outputs[0].token_ids[0], out.outputs[0].logprobs[0]
    (top,) = set(entry) - {first}
    assert top in _eos(llm) and entry[top] > entry[first]


def test_the_vm_backend_holds_eos_back_as_the_torch_one(eos_checkpoint: str) -> None:
    p = [SamplingParams(temperature=0.0, max_tokens=5, min_tokens=4), SamplingParams(temperature=0.0, max_tokens=5)]
    want = [o.outputs[0].token_ids for o in _llm(eos_checkpoint, 4).generate(PROMPTS[:2], p)]
    got = [o.outputs[0].token_ids for o in _llm(eos_checkpoint, 4, backend="vm").generate(PROMPTS[:2], p)]
    assert got == want and len(got[0]) >= 4 and len(got[1]) == 1


def test_generate_cli_takes_min_tokens(eos_checkpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli.main import main
    assert main(["generate", "--model", eos_checkpoint, "--backend", "torch", "--dtype", "float32",
                 "--prompt", "Hello", "--max-tokens", "5", "--min-tokens", "5"]) == 0
    assert "(length)" in capsys.readouterr().out
    assert main(["generate", "--model", eos_checkpoint, "--backend", "torch", "--dtype", "float32",
                 "--prompt", "Hello", "--max-tokens", "5", "--min-tokens", "6"]) == 2
    assert "min_tokens" in capsys.readouterr().err



@pytest.mark.parametrize("sampled", [False, True])
def test_look_ahead_holds_eos_back_as_the_engine_without_it(eos_checkpoint: str, sampled: bool) -> None:
    """async_scheduling (engine/lookahead.py): the same tokens and finish reasons with min_tokens as without it."""
    base = SamplingParams(temperature=0.9, seed=5, max_tokens=10) if sampled else SamplingParams(temperature=0.0,
                                                                                                 max_tokens=10)
    params = [dataclasses.replace(base, min_tokens=6), base, dataclasses.replace(base, min_tokens=3),
              dataclasses.replace(base, min_tokens=10)]
    want = _llm(eos_checkpoint).generate(PROMPTS, params)
    ahead = LLM(eos_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=4, decode_steps=1,
                num_pages=64, async_scheduling=True)
    got = ahead.generate(PROMPTS, params)
    assert [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in got] == \
        [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in want]
