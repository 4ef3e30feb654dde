"""Build a Llama-3-style byte-level BPE tokenizer offline, for random checkpoints.

The vocabulary has exactly `vocab_size` entries so every id a model can emit decodes: 256 byte
tokens, then deterministic merges generated programmatically (no training corpus, no network),
then a block of special tokens at the top of the vocabulary like Llama 3 (<|begin_of_text|> at
vocab_size - 256 for the 128256-entry vocab, i.e. 128000).
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOM = "<|eom_id|>"
EOT = "<|eot_id|>"

# Offsets inside the special block, as in Llama 3 (128000 + offset).
_NAMED_SPECIALS = {0: BOS, 1: EOS, 4: "<|finetune_right_pad_id|>", 6: START_HEADER, 7: END_HEADER,
                   8: EOM, 9: EOT, 10: "<|python_tag|>"}

# Llama-3-style chat format (written for this project): header per message, <|eot_id|> after each.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

# Letters in rough English frequency order so that the earliest (highest-priority) merges are common pairs.
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"


def num_special_tokens(vocab_size: int) -> int:
    """Size of the special block: 256 like Llama 3 for real vocabularies, 16 for tiny test ones."""
    return 256 if vocab_size > 4096 else 16


def special_token_ids(vocab_size: int) -> dict[str, int]:
    """Name -> id of every special token (named ones plus <|reserved_special_token_N|> fillers)."""
    n = num_special_tokens(vocab_size)
    base = vocab_size - n
    out: dict[str, int] = {}
    reserved = 0
    for off in range(n):
        name = _NAMED_SPECIALS.get(off)
        if name is None:
            name = f"<|reserved_special_token_{reserved}|>"
            reserved += 1
        out[name] = base + off
    return out


def llama3_eos_ids(vocab_size: int) -> tuple[int, ...]:
    ids = special_token_ids(vocab_size)
    return (ids[EOS], ids[EOM], ids[EOT])


def _gpt2_bytes_to_unicode() -> list[str]:
    """The GPT-2 byte-to-unicode table in byte order (byte b -> printable char), as ByteLevel uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars: list[str] = []
    extra = 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def _merges(count: int) -> list[tuple[str, str]]:
    """`count` deterministic merges, level by level: 2-char tokens, then 3-char, ... Each merge joins
    an existing token with one letter, so every merge's parts exist before it (valid BPE)."""
    space = _gpt2_bytes_to_unicode()[ord(" ")]  # "Ġ": the byte-level form of a leading space
    firsts = [space] + list(_LETTERS) + [c.upper() for c in _LETTERS]
    merges: list[tuple[str, str]] = []
    level = firsts
    while len(merges) < count:
        nxt: list[str] = []
        for tok in level:
            for c in _LETTERS:
                merges.append((tok, c))
                nxt.append(tok + c)
                if len(merges) == count:
                    return merges
        level = nxt
    return merges


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer with exactly `vocab_size` ids (Llama 3 special block on top)."""
    specials = special_token_ids(vocab_size)
    n_regular = vocab_size - len(specials)
    if n_regular < 256:
        raise ValueError(f"vocab_size {vocab_size} too small: need 256 byte tokens + {len(specials)} specials")
    vocab: dict[str, int] = {ch: i for i, ch in enumerate(_gpt2_bytes_to_unicode())}
    merges = _merges(n_regular - 256)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) == n_regular, (len(vocab), n_regular)
    vocab.update(specials)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # Specials already sit in the vocab at their ids; registering them keeps those ids.
    tok.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in specials])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, specials[BOS])]
    )
    return tok


def write_tokenizer(out_dir: str | Path, vocab_size: int, model_max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(vocab_size).save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": None,
        "add_bos_token": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "model_input_names": ["input_ids", "attention_mask"],
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": BOS, "eos_token": EOT}, indent=2))
