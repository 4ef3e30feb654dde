"""The stop rules of a run of decode steps as the device checks them (engine/run_stops.py, the host side of
csrc/interpreter/run_stop.cuh): built from each request's SamplingParams and token counts, laid out as the
kernel reads them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine import run_stops as rs
from engine.run_stops import PAD_ID, RS_NOT_STOPPED, RowStop, RunStops, row_stop, run_stops, worked_end
from engine.sampling_params import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
EOS = (1009, 1016)


def test_stop_ids_are_eos_then_the_requests_own_each_once() -> None:
    p = SamplingParams(max_tokens=10, stop_token_ids=[5, 1016, 5])
    assert row_stop(p, EOS, generated=0, length_left=100).stop_ids == (1009, 1016, 5)


def test_ignore_eos_drops_eos_but_keeps_explicit_stop_ids() -> None:
    p = SamplingParams(max_tokens=10, ignore_eos=True, stop_token_ids=[1016, 7])
    assert row_stop(p, EOS, generated=0, length_left=100).stop_ids == (1016, 7)
    assert row_stop(SamplingParams(ignore_eos=True), EOS, 0, 100).stop_ids == ()


@pytest.mark.parametrize("max_tokens,generated,length_left,budget", [
    (10, 3, 100, 7),  # max_tokens: the 7th token of the run is the request's 10th
    (10, 3, 4, 4),  # the context limit comes first
    (10, 0, 10, 10),  # both at once
    (5, 5, 100, 1),  # never below one token: a run always takes one
])
def test_budget_is_the_hosts_length_stop(max_tokens: int, generated: int, length_left: int, budget: int) -> None:
    rule = row_stop(SamplingParams(max_tokens=max_tokens, ignore_eos=True), EOS, generated, length_left)
    assert rule.budget == budget
    assert [rule.stops_at(n, 3) for n in range(1, budget + 1)] == [False] * (budget - 1) + [True]


def test_min_tokens_holds_back_stop_ids_not_the_budget() -> None:
    p = SamplingParams(max_tokens=20, stop_token_ids=[7])
    rule = row_stop(p, EOS, generated=2, length_left=100, min_tokens=5)
    assert rule.min_count == 3  # the request's 5th token is the run's 3rd
    assert not rule.stops_at(1, 1009) and not rule.stops_at(2, 7)
    assert rule.stops_at(3, 7) and rule.stops_at(4, 1016) and not rule.stops_at(4, 8)
    tight = row_stop(SamplingParams(max_tokens=4, stop_token_ids=[7]), EOS, 2, 100, min_tokens=10)
    assert tight.stops_at(2, 8)  # the length stop ignores min_tokens
    assert row_stop(p, EOS, generated=9, length_left=100, min_tokens=5).stops_at(1, 7)  # already past it


def test_every_value_fits_an_int32_word() -> None:
    p = SamplingParams(max_tokens=10**12, stop_token_ids=[2**40, 9])
    rule = row_stop(p, EOS, generated=0, length_left=10**12, min_tokens=10**12)
    assert rule.stop_ids == (*EOS, 9) and rule.budget == rs.INT32_MAX and rule.min_count == rs.INT32_MAX
    assert all(-2**31 <= w < 2**31 for w in RunStops((rule,)).words())


def test_words_pad_every_row_to_the_longest() -> None:
    stops = RunStops((RowStop((), 3, 0), RowStop((4,), 5, 2), RowStop((9, 8, 7), 1, -4)))
    k = 3
    assert stops.ids_per_row == k
    w = stops.words()
    assert w[:rs.RS_HEADER_WORDS] == [RS_NOT_STOPPED, 3, 3, k]
    records = [w[rs.RS_HEADER_WORDS + i * (rs.RS_ROW_WORDS + k):][:rs.RS_ROW_WORDS + k] for i in range(3)]
    assert len(w) == rs.RS_HEADER_WORDS + 3 * (rs.RS_ROW_WORDS + k)
    assert records[0] == [0, 0, 3, 0, PAD_ID, PAD_ID, PAD_ID]
    assert records[1] == [0, 0, 5, 2, 4, PAD_ID, PAD_ID]
    assert records[2] == [0, 0, 1, -4, 9, 8, 7]


def test_a_run_without_stop_ids_still_has_one_word_per_row() -> None:
    stops = run_stops([SamplingParams(ignore_eos=True)] * 2, EOS, [0, 0], [100, 100])
    assert stops.ids_per_row == 1
    assert stops.words()[rs.RS_HEADER_WORDS + rs.RS_ROW_WORDS] == PAD_ID


def test_run_stops_checks_its_lengths() -> None:
    with pytest.raises(ValueError, match="2 params"):
        run_stops([SamplingParams()] * 2, EOS, [0], [10, 10])


def test_stopped_at_is_the_step_of_the_last_rows_stop() -> None:
    stops = RunStops((RowStop((5,), 100, 0), RowStop((), 3, 0)))
    steps = [[1, 1], [5, 1], [5, 1], [2, 2]]  # row 0 stops at step 1 (id 5), row 1 at step 2 (budget 3)
    assert stops.stopped_at(steps) == 2
    assert stops.stopped_at(steps[:2]) is None
    # a row that stopped is not checked again: a later stop id of it changes nothing
    assert RunStops((RowStop((5,), 100, 0),)).stopped_at([[5], [5]]) == 0


def test_worked_end_drops_the_steps_after_the_runs_stop() -> None:
    assert worked_end(8, RS_NOT_STOPPED) == 8
    assert worked_end(8, 5) == 6
    assert worked_end(8, 2) == 3  # a chunk [4, 8) then holds no step that worked


def _cuda_constants(path: Path) -> dict[str, int]:
    return {m.group(1): int(m.group(2), 0)
            for m in re.finditer(r"inline constexpr int (RS_\w+) = (0x[0-9a-fA-F]+|-?\d+);", path.read_text())}


def test_layout_is_the_kernels() -> None:
    """The Python mirror of run_stop.cuh's words: a mismatch would only show on a GPU, as wrong stops."""
    cuda = _cuda_constants(ROOT / "csrc" / "interpreter" / "run_stop.cuh")
    assert len(cuda) >= 11
    assert {name: getattr(rs, name) for name in cuda} == cuda


def test_the_launch_reads_the_run_fields() -> None:
    """interpreter.cu copies the run's fields into Globals (the device stream passes num_counters on every launch)."""
    src = (ROOT / "csrc" / "interpreter" / "interpreter.cu").read_text()
    assert "MK_INT(num_counters)" in src
    assert 'ptr_field<int>(d, "run_stop", /*optional=*/true)' in src and 'scalar_field<int>(d, "run_step")' in src
    assert "num_counters=" in (ROOT / "engine" / "cuda" / "device_stream.py").read_text()
