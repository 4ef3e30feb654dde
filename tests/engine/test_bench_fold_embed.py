"""When the bench's on-device loop folds the embedding into the previous step's ARGMAX_REDUCE
(engine/cuda/bench_runner.folds_embedding): only with fold_advance and fold_embed both on (the defaults, or the
MEGAKERNEL_* knobs), and only where the kernel's 16-byte row copy fits the hidden size."""
from __future__ import annotations

from engine.cuda.bench_runner import folds_embedding
from engine.cuda.knobs import backend_knobs
from tests.vm.helpers import small_config


def test_defaults_fold_the_embedding() -> None:
    assert folds_embedding({}, small_config(hidden=64))


def test_knobs_turn_it_off() -> None:
    cfg = small_config(hidden=64)
    assert not folds_embedding(backend_knobs({"MEGAKERNEL_FOLD_EMBED": "0"}), cfg)
    assert not folds_embedding(backend_knobs({"MEGAKERNEL_FOLD_ADVANCE": "0"}), cfg)  # the advance kernel embeds nothing
    assert folds_embedding(backend_knobs({"MEGAKERNEL_FOLD_EMBED": "1", "MEGAKERNEL_POLICY": "rr"}), cfg)


def test_hidden_size_must_take_whole_16_byte_rows() -> None:
    assert not folds_embedding({}, small_config(hidden=60, heads=3, kv_heads=1, head_dim=20))
