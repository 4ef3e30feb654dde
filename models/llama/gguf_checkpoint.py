"""A Llama-architecture GGUF file (what llama.cpp users have) → a Hugging Face checkpoint directory in bf16.

transformers reads the GGUF (tensors dequantised by the `gguf` package, the tokenizer and chat template from
the file's metadata); the weights are then written as plain safetensors with a config that no longer names
the GGUF quantisation, so every reader (this engine, transformers) loads the directory as an ordinary
checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path

NEEDED = ("transformers", "gguf", "accelerate")  # accelerate: transformers' GGUF loader requires it


class GGUFConversionError(RuntimeError):
    """The GGUF file cannot be turned into a checkpoint (one line naming the file and the cause)."""


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Write the checkpoint of `gguf_path` into out_dir (created) and return it."""
    for module in NEEDED:
        try:
            __import__(module)
        except ImportError:
            raise GGUFConversionError(f"{gguf_path}: reading GGUF needs the Python package {module!r} "
                                      f"(pip install {module})") from None
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                     torch_dtype=torch.bfloat16)
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for a file it cannot read
        raise GGUFConversionError(f"{gguf_path}: not a GGUF checkpoint this engine reads: "
                                  f"{type(exc).__name__}: {exc}") from exc
    if model.config.model_type != "llama":
        raise GGUFConversionError(f"{gguf_path}: architecture {model.config.model_type!r}, expected 'llama'")
    out_dir.mkdir(parents=True, exist_ok=True)
    tied = bool(model.config.tie_word_embeddings)
    tensors = {name: t.detach().contiguous() for name, t in model.state_dict().items()
               if not (tied and name == "lm_head.weight")}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the weights written are plain bf16
    config["torch_dtype"] = "bfloat16"
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, default=str))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir
