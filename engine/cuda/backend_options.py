"""`--kernel-option NAME=VALUE` of `megakernel bench` and `megakernel profile`: the cuda backend's keyword arguments
as text. A name is one of CudaBackend's own keywords, a KernelOptions field (how the kernel runs a stream) or a
SplitParams field (how a step is cut into instructions); each value is parsed by its field's type, and the
options are checked as a whole (KernelOptions and SplitParams validate their ranges), so a typo fails before any
model is loaded, with the option named. Defaults are the engine's; the product never reads them from the
environment."""
from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields

from engine.cuda.kernel_options import KernelOptions
from engine.scheduler.compiler.policies import POLICIES
from engine.scheduler.compiler.split_params import SplitParams

# CudaBackend.__init__'s own keywords (tests/engine/test_cuda_backend_options.py keeps this in step with it); its
# `kernel` argument is a KernelOptions, whose fields are options of their own here.
BACKEND_KEYWORDS: dict[str, object] = {"policy": str, "num_sms": int | None, "timeout_ns": int, "waves": float,
                                      "pad_steps": bool, "host_steps": bool, "pad_headroom": bool,
                                      "background_builds": bool,
                                      "stream_store": bool}
FLAG_TEXTS = {"0": False, "1": True}  # only these: a typo such as "ture" must not silently pick one side of an A/B
NONE_TEXT = "none"


# SplitParams fields the backend sets itself, never options: a tensor-parallel rank's share of the vocabulary
BACKEND_SET_FIELDS = ("tp_vocab_rank",)


def option_types() -> dict[str, object]:
    """Every option name and its type; CudaBackend's own keywords win over SplitParams' of the same name (it
    passes num_sms and waves to SplitParams itself)."""
    types_: dict[str, object] = {}
    for cls in (SplitParams, KernelOptions):
        hints = typing.get_type_hints(cls)
        types_.update({f.name: hints[f.name] for f in fields(cls) if f.name not in BACKEND_SET_FIELDS})
    types_.update(BACKEND_KEYWORDS)
    return types_


def _scalar(kind: object) -> Callable[[str], object]:
    if kind is bool:
        def flag(text: str) -> bool:
            if text not in FLAG_TEXTS:
                raise ValueError("expected 0 or 1")
            return FLAG_TEXTS[text]
        return flag
    if kind is int or kind is float:
        name = "an integer" if kind is int else "a number"

        def number(text: str) -> object:
            try:
                return kind(text)  # type: ignore[operator]
            except ValueError:
                raise ValueError(f"expected {name}") from None
        return number
    if kind is str:
        return str
    if typing.get_origin(kind) is tuple:  # tuple[str, ...]: comma-separated, empty items dropped
        return lambda text: tuple(item for item in text.split(",") if item)
    raise TypeError(f"no parser for options of type {kind}")


def parse_value(name: str, text: str) -> object:
    """The value of option `name` from its text; ValueError (without the name) when it does not parse, KeyError
    when there is no such option."""
    kind = option_types()[name]
    if isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind):
        if text.lower() == NONE_TEXT:
            return None
        (kind,) = [a for a in typing.get_args(kind) if a is not type(None)]
    return _scalar(kind)(text)


def check_options(options: Mapping[str, object]) -> None:
    """Range checks of the options as CudaBackend would apply them (before a model is loaded)."""
    known = option_types()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}")
    if "policy" in options and options["policy"] not in POLICIES:
        raise ValueError(f"policy: unknown {options['policy']!r}; choose one of {', '.join(POLICIES)}")
    KernelOptions(**{k: v for k, v in options.items() if k in KernelOptions.names()})  # type: ignore[arg-type]
    split = {f.name for f in fields(SplitParams)}
    SplitParams(**{k: v for k, v in options.items() if k in split})  # type: ignore[arg-type]


def parse_kernel_options(items: Iterable[str], flag: str = "--kernel-option") -> dict[str, object]:
    """CudaBackend keywords from NAME=VALUE items (a later item overrides an earlier one of the same name); a
    malformed item is a ValueError naming the flag and the option."""
    known = option_types()
    out: dict[str, object] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE")
        if name not in known:
            raise ValueError(f"{flag} {item!r}: unknown option {name!r}; known: {', '.join(sorted(known))}")
        try:
            out[name] = parse_value(name, text)
        except ValueError as exc:
            raise ValueError(f"{flag} {name}={text!r}: {exc}") from None
    try:
        check_options(out)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    return out
