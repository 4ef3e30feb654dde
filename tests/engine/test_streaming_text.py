"""Streaming is exact: the deltas of successive visible texts add up to the final text, and the final
text equals a non-incremental decode of the same tokens cut at the first stop string."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.detokenizer import OutputText
from engine.sampling_params import SamplingParams
from models.llama.tokenizer import load_tokenizer

# Text with multi-byte characters: the byte-level tokenizer splits them across several tokens.
_ALPHABET = "ab c.\nxé東京🙂"


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint: str) -> Any:
    return load_tokenizer(tiny_checkpoint)


def _reference(tokenizer: Any, ids: list[int], stops: tuple[str, ...], include: bool, skip: bool) -> str:
    """Decode the whole prefix after every token (no windows, no hold-back); stop at the first prefix
    whose complete characters contain a stop string, cut at its earliest occurrence."""
    text = ""
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=skip)
        if text.endswith("\ufffd") and k < len(ids):
            continue  # an incomplete character: not shown yet, so not searched yet
        hits = [(text.find(s), i, s) for i, s in enumerate(stops) if s in text]
        if hits:
            start, _i, stop = min(hits)
            return text[: start + len(stop) if include else start]
    return text


def _stream(tokenizer: Any, prompt_ids: list[int], ids: list[int], params: SamplingParams) -> tuple[str, str]:
    """Drive OutputText exactly as the engine does; return (concatenated deltas, final text)."""
    out = OutputText(tokenizer, prompt_ids, params)
    shown, streamed = "", ""
    for k, token in enumerate(ids):
        if out.add(token) is None and k == len(ids) - 1:
            out.finish()  # ran out of tokens: the engine finishes by length
        visible = out.visible()
        assert visible.startswith(shown), (shown, visible)
        streamed += visible[len(shown):]
        shown = visible
        if out.finished:
            break
    return streamed, out.text


@st.composite
def _case(draw: st.DrawFn, tokenizer: Any) -> tuple[list[int], tuple[str, ...], bool, bool]:
    vocab = len(tokenizer)
    pieces = draw(st.lists(st.one_of(
        st.text(alphabet=_ALPHABET, min_size=1, max_size=6).map(
            lambda t: list(tokenizer.encode(t, add_special_tokens=False))),
        st.lists(st.integers(0, vocab - 1), min_size=1, max_size=3),  # any id: specials, stray bytes
    ), min_size=1, max_size=8))
    ids = [t for piece in pieces for t in piece]
    skip = draw(st.booleans())
    full = tokenizer.decode(ids, skip_special_tokens=skip)
    substring = st.integers(0, max(0, len(full) - 1)).flatmap(
        lambda i: st.integers(i + 1, max(i + 1, len(full))).map(lambda j: full[i:j]))
    stop = st.one_of(
        substring.filter(bool),
        st.text(alphabet=_ALPHABET, min_size=1, max_size=4),
        st.text(alphabet=_ALPHABET, min_size=8, max_size=12),  # long hold-backs
        st.just(full + "tail"),  # longer than the whole output
    )
    stops = tuple(draw(st.lists(stop, max_size=3)))
    return ids, stops, draw(st.booleans()), skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_streamed_deltas_equal_the_final_and_the_non_streamed_text(tokenizer: Any, data: st.DataObject) -> None:
    ids, stops, include, skip = data.draw(_case(tokenizer))
    params = SamplingParams(stop=stops, include_stop_str_in_output=include, skip_special_tokens=skip)
    prompt_ids = list(tokenizer.encode("A prompt: ", add_special_tokens=True))
    streamed, final = _stream(tokenizer, prompt_ids, ids, params)
    assert streamed == final
    assert final == _reference(tokenizer, ids, stops, include, skip)


def test_include_stop_str_keeps_the_stop_and_cuts_what_follows(tokenizer: Any) -> None:
    ids = list(tokenizer.encode("hello STOP world", add_special_tokens=False))
    for include, expected in ((False, "hello "), (True, "hello STOP")):
        params = SamplingParams(stop=["STOP"], include_stop_str_in_output=include)
        assert _stream(tokenizer, [], ids, params) == (expected, expected)


def test_a_stop_completed_by_the_final_flush_still_cuts(tokenizer: Any) -> None:
    # The last token leaves an incomplete character, so "b" is held back until the request ends.
    ids = list(tokenizer.encode("ab", add_special_tokens=False)) + [0xE6]
    streamed, final = _stream(tokenizer, [], ids, SamplingParams(stop=["b"]))
    assert streamed == final == "a"
