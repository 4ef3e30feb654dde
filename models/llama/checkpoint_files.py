"""The safetensors files of a checkpoint and their headers, read without touching any tensor data.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`) and then the data,
which the offsets index (relative to the end of the header) without holes. Reading only the headers
lets a bad checkpoint (truncated copy, garbled header, wrong shard) fail in milliseconds with one line
naming the file and the tensor, before any weight is loaded or a server port is bound.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# safetensors' own cap on the header size; a larger length field means a corrupt or foreign file.
MAX_HEADER_BYTES = 100_000_000
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}


class WeightLoadError(ValueError):
    """A checkpoint file or tensor is missing, corrupt, unexpected or mis-shaped; names tensor and file."""


@dataclass(frozen=True)
class TensorHeader:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # data_offsets, relative to the first byte after the header
    end: int


def _entry(path: Path, name: str, raw: Any) -> TensorHeader:
    if not isinstance(raw, dict):
        raise WeightLoadError(f"{path}: header entry of tensor {name!r} is not a JSON object")
    dtype, shape, offsets = raw.get("dtype"), raw.get("shape"), raw.get("data_offsets")
    if not isinstance(dtype, str):
        raise WeightLoadError(f"{path}: tensor {name!r}: header has no dtype string (got {dtype!r})")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise WeightLoadError(f"{path}: tensor {name!r}: header shape {shape!r} is not a list of sizes")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise WeightLoadError(f"{path}: tensor {name!r}: header data_offsets {offsets!r} are not [begin, end]")
    return TensorHeader(dtype, tuple(shape), offsets[0], offsets[1])


def _check_layout(path: Path, tensors: dict[str, TensorHeader], data_bytes: int) -> None:
    """Every tensor's bytes lie inside the file, match its dtype and shape, and the data has no holes."""
    for name, t in tensors.items():
        if t.end > data_bytes:
            raise WeightLoadError(f"{path}: truncated: tensor {name!r} ends at data byte {t.end} but the file "
                                  f"holds only {data_bytes} data bytes")
        if t.dtype in DTYPE_BYTES:
            need = math.prod(t.shape) * DTYPE_BYTES[t.dtype]
            if t.end - t.begin != need:
                raise WeightLoadError(f"{path}: tensor {name!r}: {t.dtype} {list(t.shape)} needs {need} bytes but "
                                      f"its data_offsets span {t.end - t.begin}")
    covered = 0
    for name, t in sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end)):
        if t.begin != covered:
            raise WeightLoadError(f"{path}: tensor {name!r} starts at data byte {t.begin}, expected {covered} "
                                  "(overlapping or gapped data_offsets)")
        covered = t.end
    if covered != data_bytes:
        raise WeightLoadError(f"{path}: {data_bytes - covered} bytes after the last tensor's data "
                              "(not a complete safetensors file)")


def read_header(path: Path) -> dict[str, TensorHeader]:
    """Tensor name -> header entry of one safetensors file; checks the file is complete and consistent."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise WeightLoadError(f"{path}: not a safetensors file ({size} bytes, too short for a header)")
            length = int.from_bytes(prefix, "little")
            if length > min(MAX_HEADER_BYTES, size - 8):
                raise WeightLoadError(f"{path}: bad header length {length} (the file has {size} bytes): "
                                      "truncated or not a safetensors file")
            raw = f.read(length)
    except OSError as e:
        raise WeightLoadError(f"{path}: cannot read ({e.strerror or e})") from e
    try:
        header = json.loads(raw)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise WeightLoadError(f"{path}: header is not valid JSON ({e})") from e
    if not isinstance(header, dict):
        raise WeightLoadError(f"{path}: header is not a JSON object")
    tensors = {name: _entry(path, name, entry) for name, entry in header.items() if name != "__metadata__"}
    _check_layout(path, tensors, size - 8 - length)
    return tensors


def _index_map(index: Path) -> dict[str, Path]:
    try:
        weight_map = json.loads(index.read_bytes())["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise WeightLoadError(f"{index}: not a valid safetensors index ({type(e).__name__}: {e})") from e
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise WeightLoadError(f"{index}: weight_map must map tensor names to shard file names")
    return {name: index.parent / fname for name, fname in weight_map.items()}


def checkpoint_headers(model_dir: Path) -> dict[str, tuple[Path, TensorHeader]]:
    """Tensor name -> (file, header entry) for a single-file or sharded checkpoint, headers only."""
    index, single = model_dir / INDEX_FILE, model_dir / SINGLE_FILE
    if index.is_file():
        files = _index_map(index)
        headers: dict[Path, dict[str, TensorHeader]] = {}
        out = {}
        for name, path in files.items():
            if path not in headers:
                if not path.is_file():
                    raise WeightLoadError(f"shard {path} (holding tensor {name!r}, listed in {index}) does not exist")
                headers[path] = read_header(path)
            if name not in headers[path]:
                raise WeightLoadError(f"tensor {name!r}: {index} places it in {path}, whose header lacks it")
            out[name] = (path, headers[path][name])
        return out
    if single.is_file():
        return {name: (single, entry) for name, entry in read_header(single).items()}
    raise WeightLoadError(f"no weights in {model_dir}: neither {SINGLE_FILE} nor {INDEX_FILE} exists")
