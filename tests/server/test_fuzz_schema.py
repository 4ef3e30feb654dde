"""Schema fuzzing: schemathesis reads the server's own openapi.json and generates requests for the
generation and tokenizer endpoints, both valid for the schema and deliberately invalid (wrong types,
missing fields, bodies that are not JSON). Every reply must be a 2xx or an OpenAI-shaped 4xx, never a
5xx, and after each one the server must be healthy, idle and deterministic (the canary).

Bounded: the examples are counted, each request's work is capped by the fuzz server's small context
and fan-out limit, and there is no per-example deadline to trip on a slow CI machine. Inputs are fresh
on every run; a failure prints the request as a curl command and the `@reproduce_failure` blob that
replays it.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from server_testlib import Canary, ServerThread, check_reply

TARGETS = [("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("POST", "/tokenize"),
           ("POST", "/detokenize")]

# Prompts the tiny model can serve. Schema-valid bodies almost never carry one (an empty prompt, token
# ids outside the vocabulary), so a share of the cases gets one swapped in: the rest of the body stays
# fuzzed, and those requests reach the engine's sampler instead of stopping at validation.
SERVABLE_PROMPTS: list[Any] = ["hi", "Once upon a time", "ünïcödé 🦊 text", [1, 2, 3], ["a", "b"], [[5, 6], [7]]]
SERVABLE_MESSAGES: list[Any] = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": [{"type": "text", "text": "parts"}]}, {"role": "assistant", "content": None}],
]


@pytest.fixture(scope="module")
def schema(fuzz_server: ServerThread) -> Any:
    return schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def _servable(case: Any, body: Any) -> Any:
    if isinstance(case.body, dict):
        key = "messages" if case.operation.path == "/v1/chat/completions" else "prompt"
        case.body = {**case.body, key: body}
    return case


def case_strategy(schema: Any) -> st.SearchStrategy[Any]:
    ops = {(op.method.upper(), op.path): op for op in (r.ok() for r in schema.get_all_operations())}
    missing = [t for t in TARGETS if t not in ops]
    assert not missing, f"the schema lacks {missing}"
    strategies = []
    for key in TARGETS:
        op = ops[key]
        strategies += [op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE)]
        if key[1] in ("/v1/completions", "/v1/chat/completions"):
            swap = st.sampled_from(SERVABLE_MESSAGES if key[1] == "/v1/chat/completions" else SERVABLE_PROMPTS)
            servable = st.tuples(op.as_strategy(GenerationMode.POSITIVE), swap).map(lambda cb: _servable(*cb))
            strategies += [servable] * 3  # weighted: the engine behind these endpoints is what must not break
    return st.one_of(strategies)


@pytest.mark.slow
def test_schema_fuzz(fuzz_server: ServerThread, canary: Canary, schema: Any, session: requests.Session) -> None:
    generated = []  # the generation requests that were served

    @settings(max_examples=150, deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(case=case_strategy(schema))
    def fuzz(case: Any) -> None:
        # Printed with the failing example whatever pytest's verbosity (-q hides the drawn arguments).
        note(case.as_curl_command(base_url=fuzz_server.url))
        resp = session.request(**case.as_transport_kwargs(base_url=fuzz_server.url), timeout=60)
        check_reply(resp.status_code, resp.headers.get("content-type", ""), resp.content)
        if resp.status_code < 300 and "completions" in case.operation.path:
            generated.append(case.operation.path)
        # After every example, not every few: a failure then belongs to the example that caused it, so
        # hypothesis can shrink it instead of calling the test flaky.
        canary.check()

    fuzz()
    # The fuzz must reach the engine, not only the validators, or it proves little.
    assert len(generated) >= 5, generated


def test_operation_ids_unique(fuzz_server: ServerThread) -> None:
    """OpenAPI requires a unique operationId per operation; generated clients key methods on it."""
    spec = requests.get(fuzz_server.url + "/openapi.json", timeout=30).json()
    ids = [op["operationId"] for item in spec["paths"].values() for op in item.values() if "operationId" in op]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
