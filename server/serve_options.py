"""`megakernel serve` flags, checked before anything binds a port or loads weights.

A mistake in a flag must cost the user one line and no waiting: every check here runs in
milliseconds (the model's config.json, the engine settings, the backend's availability), and each
error message names the flag.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.cli.engine_flags import engine_kwargs as shared_engine_kwargs

API_KEY_ENV = "MEGAKERNEL_API_KEY"
# The front end's defaults (the engine's own are EngineConfig's field defaults); `megakernel serve`,
# `bench-serve`, build_app and AsyncEngine all take them from here.
DEFAULT_HOST = "127.0.0.1"  # this machine only; 0.0.0.0 must be asked for
DEFAULT_PORT = 8000
DEFAULT_STREAM_INTERVAL = 1  # tokens a stream gathers between writes (vLLM's --stream-interval; the first at once)
DEFAULT_MAX_PENDING = 1024  # in-flight generations (running + waiting) before 503
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0  # on SIGTERM, seconds running requests get to finish
_ORIGIN = re.compile(r"^(\*|https?://[^/\s]+)$")


class FlagError(ValueError):
    """A flag value that cannot work; the message starts with the flag."""


@dataclass(frozen=True)
class ServeOptions:
    """What the server front-end needs (the engine's own settings stay in EngineConfig)."""

    host: str
    port: int
    served_model_name: str
    api_key: str | None
    allowed_origins: tuple[str, ...]
    max_pending: int
    max_request_bytes: int
    shutdown_timeout: float
    # The engine in a spawned process of its own (server/engine_process.py) instead of a thread of the server's: the
    # HTTP side and the engine then stop sharing one GIL. On an H200 (1B, 128 in / 128 out) it gained 4-15 % output
    # tok/s at 128 clients in each of five same-machine A/Bs and -3 % to +6 % at 32 (docs/PERFORMANCE.md). Off under
    # torchrun (serve_options): there rank 0's engine belongs to the process torchrun started.
    engine_process: bool = True
    stream_interval: int = DEFAULT_STREAM_INTERVAL


def default_model_name(model: str) -> str:
    """What clients send as "model": a Hub id as given, else the last path component of --model."""
    from models.llama.sources import HUB_ID

    if HUB_ID.match(model) and not Path(model).exists():
        return model
    name = Path(model).name or Path(model).resolve().name
    return name or model


def parse_origins(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    origins = tuple(o.strip().rstrip("/") for o in value.split(",") if o.strip())
    for origin in origins:
        if not _ORIGIN.match(origin):
            raise FlagError(f"--allowed-origins: {origin!r} is not an origin like https://example.com (or *)")
    return origins


def serve_options(args: argparse.Namespace, environ: dict[str, str] | None = None) -> ServeOptions:
    env = os.environ if environ is None else environ
    if not 0 <= args.port <= 65535:
        raise FlagError(f"--port must be in [0, 65535], got {args.port}")
    if args.max_pending < 1:
        raise FlagError(f"--max-pending must be >= 1, got {args.max_pending}")
    if args.max_request_bytes < 1:
        raise FlagError(f"--max-request-bytes must be >= 1, got {args.max_request_bytes}")
    if not (math.isfinite(args.shutdown_timeout) and args.shutdown_timeout >= 0):
        raise FlagError(f"--shutdown-timeout must be a finite number of seconds >= 0, got {args.shutdown_timeout}")
    stream_interval = getattr(args, "stream_interval", DEFAULT_STREAM_INTERVAL)
    if stream_interval < 1:
        raise FlagError(f"--stream-interval must be >= 1 (tokens between a stream's writes), got {stream_interval}")
    name = args.served_model_name if args.served_model_name is not None else default_model_name(args.model)
    if not name.strip():
        raise FlagError("--served-model-name must not be empty")
    api_key = args.api_key if args.api_key is not None else env.get(API_KEY_ENV) or None
    return ServeOptions(host=args.host, port=args.port, served_model_name=name, api_key=api_key,
                        allowed_origins=parse_origins(args.allowed_origins), max_pending=args.max_pending,
                        max_request_bytes=args.max_request_bytes, shutdown_timeout=args.shutdown_timeout,
                        engine_process=engine_process(getattr(args, "engine_process", None), env),
                        stream_interval=stream_interval)


def engine_process(flag: bool | None, environ: Mapping[str, str]) -> bool:
    """--engine-process / --no-engine-process as given, else the default: on, except in a process torchrun started
    (its engine must stay there: the ranks' group is that process's)."""
    if flag is not None:
        return flag
    from engine.backends.torchrun_launch import torchrun_launch

    return ServeOptions.engine_process and torchrun_launch(environ) is None


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(shared_engine_kwargs(args), page_size=args.page_size, num_pages=args.num_pages)


def check_engine_flags(args: argparse.Namespace) -> None:
    """The checkpoint's config and every engine setting, without loading a weight."""
    from engine.backends import resolve_backend
    from engine.engine_config import EngineConfig, check_tensor_parallel_setup
    from engine.quantization import check_quantization
    from models.llama.config import LlamaConfig

    from engine.cuda_build import cache_root
    from models.llama.sources import resolve_model

    try:
        # A Hub id is fetched (or a GGUF converted) here, before the port is bound; the engine loads the result.
        args.model_dir = str(resolve_model(args.model, cache_root() / "models", args.revision))
        model = LlamaConfig.from_dir(args.model_dir)
    except (ValueError, OSError) as exc:
        raise FlagError(f"--model: {exc}") from None
    try:
        cfg = EngineConfig(model=args.model, **engine_kwargs(args))
        choice = resolve_backend(cfg.backend, cfg.device)
        check_quantization(cfg, choice.name)
        check_tensor_parallel_setup(cfg, choice.name, choice.device.type, model)
    except (ValueError, RuntimeError) as exc:
        raise FlagError(_as_flag(str(exc))) from None
    if cfg.max_model_len is not None and cfg.max_model_len > model.max_position_embeddings:
        raise FlagError(f"--max-model-len {cfg.max_model_len} exceeds the model's max_position_embeddings "
                        f"({model.max_position_embeddings})")
    if cfg.num_pages is not None and cfg.max_model_len is not None \
            and cfg.max_model_len > cfg.num_pages * cfg.page_size:
        raise FlagError(f"--max-model-len {cfg.max_model_len} needs more KV pages than --num-pages {cfg.num_pages} "
                        f"x --page-size {cfg.page_size} hold")


def _as_flag(message: str) -> str:
    """'num_pages must be >= 1' -> '--num-pages must be >= 1' (the engine names its fields)."""
    m = re.match(r"^([a-z][a-z_]*)\b(.*)$", message, re.S)
    if m and ("_" in m.group(1) or m.group(1) in ("backend", "dtype", "seed", "quantization")):
        return "--" + m.group(1).replace("_", "-") + m.group(2)
    return message
