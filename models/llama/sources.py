"""Where a model comes from: a checkpoint directory, a Hugging Face Hub id, or a GGUF file.

`resolve_model` turns what the user named into a local checkpoint directory:
- a directory: itself;
- a `.gguf` file: converted once into `cache/gguf/<name>-<hash>` (models/llama/gguf_checkpoint.py);
- `org/name` that is not a local path: `huggingface_hub.snapshot_download` of the files a checkpoint needs
  (config, safetensors, tokenizer, chat template), honouring HF_HOME, HF_HUB_OFFLINE and HF_TOKEN; `revision`
  picks a branch, tag or commit.
Every failure is a `ModelSourceError` of one line naming what was asked for.
"""
from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from models.llama.gguf_checkpoint import GGUFConversionError, convert_gguf

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# What a checkpoint directory needs; weights in other formats (.bin, .pt, .gguf) are never downloaded.
HUB_PATTERNS = ("*.json", "*.safetensors", "tokenizer*", "*.jinja", "*.txt")


class ModelSourceError(FileNotFoundError):
    """The model named cannot be found, fetched or converted."""


def resolve_model(model: str, cache: Path, revision: str | None = None) -> Path:
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelSourceError(f"GGUF file not found: {path}")
        return _converted_gguf(path, cache / "gguf")
    if HUB_ID.match(model) and not path.exists():
        return _hub_snapshot(model, revision)
    raise ModelSourceError(f"model not found: {model!r} is neither a checkpoint directory, a .gguf file nor a "
                           f"Hugging Face Hub id (org/name)")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_gguf_into(path: Path, out: Path) -> Path:
    """`convert_gguf` into `out` through a staging directory, so a checkpoint appears whole or not at all."""
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    print(f"converting {path.name} to a bf16 checkpoint in {out} (once)", flush=True)
    convert_gguf(path, staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def _converted_gguf(path: Path, cache: Path) -> Path:
    out = cache / f"{path.stem}-{sha256_of(path)[:12]}"
    if (out / "config.json").is_file():
        return out
    try:
        return convert_gguf_into(path, out)
    except GGUFConversionError as exc:
        raise ModelSourceError(str(exc)) from None


def _hub_snapshot(repo_id: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                            RevisionNotFoundError)
    except ImportError:
        raise ModelSourceError(f"{repo_id}: Hub ids need the Python package 'huggingface_hub'") from None
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=list(HUB_PATTERNS)))
    except GatedRepoError:
        raise ModelSourceError(f"{repo_id}: a gated repository: accept its license on huggingface.co and set "
                               f"HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"{repo_id}: no such repository on the Hub (or it is private: set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"{repo_id}: no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        raise ModelSourceError(f"{repo_id}: not in the local Hub cache and the Hub cannot be reached "
                               f"(HF_HUB_OFFLINE or no network)") from None
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{repo_id}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
