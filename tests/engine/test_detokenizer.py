"""Incremental detokenization across multi-byte characters and stop-string helpers."""
from __future__ import annotations

from engine.detokenizer import IncrementalDetokenizer, find_stop, ids_decoder, visible_text
from models.llama.tokenizer import load_tokenizer


def test_incremental_equals_full_decode_with_multibyte(tiny_checkpoint: str) -> None:
    tok = load_tokenizer(tiny_checkpoint)
    text = "naïve café — 東京 🙂 done"
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, tok.encode("prompt"), skip_special_tokens=True)
    deltas = [detok.add(t) for t in ids]
    assert "".join(deltas) == tok.decode(ids) == text
    assert all("\ufffd" not in d for d in deltas)


def test_find_stop_and_hold_back() -> None:
    assert find_stop("hello world", 3, ("wor",)) == (6, "wor")
    assert find_stop("hello world", 1, ("hello",)) is None  # ended before this delta
    assert find_stop("abcSTOPxSTOP", 5, ("STOP", "x")) == (7, "x")
    assert visible_text("abcdef", ("xyz",), finished=False) == "abcd"
    assert visible_text("abcdef", ("xyz",), finished=True) == "abcdef"


def test_hold_back_never_goes_negative_and_never_shrinks() -> None:
    # A text shorter than the hold-back shows nothing yet (a negative slice bound showed a prefix,
    # then less, so a client streaming deltas repeated characters).
    stops = ("STOPSTOP",)
    shown = [visible_text("abcdefghij"[:n], stops, finished=False) for n in range(11)]
    assert shown[:8] == [""] * 8 and shown[8:] == ["a", "ab", "abc"]
    assert all(b.startswith(a) for a, b in zip(shown, shown[1:]))


def test_flush_emits_an_incomplete_character_at_the_end(tiny_checkpoint: str) -> None:
    tok = load_tokenizer(tiny_checkpoint)
    ids = tok.encode("ab 東", add_special_tokens=False)
    # Find a prefix of the ids that ends inside the 3-byte character.
    cut = next(k for k in range(1, len(ids) + 1) if tok.decode(ids[:k]).endswith("\ufffd"))
    detok = IncrementalDetokenizer(tok, [], skip_special_tokens=True)
    shown = "".join(detok.add(t) for t in ids[:cut])
    assert "\ufffd" not in shown
    tail = detok.flush()
    assert shown + tail == tok.decode(ids[:cut]) and tail.endswith("\ufffd")
    assert detok.flush() == ""


def test_the_fast_backend_decodes_as_the_tokenizer_does(tiny_checkpoint: str) -> None:
    """A fast tokenizer that cleans up no spaces decodes through its backend (ids_decoder), with the same text as
    its own decode; one that cleans up keeps its own decode."""
    tok = load_tokenizer(tiny_checkpoint)
    ids = tok.encode("Hello , world . It 's naïve — 東京 🙂 <unk>", add_special_tokens=False)
    assert ids_decoder(tok)(ids, True) == tok.decode(ids, skip_special_tokens=True)
    assert ids_decoder(tok)(ids, False) == tok.decode(ids, skip_special_tokens=False)

    class CleaningUp:
        backend_tokenizer = tok.backend_tokenizer
        clean_up_tokenization_spaces = True

        @staticmethod
        def decode(ids: list[int], skip_special_tokens: bool) -> str:
            return "own decode"

    assert ids_decoder(CleaningUp())(ids, True) == "own decode"
