"""Tokenizer loading (local files only, never the hub) and chat-template rendering to token ids."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer stored in `model_dir` (tokenizer.json / tokenizer_config.json)."""
    directory = Path(model_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    if not (directory / "tokenizer.json").is_file() and not (directory / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"no tokenizer files (tokenizer.json / tokenizer_config.json) in {directory}")
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"could not load the tokenizer from {directory}: {e}") from e


def apply_chat_template(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]]) -> list[int]:
    """Render `messages` with the tokenizer's chat template plus the assistant generation prompt.

    Rendered to text first and then encoded without adding specials: the template already emits
    <|begin_of_text|>, and letting the tokenizer add one too would double it.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat_template (tokenizer_config.json lacks one)")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if not isinstance(text, str):
        raise TypeError(f"chat template rendered to {type(text).__name__}, expected str")
    return list(tokenizer.encode(text, add_special_tokens=False))
