"""ProfileRecord: the one format every profile source (VM, cost model, CUDA timing tensor) hands the
profiler, plus its raw.npz serialisation.

Times are raw int64 nanoseconds (on the GPU: `%globaltimer`, which is shared by all SMs); the host
normalises them to the first start only when rendering, so launch skew between SMs stays visible.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

MetaValue = Union[str, int, float]

NPZ_FORMAT = "megakernel-profile"
NPZ_VERSION = 1
_ARRAYS = ("words", "sm", "start_ns", "end_ns", "wait_ns", "bytes_moved")
# Where a record's instruction words keep what the profiler reads of them: the instruction format's first words
# (docs/INSTRUCTIONS.md; tests/profiler/test_profile_record.py checks them against engine/instructions/format.py).
W_OPCODE, W_ID, W_LAYER = 0, 1, 2
# The dependency words (profiler/deps.py): the number of waits, MAX_WAITS (counter, target) pairs, the signal.
W_NUM_WAITS, W_WAITS, W_SIGNAL, W_SIGNAL_AMOUNT, MAX_WAITS = 16, 17, 27, 28, 5
RAW_NAME = "raw.npz"
# What a damaged or foreign file raises inside numpy / zipfile; each becomes one ProfileFormatError naming the file.
_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


class ProfileFormatError(ValueError):
    """A ProfileRecord field or a raw.npz file is malformed."""


def _as_int_array(name: str, value: object, dtype: type, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != ndim:
        raise ProfileFormatError(f"ProfileRecord.{name}: expected {ndim}-D array, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ProfileFormatError(f"ProfileRecord.{name}: expected an integer array, got dtype {arr.dtype}")
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ProfileFormatError(f"ProfileRecord.{name}: values do not fit in {np.dtype(dtype).name}")
    return np.ascontiguousarray(arr, dtype=dtype)


@dataclass(frozen=True)
class ProfileRecord:
    """Per-instruction timing of one profiled run; row i of every array describes instruction i.

    words:        int32 [N, W] instruction words: opcode, instruction id (topological order), layer, ...
    sm:           int32 [N] SM (or VM worker) that executed the instruction.
    start_ns:     int64 [N] raw start time; end_ns: int64 [N] raw end time (end >= start).
    wait_ns:      int64 [N] time spent waiting on dependencies before start (0 if unknown).
    opcode_names: opcode -> name; every opcode in words[:, 0] must be named.
    simulated:    True for VM / cost-model timelines; every rendering labels them "simulated".
    bytes_moved:  int64 [N] HBM bytes read + written (0 if unknown); None means all unknown.
    meta:         free-form run description (model, backend, batch, steps, policy, num_sms, gpu...).
    operand_names: opcode -> names of words 1..k, used to decode args for tooltips and traces.
    marks_ns:     int64 [N, M] raw sub-phase timestamps inside each instruction (GPU timing records,
                  csrc/interpreter/marks.cuh; 0 = not reached), except column MARK_LAST_PAGE_CYCLES, a
                  cycle count (profiler/marks.py); None when the source has none.
    opcode_kinds: opcode -> (word index of its kind operand, kind value -> name) for opcodes whose instructions
                  do different work by kind (TILE_MATMUL's QKV, O, ...): the summaries, charts and traces show
                  each kind apart, as "NAME.KIND" (work_keys / work_names).
    """

    words: np.ndarray
    sm: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    wait_ns: np.ndarray
    opcode_names: dict[int, str]
    simulated: bool
    bytes_moved: np.ndarray | None = None
    meta: dict[str, MetaValue] = field(default_factory=dict)
    operand_names: dict[int, list[str]] = field(default_factory=dict)
    marks_ns: np.ndarray | None = None
    opcode_kinds: dict[int, tuple[int, dict[int, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Frozen dataclass: normalise dtypes through object.__setattr__ once, here.
        words = _as_int_array("words", self.words, np.int32, 2)
        n, width = words.shape
        if width < 1:
            raise ProfileFormatError("ProfileRecord.words: needs at least one word (the opcode) per row")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        set_("words", words)
        for name, dtype in (("sm", np.int32), ("start_ns", np.int64), ("end_ns", np.int64), ("wait_ns", np.int64)):
            set_(name, _as_int_array(name, getattr(self, name), dtype, 1))
        bytes_moved = np.zeros(n, np.int64) if self.bytes_moved is None else self.bytes_moved
        set_("bytes_moved", _as_int_array("bytes_moved", bytes_moved, np.int64, 1))
        for name in ("sm", "start_ns", "end_ns", "wait_ns", "bytes_moved"):
            if getattr(self, name).shape[0] != n:
                raise ProfileFormatError(
                    f"ProfileRecord.{name}: length {getattr(self, name).shape[0]} != words rows {n}"
                )
        if n and (self.end_ns < self.start_ns).any():
            i = int(np.argmax(self.end_ns < self.start_ns))
            raise ProfileFormatError(
                f"ProfileRecord.end_ns: instruction {i} ends ({self.end_ns[i]}) before it starts ({self.start_ns[i]})"
            )
        for name in ("sm", "wait_ns", "bytes_moved"):
            arr = getattr(self, name)
            if n and arr.min() < 0:
                raise ProfileFormatError(f"ProfileRecord.{name}: negative value at instruction {int(np.argmin(arr))}")
        set_("opcode_names", {int(k): str(v) for k, v in self.opcode_names.items()})
        missing = sorted(set(np.unique(words[:, W_OPCODE]).tolist()) - set(self.opcode_names)) if n else []
        if missing:
            raise ProfileFormatError(f"ProfileRecord.opcode_names: no name for opcode(s) {missing}")
        operands = {int(k): [str(s) for s in v] for k, v in self.operand_names.items()}
        for op, names in operands.items():
            if len(names) > width - 1:
                raise ProfileFormatError(
                    f"ProfileRecord.operand_names[{op}]: {len(names)} names but only {width - 1} operand words"
                )
        set_("operand_names", operands)
        kinds = {int(op): (int(word), {int(v): str(name) for v, name in names.items()})
                 for op, (word, names) in self.opcode_kinds.items()}
        for op, (word, _) in kinds.items():
            if not 0 < word < width:
                raise ProfileFormatError(f"ProfileRecord.opcode_kinds[{op}]: word {word} outside the {width} words")
        set_("opcode_kinds", kinds)
        keys = words[:, W_OPCODE].astype(np.int64)
        names = dict(self.opcode_names)
        for op, (word, kind_names) in kinds.items():
            sel = words[:, W_OPCODE] == op
            values = words[sel, word].astype(np.int64)
            keys[sel] = work_key(op, values)
            for v in np.unique(values).tolist():
                names[int(work_key(op, v))] = f"{self.opcode_names.get(op, op)}.{kind_names.get(v, v)}"
        set_("_work_keys", keys)
        set_("_work_names", names)
        for k, v in self.meta.items():
            if not isinstance(k, str) or not isinstance(v, (str, int, float)):
                raise ProfileFormatError(f"ProfileRecord.meta[{k!r}]: keys must be str, values str/int/float")
        set_("meta", dict(self.meta))
        set_("simulated", bool(self.simulated))
        if self.marks_ns is not None:
            marks = _as_int_array("marks_ns", self.marks_ns, np.int64, 2)
            if marks.shape[0] != n:
                raise ProfileFormatError(f"ProfileRecord.marks_ns: {marks.shape[0]} rows != words rows {n}")
            set_("marks_ns", marks)

    @property
    def num_instructions(self) -> int:
        return int(self.words.shape[0])

    @property
    def opcodes(self) -> np.ndarray:
        return self.words[:, W_OPCODE]

    @property
    def work_keys(self) -> np.ndarray:
        """int64 [N]: each instruction's opcode, or for an opcode of `opcode_kinds` its (opcode, kind) key."""
        return self._work_keys  # type: ignore[attr-defined, no-any-return]

    @property
    def work_names(self) -> dict[int, str]:
        """work key -> name: the opcode's, "NAME.KIND" for a kind."""
        return self._work_names  # type: ignore[attr-defined, no-any-return]


def work_key(opcode: int, kind: int | np.ndarray) -> int | np.ndarray:
    """The key of an instruction of `opcode` and `kind` (past every opcode number: opcodes stay below 32)."""
    return KIND_KEY_BASE * (opcode + 1) + kind


def opcode_of_key(key: int) -> int:
    return key if key < KIND_KEY_BASE else key // KIND_KEY_BASE - 1


KIND_KEY_BASE = 1024  # kinds take values below it


def concat_records(records: list[ProfileRecord]) -> ProfileRecord:
    """Several steps' records as one (names, meta and `simulated` from the first)."""
    if not records:
        raise ProfileFormatError("concat_records: no records")
    if len(records) == 1:
        return records[0]
    first = records[0]
    cat = lambda name: np.concatenate([getattr(r, name) for r in records])  # noqa: E731
    marks = cat("marks_ns") if all(r.marks_ns is not None for r in records) else None
    return ProfileRecord(words=cat("words"), sm=cat("sm"), start_ns=cat("start_ns"), end_ns=cat("end_ns"),
                         wait_ns=cat("wait_ns"), opcode_names=first.opcode_names, opcode_kinds=first.opcode_kinds,
                         simulated=first.simulated,
                         bytes_moved=cat("bytes_moved"), meta=first.meta, operand_names=first.operand_names,
                         marks_ns=marks)


def save_npz(record: ProfileRecord, path: str | Path) -> Path:
    """Write `record` to `path` (raw.npz): the int arrays as-is plus one JSON header string."""
    path = Path(path)
    header = {
        "format": NPZ_FORMAT,
        "version": NPZ_VERSION,
        "simulated": record.simulated,
        "opcode_names": {str(k): v for k, v in record.opcode_names.items()},
        "operand_names": {str(k): v for k, v in record.operand_names.items()},
        "opcode_kinds": {str(k): [w, {str(v): n for v, n in names.items()}]
                         for k, (w, names) in record.opcode_kinds.items()},
        "meta": record.meta,
    }
    arrays = {name: getattr(record, name) for name in _ARRAYS}
    if record.marks_ns is not None:
        arrays["marks_ns"] = record.marks_ns
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # a file object stops numpy from appending ".npz" to odd names
        np.savez_compressed(f, header=np.array(json.dumps(header)), **arrays)
    return path


def raw_path(path: str | Path) -> Path:
    """A profile given as its output directory or as the raw.npz itself -> the raw.npz file."""
    path = Path(path)
    if path.is_dir():
        if not (path / RAW_NAME).is_file():
            raise ProfileFormatError(f"{path}: directory has no {RAW_NAME} (a profile's output directory holds one)")
        return path / RAW_NAME
    if not path.exists():
        raise ProfileFormatError(f"{path}: no such profile file or directory")
    return path


def load_npz(path: str | Path) -> ProfileRecord:
    """Read a raw.npz written by save_npz (or the directory holding it); errors name the file and the problem."""
    path = raw_path(path)
    if not zipfile.is_zipfile(path):
        raise ProfileFormatError(f"{path}: not a profile recording (not an .npz file, or a truncated one)")
    try:
        with np.load(path, allow_pickle=False) as data:
            contents = {k: data[k] for k in data.files}
    except _READ_ERRORS as e:
        raise ProfileFormatError(f"{path}: damaged or foreign .npz file ({type(e).__name__}: {e})") from e
    for key in ("header", *_ARRAYS):
        if key not in contents:
            raise ProfileFormatError(f"{path}: missing field {key!r}")
    try:
        header = json.loads(str(contents["header"]))
    except json.JSONDecodeError as e:
        raise ProfileFormatError(f"{path}: field 'header' is not valid JSON ({e})") from e
    if not isinstance(header, dict):
        raise ProfileFormatError(f"{path}: field 'header' is not a JSON object")
    if header.get("format") != NPZ_FORMAT or header.get("version") != NPZ_VERSION:
        raise ProfileFormatError(
            f"{path}: header format/version {header.get('format')}/{header.get('version')} "
            f"is not {NPZ_FORMAT}/{NPZ_VERSION}"
        )
    try:
        return ProfileRecord(
            **{name: contents[name] for name in _ARRAYS},
            opcode_names={int(k): v for k, v in header["opcode_names"].items()},
            simulated=header["simulated"],
            meta=header.get("meta", {}),
            operand_names={int(k): v for k, v in header.get("operand_names", {}).items()},
            marks_ns=contents.get("marks_ns"),
            opcode_kinds={int(k): (int(w), {int(v): n for v, n in names.items()})
                          for k, (w, names) in header.get("opcode_kinds", {}).items()},
        )
    except KeyError as e:
        raise ProfileFormatError(f"{path}: header is missing {e}") from e
    except ProfileFormatError as e:
        raise ProfileFormatError(f"{path}: {e}") from e
    except (AttributeError, TypeError, ValueError) as e:  # header fields of the wrong JSON type
        raise ProfileFormatError(f"{path}: malformed header ({e})") from e
