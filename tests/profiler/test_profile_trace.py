from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
from synthetic_profiles import make_record

from profiler.spans import to_spans
from profiler.trace import to_trace, validate_trace, write_trace


def test_trace_is_valid_and_complete(tmp_path, rng):
    rec = make_record(rng, n=600, num_sms=5)
    sp = to_spans(rec)
    trace = json.loads(write_trace(sp, tmp_path / "trace.json").read_text())
    assert validate_trace(trace) == []
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == rec.num_instructions
    assert {e["name"] for e in slices} <= set(rec.opcode_names.values())
    by_instr = {e["args"]["instr"]: e for e in slices}
    i = int(rng.integers(rec.num_instructions))
    ev = by_instr[i]
    assert ev["name"] == rec.opcode_names[int(rec.words[i, 0])]
    assert abs(ev["ts"] - (rec.start_ns[i] - rec.start_ns.min()) / 1e3) < 1e-6
    assert abs(ev["dur"] - (rec.end_ns[i] - rec.start_ns[i]) / 1e3) < 1e-6
    assert ev["args"]["layer"] == rec.words[i, 1] and ev["args"]["wait_ns"] == rec.wait_ns[i]
    assert ev["args"]["bytes"] == rec.bytes_moved[i] and ev["args"]["sm"] == rec.sm[i]
    meta = [e for e in events if e["ph"] == "M"]
    proc = [e for e in meta if e["name"] == "process_name"]
    assert len(proc) == 1 and "simulated" in proc[0]["args"]["name"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert len(names) == sp.num_rows and names[1] == f"SM {int(sp.row_sm[0]):03d}"
    assert len({e["tid"] for e in meta if e["name"] == "thread_sort_index"}) == sp.num_rows


def test_measured_trace_not_labelled_simulated(rng):
    rec = make_record(rng, n=50, simulated=False)
    trace = to_trace(to_spans(rec))
    assert "simulated" not in json.dumps([e for e in trace["traceEvents"] if e["ph"] == "M"])


def test_validator_rejects_bad_traces(rng):
    good = to_trace(to_spans(make_record(rng, n=40)))
    assert validate_trace(good) == []
    assert validate_trace({"events": []})
    x = next(e for e in good["traceEvents"] if e["ph"] == "X")
    for key in ("dur", "ts", "tid", "name"):
        broken = {**x}
        del broken[key]
        assert validate_trace([broken]), key
    assert validate_trace([{**x, "dur": -1.0}])
    assert validate_trace([{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {}}])
    a = {**x, "ts": 0.0, "dur": 10.0}
    assert validate_trace([a, {**a, "ts": 5.0}])  # partial overlap on one track
    assert validate_trace([a, {**a, "ts": 2.0, "dur": 3.0}]) == []  # nesting is allowed
    assert validate_trace([a, {**a, "ts": 10.0}]) == []  # touching is allowed


def test_empty_operands_trace_roundtrip(rng):
    rec = make_record(rng, n=30)
    rec = replace(rec, operand_names={})
    trace = to_trace(to_spans(rec))
    assert validate_trace(trace) == []
    ev = next(e for e in trace["traceEvents"] if e["ph"] == "X")
    assert "w1" in ev["args"] or np.all(rec.words[ev["args"]["instr"], 1:] == 0)


def test_dependencies_become_flow_events(rng):
    from synthetic_profiles import make_chain_record

    from profiler.deps import dependencies

    rec = make_chain_record(rng, layers=3, steps=2)
    sp = to_spans(rec)
    trace = to_trace(sp)
    assert validate_trace(trace) == []
    events = trace["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    producer, consumer = dependencies(rec).critical_edges()
    assert len(starts) == len(finishes) == producer.size > 0
    assert all(e["bp"] == "e" and e["cat"] == "dependency" for e in finishes.values())
    slices = [e for e in events if e["ph"] == "X"]
    # Each flow end binds to the slice of its instruction: same track, inside its time.
    on = lambda ev: [x["args"]["instr"] for x in slices  # noqa: E731
                     if x["tid"] == ev["tid"] and x["ts"] <= ev["ts"] <= x["ts"] + x["dur"]]
    pairs = {(on(starts[k])[0], on(finishes[k])[0]) for k in starts}
    assert pairs == set(zip(producer.tolist(), consumer.tolist()))


def test_validator_wants_both_ends_of_a_flow(rng):
    trace = to_trace(to_spans(make_record(rng, n=20)))
    flow = {"name": "dependency", "cat": "dependency", "id": 7, "pid": 1, "tid": 1, "ts": 0.0}
    assert validate_trace({"traceEvents": trace["traceEvents"] + [{**flow, "ph": "s"}]})
    assert validate_trace({"traceEvents": trace["traceEvents"] + [{**flow, "ph": "s"},
                                                                   {**flow, "ph": "f", "bp": "e"}]}) == []
