"""When the bench's on-device loop folds the embedding into the previous step's ARGMAX_REDUCE
(engine/bench/megakernel_runner.folds_embedding): only with fold_advance and fold_embed both on (the defaults, or
`--kernel-option`), and only where the kernel's 16-byte row copy fits the hidden size."""
from __future__ import annotations

from engine.bench.megakernel_runner import folds_embedding
from engine.cuda.backend_options import parse_kernel_options
from tests.vm.helpers import small_config


def test_defaults_fold_the_embedding() -> None:
    assert folds_embedding({}, small_config(hidden=64))


def test_options_turn_it_off() -> None:
    cfg = small_config(hidden=64)
    assert not folds_embedding(parse_kernel_options(["fold_embed=0"]), cfg)
    assert not folds_embedding(parse_kernel_options(["fold_advance=0"]), cfg)  # the advance kernel embeds nothing
    assert folds_embedding(parse_kernel_options(["fold_embed=1", "policy=rr"]), cfg)


def test_hidden_size_must_take_whole_16_byte_rows() -> None:
    assert not folds_embedding({}, small_config(hidden=60, heads=3, kv_heads=1, head_dim=20))
