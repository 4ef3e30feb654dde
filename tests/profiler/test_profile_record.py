from __future__ import annotations

import numpy as np
import pytest

from profiler.record import ProfileFormatError, ProfileRecord, load_npz, save_npz
from synthetic_profiles import make_record


def test_npz_round_trip(tmp_path, rng):
    rec = make_record(rng, simulated=False)
    loaded = load_npz(save_npz(rec, tmp_path / "raw.npz"))
    for name in ("words", "sm", "start_ns", "end_ns", "wait_ns", "bytes_moved"):
        a, b = getattr(rec, name), getattr(loaded, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert loaded.start_ns.min() > 2**60  # raw 64-bit timestamps kept exactly
    assert loaded.opcode_names == rec.opcode_names and loaded.operand_names == rec.operand_names
    assert loaded.meta == rec.meta and loaded.simulated is False


def _kwargs(rec: ProfileRecord) -> dict:
    return dict(words=rec.words, sm=rec.sm, start_ns=rec.start_ns, end_ns=rec.end_ns, wait_ns=rec.wait_ns,
                opcode_names=rec.opcode_names, simulated=True)


@pytest.mark.parametrize("field,mutate,message", [
    ("sm", lambda a: a[:-1], "sm: length"),
    ("end_ns", lambda a: a - 10**6, "ends"),
    ("wait_ns", lambda a: -a - 1, "wait_ns: negative"),
    ("words", lambda a: a[:, 0], "words: expected 2-D"),
    ("start_ns", lambda a: a.astype(np.float64), "integer array"),
])
def test_validation_names_field(record, field, mutate, message):
    kw = _kwargs(record)
    kw[field] = mutate(kw[field])
    with pytest.raises(ProfileFormatError, match=message):
        ProfileRecord(**kw)


def test_unknown_opcode_rejected(record):
    kw = _kwargs(record)
    kw["opcode_names"] = {k: v for k, v in record.opcode_names.items() if k != int(record.words[0, 0])}
    with pytest.raises(ProfileFormatError, match="opcode_names"):
        ProfileRecord(**kw)


def test_bad_file_errors_name_the_file(tmp_path, record):
    bad = tmp_path / "junk.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ProfileFormatError, match="junk.npz"):
        load_npz(bad)
    partial = tmp_path / "partial.npz"
    np.savez(partial, words=record.words)
    with pytest.raises(ProfileFormatError, match="partial.npz: missing field 'header'"):
        load_npz(partial)


def test_word_positions_follow_the_instruction_format() -> None:
    """profiler/ imports nothing of the engine, so it names the words it reads itself; they must stay the
    instruction format's."""
    from engine.instructions import format as fmt
    from profiler import record

    assert (record.W_OPCODE, record.W_ID, record.W_LAYER) == (fmt.W_OPCODE, fmt.W_ID, fmt.W_LAYER)
    assert (record.W_NUM_WAITS, record.W_WAITS, record.W_SIGNAL, record.W_SIGNAL_AMOUNT, record.MAX_WAITS) == (
        fmt.W_NUM_WAITS, fmt.W_WAITS, fmt.W_SIGNAL, fmt.W_SIGNAL_AMOUNT, fmt.MAX_WAITS)
