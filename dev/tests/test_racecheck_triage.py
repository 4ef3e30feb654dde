"""dev/racecheck_triage.py: racecheck's report sorted into the interpreter's known handoffs (slot words, issued pages,
the low cap), any other hazard an error; on an excerpt in the report's own format (compute-sanitizer 2025, H200)."""
from __future__ import annotations

from pathlib import Path

from dev.racecheck_triage import kind, main, parse

KNOWN = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at mk::vm::run_controller(const mk::vm::Globals &, const mk::vm::Shared &)+0x7910 in roles.cuh:52
=========     and Read access at mk::vm::ends_queue(const int *)+0xe70 in noop.cuh:12 [3596 hazards]
=========     and Read access at mk::vm::TileOperands::TileOperands(const int *)+0x1a0 in tile_streams.cuh:95 [2056 hazards]
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cudaLaunchKernelExC [0x9e8ba] in mk_interpreter.cpython-312-x86_64-linux-gnu.so
=========
========= Error: Race reported between Read access at mk::vm::low_cap(const mk::vm::Shared &, int)+0x50 in state.cuh:263
=========     and Write access at mk::vm::set_low_cap_from(const mk::vm::Shared &, unsigned int)+0x40 in state.cuh:259 [1472 hazards]
========= Error: Race reported between Write access at mk::vm::derive_kv_stream(const mk::vm::Globals &, int *)+0x10 in kv_stream.cuh:22
=========     and Read access at bool mk::vm::attn_partial<(int)2, (bool)0>(const mk::vm::Globals &, const mk::vm::Shared &, const int *)+0x20 in attn_partial.cuh:40 [112 hazards]
========= Error: Race reported between Write access at mk::tk::store_release_shared(unsigned int *, unsigned int)+0x46a0 in atomics.cuh:28
=========     and Read access at mk::tk::load_acquire_shared(const unsigned int *)+0x30 in atomics.cuh:33 [124 hazards]
=========     and Read access at mk::vm::RingWalk::RingWalk(const mk::vm::Shared &, int)+0x80 in state.cuh:276 [56 hazards]
========= RACECHECK SUMMARY: 5 hazards displayed (5 errors, 0 warnings)
"""
UNKNOWN = """\
========= Error: Race reported between Write access at mk::vm::fold_pass<(int)2>(float *, unsigned int, int, float, unsigned int, unsigned int, int)+0x300 in attention_pass.cuh:80
=========     and Read access at mk::vm::merge_warp_states(const float *, int, int, int)+0x90 in attention_math.cuh:158 [32 hazards]
"""


def test_known_handoffs_are_sorted_and_pass(tmp_path: Path) -> None:
    hazards = parse(KNOWN)
    assert [h.count for h in hazards] == [3596, 2056, 1472, 112, 124, 56]
    assert {kind(h) for h in hazards} == {"slot words (slot_full / slot_free mbarriers)",
                                          "the low cap (a volatile hint)",
                                          "issued pages (ring_issued release / acquire)"}
    report = tmp_path / "racecheck.txt"
    report.write_text(KNOWN)
    assert main([str(report)]) == 0


def test_a_hazard_on_an_ops_own_buffers_fails(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    report = tmp_path / "racecheck.txt"
    report.write_text(KNOWN + UNKNOWN)
    assert main([str(report)]) == 1
    assert "fold_pass" in capsys.readouterr().out
    assert kind(parse(UNKNOWN)[0]) is None
