"""Write a random-weight Llama checkpoint in Hugging Face layout, fully offline.

Output: config.json, generation_config.json, model.safetensors (or model-0000X-of-0000N.safetensors
shards + model.safetensors.index.json once the weights exceed `max_shard_bytes`) and a byte-level BPE
tokenizer whose vocabulary size equals the config's and whose special ids equal its bos/eos ids.
Tensors are generated and saved shard by shard, so even the 8B preset never holds more than about
one shard in memory.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from models.llama.config import LlamaConfig
from models.llama.dummy_weights import fill_random
from models.llama.presets import preset_config, preset_names
from models.llama.tokenizer_builder import BOS, llama3_eos_ids, special_token_ids, write_tokenizer
from models.llama.weights import INDEX_FILE, SINGLE_FILE, expected_shapes

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DEFAULT_DTYPE = "bfloat16"
DEFAULT_SEED = 0
DEFAULT_MAX_SHARD_BYTES = 2 * 1000**3


def random_tensor(name: str, shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Norm weights ~ 1 + N(0, 0.05); every matrix ~ N(0, 0.02) (dummy_weights.fill_random)."""
    return fill_random(name, torch.empty(shape, dtype=dtype), generator)


def random_state_dict(config: LlamaConfig, seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """In-memory random weights (small configs / tests); same values init_random_checkpoint writes for this dtype."""
    g = torch.Generator().manual_seed(seed)
    return {name: random_tensor(name, shape, g, dtype) for name, shape in expected_shapes(config).items()}


def with_tokenizer_ids(config: LlamaConfig) -> LlamaConfig:
    """The config with bos/eos set to where the generated tokenizer puts its specials."""
    return dataclasses.replace(config, bos_token_id=special_token_ids(config.vocab_size)[BOS],
                               eos_token_ids=llama3_eos_ids(config.vocab_size))


def plan_shards(shapes: dict[str, tuple[int, ...]], elem_size: int, max_shard_bytes: int) -> list[list[str]]:
    """Split tensor names (in order) into shards of at most max_shard_bytes (a lone bigger tensor gets its own)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = elem_size * int(torch.Size(shape).numel())
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def init_random_checkpoint(
    preset_or_config: str | LlamaConfig,
    out_dir: str | Path,
    seed: int = DEFAULT_SEED,
    dtype: str = DEFAULT_DTYPE,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: bool = True,
) -> Path:
    """Write a random checkpoint to out_dir and return its path. A custom config's bos/eos ids are
    replaced by the generated tokenizer's (see `with_tokenizer_ids`)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: unsupported {dtype!r}; choose one of {', '.join(DTYPES)}")
    base = preset_config(preset_or_config) if isinstance(preset_or_config, str) else preset_or_config
    config = with_tokenizer_ids(base)
    torch_dtype = DTYPES[dtype]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    (out / "config.json").write_text(json.dumps(config.to_hf_dict(torch_dtype=dtype), indent=2))
    gen_cfg = {"bos_token_id": config.bos_token_id, "eos_token_id": list(config.eos_token_ids),
               "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2))
    write_tokenizer(out, config.vocab_size, config.max_position_embeddings)

    # Remove weights of an earlier run so the loader cannot pick up a stale layout.
    for stale in [out / SINGLE_FILE, out / INDEX_FILE, *out.glob("model-*-of-*.safetensors")]:
        stale.unlink(missing_ok=True)

    shapes = expected_shapes(config)
    shards = plan_shards(shapes, torch.empty((), dtype=torch_dtype).element_size(), max_shard_bytes)
    g = torch.Generator().manual_seed(seed)
    weight_map: dict[str, str] = {}
    total = 0
    bar = tqdm(total=len(shapes), desc="writing random weights", unit="tensor", disable=not progress)
    for i, names in enumerate(shards):
        fname = SINGLE_FILE if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name in names:
            tensors[name] = random_tensor(name, shapes[name], g, torch_dtype)
            total += tensors[name].numel() * tensors[name].element_size()
            weight_map[name] = fname
            bar.update(1)
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        del tensors
    bar.close()
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: `megakernel init-random --preset NAME --out DIR [--seed N] [--dtype D] [--max-shard-bytes B]`."""
    parser = argparse.ArgumentParser(prog="megakernel init-random", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, choices=preset_names())
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--dtype", default=DEFAULT_DTYPE, choices=sorted(DTYPES))
    parser.add_argument("--max-shard-bytes", type=int, default=DEFAULT_MAX_SHARD_BYTES)
    args = parser.parse_args(argv)
    path = init_random_checkpoint(args.preset, args.out, seed=args.seed, dtype=args.dtype,
                                  max_shard_bytes=args.max_shard_bytes)
    print(f"wrote random {args.preset} checkpoint to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
