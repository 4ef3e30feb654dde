"""`megakernel bench`: the decode benchmark (see harness.py for what is measured)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.bench.batch_sweep import parse_batches
from engine.bench.config import COMPILE_FALLBACK, BenchConfig, parse_prompt_lens
from engine.cuda.kernel_option_flag import add_kernel_option_argument
from engine.engine_config import DTYPE_NAMES
from models.llama.dummy_weights import LOAD_FORMATS
from models.llama.presets import CPU_PRESET, DEFAULT_GPU_PRESET

if TYPE_CHECKING:
    from engine.bench.harness import BenchResult

# Every flag's default is BenchConfig's (engine/bench/config.py), except the device and the preset, which the
# command picks by machine (resolve_device_and_preset).


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="decode benchmark: engine vs PyTorch baselines vs the copy floor "
                                     "(--batch N: N sequences at once)")
    p.add_argument("--model", default=None, metavar="DIR", help="checkpoint directory (default: random weights)")
    p.add_argument("--preset", default=None,
                   help=f"random-weight shape (default {DEFAULT_GPU_PRESET} on a GPU, {CPU_PRESET} on the CPU)")
    p.add_argument("--prompt-len", type=int, default=BenchConfig.prompt_len)
    p.add_argument("--new-tokens", type=int, default=BenchConfig.new_tokens)
    p.add_argument("--batch", dest="batches", type=parse_batches, default=(BenchConfig.batch,), metavar="N[,N,...]",
                   help="sequences decoded together (the kernel-only row runs at batch 1 only); a list (1,8,16,32,64) "
                        "runs the bench at each and ends with a table of every runner against the batch (--plot: a "
                        "PNG of it); with --prefill-len, prompts prefilled together")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="with a --batch list: step time and throughput against the batch, as a PNG")
    p.add_argument("--prompt-lens", type=parse_prompt_lens, default=(), metavar="L,L,...",
                   help="sequences of these prompt lengths decoded together instead of --batch prompts of --prompt-len "
                        "(LxN: N of length L; e.g. 32000,1000x15): the product rows only")
    p.add_argument("--prefill-len", type=int, default=BenchConfig.prefill_len, metavar="L",
                   help="time to first token of --batch prompts of L tokens (LLM.generate, max_tokens=1) against a "
                        "same-run compiled PyTorch prefill and a large matmul's TFLOP/s, instead of the decode bench")
    p.add_argument("--skip", default="",
                   help="comma list of baselines to skip: eager,graph,compile (and tp-graph at --tensor-parallel-size N > 1)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result as JSON")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (cuda when available)")
    p.add_argument("--dtype", default=BenchConfig.dtype, choices=DTYPE_NAMES)
    p.add_argument("--compile-mode", default=BenchConfig.compile_modes[0],
                   help=f"torch.compile mode of the compile+graph baseline ({COMPILE_FALLBACK!r} is tried if it "
                        "fails)")
    p.add_argument("--repeats", type=int, default=BenchConfig.repeats, help="timed runs per runner (median reported)")
    p.add_argument("--seed", type=int, default=BenchConfig.seed)
    p.add_argument("--engine-module", action="append", default=[], metavar="MODULE",
                   help="import MODULE first so it can register_engine_runner(); repeatable")
    p.add_argument("--logprob-check", action=argparse.BooleanOptionalAction, default=BenchConfig.logprob_check,
                   help="after the timed runs, each row's max |logprob - fp32 reference| on its own tokens")
    p.add_argument("--quantization", default=None, choices=["fp8"],
                   help="fp8 weights (one scale per output channel) in the megakernel rows, next to a same-run bf16 "
                        "row; the floor counts fp8 bytes")
    p.add_argument("--tensor-parallel-size", type=int, default=BenchConfig.tensor_parallel_size, metavar="N",
                   help="the megakernel row over N GPUs (one rank each), next to a same-run one-GPU row; the floor is "
                        "one rank's bytes")
    p.add_argument("--load-format", default=BenchConfig.load_format, choices=LOAD_FORMATS,
                   help="dummy: the megakernel rows' engines make their own random weights (each rank its shard on its "
                        "GPU), for shapes too big to make here (--preset llama-3.1-70b --tensor-parallel-size 4); no "
                        "PyTorch baselines, no logprob check")
    add_kernel_option_argument(p)
    p.set_defaults(func=run_cli)


def resolve_device_and_preset(device: str, preset: str | None, has_cuda: bool) -> tuple[str, str, str | None]:
    """(device, preset, note): auto picks CUDA when present; on the CPU the default preset is tiny."""
    note = None
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
        if not has_cuda:
            note = "no CUDA GPU found: running on the CPU"
    if preset is None:
        preset = DEFAULT_GPU_PRESET if device.startswith("cuda") else CPU_PRESET
        if not device.startswith("cuda"):
            note = (note or "CPU run") + f" with the {CPU_PRESET} preset (pass --preset to override)"
    if not device.startswith("cuda"):
        note = (note or "CPU run") + ("; the floor row is the CPU's memcpy rate: the copy-bandwidth floor the "
                                      "megakernel is measured against needs a GPU")
    return device, preset, note


def run_cli(args: argparse.Namespace) -> int:
    import torch

    from engine.bench.engines import DEFAULT_ENGINE_PLUGINS, import_plugins
    from engine.bench.harness import run_bench
    from engine.bench.report import format_table, write_json

    device, preset, note = resolve_device_and_preset(args.device, args.preset, torch.cuda.is_available())
    messages = [note] if note else []
    if note:
        print(note, file=sys.stderr)
    messages += import_plugins([*DEFAULT_ENGINE_PLUGINS, *args.engine_module])
    skip = frozenset(s.strip() for s in args.skip.split(",") if s.strip())
    batches: tuple[int, ...] = args.batches
    sweep = len(batches) > 1
    if sweep and (args.prompt_lens or args.prefill_len):
        raise ValueError("--batch takes a list only for the decode bench (not with --prompt-lens or --prefill-len)")
    if args.plot and not sweep:
        raise ValueError("--plot draws a --batch list (e.g. --batch 1,8,16,32,64)")
    batch = batches[0]
    if args.prompt_lens:  # the sequences' count and the first one's length
        if batch not in (1, len(args.prompt_lens)):
            raise ValueError(f"--batch {batch} and --prompt-lens of {len(args.prompt_lens)} sequences disagree")
        batch, args.prompt_len = len(args.prompt_lens), args.prompt_lens[0]
    config = BenchConfig(
        model_dir=args.model, preset=preset, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
        batch=batch, skip_baselines=skip, dtype=args.dtype, device=device,
        compile_modes=(args.compile_mode, COMPILE_FALLBACK), repeats=args.repeats, seed=args.seed,
        kernel_options=tuple(args.kernel_option), logprob_check=args.logprob_check, prefill_len=args.prefill_len,
        prompt_lens=args.prompt_lens, quantization=args.quantization,
        tensor_parallel_size=args.tensor_parallel_size, load_format=args.load_format)

    def progress(msg: str) -> None:
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    if sweep:
        return _run_sweep(config, batches, args, messages, progress)
    if config.prefill_len:  # time to first token instead of decode
        from engine.bench.prefill_bench import format_prefill_table, run_prefill_bench, write_prefill_json

        run, table, write = run_prefill_bench, format_prefill_table, write_prefill_json
    else:
        run, table, write = run_bench, format_table, write_json
    result = run(config, messages=tuple(messages), progress=progress)
    print(table(result))  # type: ignore[arg-type]
    if args.json:
        print(f"wrote {write(result, args.json)}")  # type: ignore[arg-type]
    return 0


def _run_sweep(config: BenchConfig, batches: tuple[int, ...], args: argparse.Namespace, messages: list[str],
               progress: Callable[[str], None]) -> int:
    """The decode bench at each batch size (each run's table as it ends), then the sweep's table, JSON and PNG."""
    from dataclasses import replace

    from engine.bench.batch_sweep import format_sweep, plot_sweep, run_batch_sweep, write_sweep_json
    from engine.bench.harness import run_bench
    from engine.bench.report import format_table

    def one(n: int) -> BenchResult:
        result = run_bench(replace(config, batch=n), messages=tuple(messages), progress=progress)
        print(format_table(result), flush=True)
        return result

    results = run_batch_sweep(batches, one, progress)
    print(format_sweep(results))
    if args.json:
        print(f"wrote {write_sweep_json(results, args.json)}")
    if args.plot:
        print(f"wrote {plot_sweep(results, args.plot)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: `python -m engine.bench.cli [options]`."""
    parser = argparse.ArgumentParser(prog="megakernel")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
