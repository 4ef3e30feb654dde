"""The engine process's side (server/engine_process.py): load the engine from the EngineSpec, then loop: run the
commands the parent sent (add, abort, stop), step while requests run, and send each step's outputs as deltas (new
token ids, new logprobs, new text) with the engine's stats. A run of decode steps ends early when a command is
waiting on the pipe, as `arrivals_waiting` does in-process. A failure is sent as one "fatal" line before the child
exits."""
from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

from engine.outputs import RequestOutput
from server.log_setup import configure_logging
from server.serving_engine import EngineSpec

# A step's output for one request, as sent by the child: (request id, new token ids, new logprobs or None, new text,
# finished, finish reason, stop reason, error, prompt token ids and prompt logprobs (the first output only)).
Delta = tuple[str, list[int], "list[dict[int, float]] | None", str, bool, "str | None", "str | int | None",
              "str | None", "list[int] | None", "list[dict[int, float] | None] | None"]


class _Deltas:
    """Child side: what each request's outputs held at the last send, so each send carries only what is new."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[int, int]] = {}  # request id -> (tokens, characters of text) sent

    def of(self, out: RequestOutput) -> Delta:
        comp = out.outputs[0]
        first = out.request_id not in self._sent
        tokens, chars = self._sent.get(out.request_id, (0, 0))
        if out.finished:
            self._sent.pop(out.request_id, None)
        else:
            self._sent[out.request_id] = (len(comp.token_ids), len(comp.text))
        # Slices are copies already, and the output's own lists are the engine's copies (RequestState.to_output).
        return (out.request_id, comp.token_ids[tokens:],
                comp.logprobs[tokens:] if comp.logprobs is not None else None, comp.text[chars:],
                out.finished, comp.finish_reason, comp.stop_reason, out.error,
                out.prompt_token_ids if first else None, out.prompt_logprobs if first else None)

    def forget(self, request_id: str) -> None:
        self._sent.pop(request_id, None)


def run_engine_process(conn: Connection, spec: EngineSpec) -> None:
    """The child's whole life: load, then serve the parent's commands until "stop" or the pipe closes."""
    configure_logging(spec.log_level)
    try:
        engine = spec.loader(spec.model_dir, spec.engine_kwargs, spec.model_label, spec.served_name, spec.url)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the server with it
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    deltas = _Deltas()
    conn.send(("ready", engine.tokenizer, int(engine.config.vocab_size), int(engine.max_model_len),
               engine.backend_name))

    def send(outputs: list[RequestOutput]) -> None:
        if outputs:
            conn.send(("out", [deltas.of(o) for o in outputs], engine.get_stats()))

    engine.output_sink = send
    engine.arrivals_waiting = conn.poll  # a command waiting ends a run of decode steps early
    try:
        while True:
            if not engine.has_unfinished_requests():
                conn.poll(None)
            while conn.poll():
                msg = conn.recv()
                if msg[0] == "add":  # every request added since the parent's last step, all before this one
                    for rid, prompt, params in msg[1]:
                        refused = _add(engine, rid, prompt, params)
                        if refused is not None:
                            conn.send(("refused", rid, refused))
                elif msg[0] == "abort":
                    engine.abort(msg[1])
                    deltas.forget(msg[1])
                elif msg[0] == "stop":
                    return
            if engine.has_unfinished_requests():
                try:
                    send(engine.step())
                except Exception as exc:  # noqa: BLE001 - fatal: the parent fails every request with this line
                    conn.send(("fatal", f"engine step failed: {type(exc).__name__}: {exc}"))
                    return
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the server went away
    finally:
        engine.close()


def _add(engine: Any, request_id: str, prompt: Any, params: Any) -> tuple[str, str] | None:
    try:
        engine.add_request(request_id, prompt, params)
    except Exception as exc:  # noqa: BLE001 - the submitting request's error, not the engine's
        return (type(exc).__name__, str(exc))
    return None
