"""Mutation tests: dropping or weakening any kind of dependency in a built stream must trip the race
detector; over-tightening a wait or breaking queue order must trip the deadlock detector."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.backends.vm_backend import VMBackend
from engine.instructions.format import W_NUM_WAITS, W_OPERANDS, W_SIGNAL, W_SIGNAL_AMOUNT, W_WAITS
from engine.instructions.ops.tile_matmul import TileKind
from engine.instructions.registry import Opcode
from engine.instructions.step_args import StepArgsView
from engine.vm.machine import VM, DeadlockError, SyncState
from engine.vm.race import RaceError
from tests.vm.helpers import Scenario, random_weights, small_config

# Every (waiter opcode, layer selector) whose single wait encodes one dependency kind of the DAG.
KINDS = [
    (Opcode.RMS_QKV_ROPE_APPEND, 0),   # waits EMBED
    (Opcode.RMS_QKV_ROPE_APPEND, 1),   # waits the previous layer's DOWN
    (Opcode.ATTN_PARTIAL, 1),          # waits QKV of its KV group
    (Opcode.ATTN_REDUCE, 0),           # waits its partials
    (Opcode.O_PROJ_RESIDUAL, 1),       # waits the layer's attention
    (Opcode.RMS_GATE_UP_SILU, 0),      # waits O-proj
    (Opcode.DOWN_RESIDUAL, 1),         # waits gate/up of its slice
    (Opcode.LM_HEAD, -1),              # waits the last layer's DOWN
    (Opcode.ARGMAX_REDUCE, -1),        # waits LM_HEAD
]


@pytest.fixture(scope="module")
def setup():  # noqa: ANN201
    cfg = small_config()
    # 32 SMs: the two prompts' attention is cut over query parts, KV splits (so ATTN_REDUCE) and head chunks
    vm = VMBackend(random_weights(cfg, seed=5), 64, 8, num_sms=32, policy="dynamic", mlp_slices=2)
    batch, _ = Scenario(cfg, [13, 6], 8, 64, seed=1).batch([None, None])
    vm.forward(batch)  # compiles the stream and proves it clean
    return vm, vm.last_stream


# The fused batch-1 layer (ATTN_O_PROJ): the same checks on its dependencies.
FUSED_KINDS = [
    (Opcode.RMS_QKV_ROPE_APPEND, 1),   # waits the previous layer's DOWN (its copy overwrites mid)
    (Opcode.ATTN_O_PROJ, 0),           # waits every QKV block of its layer (q, K/V, hidden, mid)
    (Opcode.ATTN_O_PROJ, 1),
    (Opcode.RMS_GATE_UP_SILU, 1),      # waits every ATTN_O_PROJ of its layer (mid)
]


@pytest.fixture(scope="module")
def fused_setup():  # noqa: ANN201
    cfg = small_config(heads=8, kv_heads=2)
    vm = VMBackend(random_weights(cfg, seed=8), 64, 8, num_sms=8, policy="dynamic", mlp_slices=2,
                   max_attn_splits=1, fuse_o_proj=True)
    batch, _ = Scenario(cfg, [13], 8, 64, seed=3).batch([None])
    vm.forward(batch)
    assert vm.last_stream.stream.plan.fused
    return vm, vm.last_stream


def _run(vm: VMBackend, cs, words: np.ndarray, num_sms: int = 8, seed: int = 0) -> None:  # noqa: ANN001
    bufs, _ = cs.backend_state
    bufs.args = StepArgsView.decode(cs.step_args)
    VM(bufs, seed=seed, check_races=True).run_dynamic(words, num_sms, SyncState.fresh(cs.stream.counter_period))


def _pick(words: np.ndarray, opcode: int, layer: int, seed: int) -> int:
    rows = np.nonzero((words[:, 0] == opcode) & (words[:, 2] == layer))[0]
    assert rows.size, f"stream has no {Opcode(opcode).name} in layer {layer}"
    return int(np.random.default_rng(seed).choice(rows))


def _loosen_wait(words: np.ndarray, r: int, mutation: str) -> None:
    """Instruction r's single wait dropped, or its target one short ("weaken"; dropped where the target is 1)."""
    assert words[r, W_NUM_WAITS] == 1
    if mutation == "drop" or words[r, W_WAITS + 1] == 1:
        words[r, W_NUM_WAITS], words[r, W_WAITS], words[r, W_WAITS + 1] = 0, -1, 0
    else:
        words[r, W_WAITS + 1] -= 1


# (stream fixture, waiter opcode, layer): the split-attention stream's kinds, then the fused stream's.
ALL_KINDS = [("setup", o, l) for o, l in KINDS] + [("fused_setup", o, l) for o, l in FUSED_KINDS]
ALL_IDS = [f"{s}-{o.name}-L{l}" for s, o, l in ALL_KINDS]


@pytest.mark.parametrize("stream,opcode,layer", ALL_KINDS, ids=ALL_IDS)
@pytest.mark.parametrize("mutation", ["drop", "weaken"])
def test_missing_dependency_is_a_race(request, stream: str, opcode: Opcode, layer: int,  # noqa: ANN001
                                      mutation: str) -> None:
    vm, cs = request.getfixturevalue(stream)
    words = cs.tensor.copy()
    _loosen_wait(words, _pick(words, opcode, layer, seed=int(opcode) * 7 + layer), mutation)
    with pytest.raises(RaceError, match="race on buffer"):
        _run(vm, cs, words)


# The tile layer (TILE_MATMUL): each kind's single wait, picked by its kind operand (word W_OPERANDS).
TILE_KINDS = [
    (TileKind.QKV, 0),       # waits EMBED
    (TileKind.QKV, 1),       # waits the previous layer's DOWN tiles
    (TileKind.O, 1),         # waits the layer's attention
    (TileKind.GATE_UP, 0),   # waits every O tile (reads hidden, which they add into)
    (TileKind.DOWN, 1),      # waits every GATE_UP tile (adds into hidden, which they read)
    (TileKind.LM_HEAD, -1),  # waits the last layer's DOWN tiles
]


@pytest.fixture(scope="module")
def tile_setup():  # noqa: ANN201
    cfg = small_config(hidden=128, inter=192)
    vm = VMBackend(random_weights(cfg, seed=6), 64, 8, num_sms=16, policy="dynamic", tile_min_tokens=2,
                   tile_tokens=8)
    scen = Scenario(cfg, [13, 6], 8, 64, seed=4)
    batch, seqs = scen.batch([None, None])
    scen.feed(seqs, vm.forward(batch).argmax(-1).tolist())
    batch, _ = scen.batch([1, 1])  # a decode step: its LM head is tiles too
    vm.forward(batch)
    assert vm.last_stream.stream.plan.tiles is not None and vm.last_stream.stream.plan.tiles.lm_rows
    return vm, vm.last_stream


@pytest.mark.parametrize("kind,layer", TILE_KINDS, ids=[f"{k.name}-L{l}" for k, l in TILE_KINDS])
@pytest.mark.parametrize("mutation", ["drop", "weaken"])
def test_missing_tile_dependency_is_a_race(tile_setup, kind: TileKind, layer: int,  # noqa: ANN001
                                           mutation: str) -> None:
    vm, cs = tile_setup
    words = cs.tensor.copy()
    rows = np.nonzero((words[:, 0] == Opcode.TILE_MATMUL) & (words[:, 2] == layer) & (words[:, W_OPERANDS] == kind))[0]
    _loosen_wait(words, int(np.random.default_rng(int(kind) + 3 * layer).choice(rows)), mutation)
    with pytest.raises(RaceError, match="race on buffer"):
        _run(vm, cs, words, num_sms=16)


# A tiled step with a prompt chunk beside decodes: its attention spread as query units (query_units.py), its LM head as
# tiles of each sequence's last token (the final norm's tiles gather them). (opcode, layer, kind or None, what it waits)
MIXED_KINDS = [
    (Opcode.ATTN_PARTIAL, 1, None),            # the first unit waits its group's QKV tiles
    (Opcode.TILE_MATMUL, 1, TileKind.O),       # waits every attention unit of the layer
    (Opcode.TILE_MATMUL, -1, TileKind.NORM),   # the final norm waits the last layer's DOWN tiles
    (Opcode.TILE_MATMUL, -1, TileKind.LM_HEAD),  # waits the final norm's tiles
]


@pytest.fixture(scope="module")
def mixed_tile_setup():  # noqa: ANN201
    cfg = small_config(hidden=128, inter=192)
    vm = VMBackend(random_weights(cfg, seed=7), 64, 8, num_sms=16, policy="dynamic", tile_min_tokens=2,
                   tile_tokens=8, min_pages_per_split=64)
    scen = Scenario(cfg, [13, 6, 24], 8, 64, seed=4)
    batch, seqs = scen.batch([None, None, 12])
    scen.feed(seqs, vm.forward(batch).argmax(-1).tolist())
    batch, _ = scen.batch([1, 1, None])  # two decodes beside the third prompt's last 12 tokens
    vm.forward(batch)
    plan = vm.last_stream.stream.plan
    assert plan.spread and plan.tiles is not None and plan.tiles.lm_rows
    return vm, vm.last_stream


@pytest.mark.parametrize("opcode,layer,kind", MIXED_KINDS,
                         ids=[f"{o.name}-{k.name if k is not None else 'spread'}-L{l}" for o, l, k in MIXED_KINDS])
def test_missing_dependency_of_a_mixed_tile_step_is_a_race(mixed_tile_setup, opcode: Opcode, layer: int,  # noqa: ANN001
                                                          kind: TileKind | None) -> None:
    vm, cs = mixed_tile_setup
    words = cs.tensor.copy()
    pick = (words[:, 0] == opcode) & (words[:, 2] == layer)
    if kind is None:  # unit 0: always the first sequence's (a unit past the work would read nothing)
        pick &= (words[:, W_OPERANDS + 6] == 0) & (words[:, W_OPERANDS + 8] == 1)
    else:
        pick &= words[:, W_OPERANDS] == kind
    rows = np.nonzero(pick)[0]
    assert rows.size
    _loosen_wait(words, int(rows[0]), "drop")
    with pytest.raises(RaceError, match="race on buffer"):
        _run(vm, cs, words, num_sms=16)


@pytest.mark.parametrize("stream,opcode,layer", ALL_KINDS[::2], ids=ALL_IDS[::2])
def test_unreachable_target_is_a_deadlock(request, stream: str, opcode: Opcode, layer: int) -> None:  # noqa: ANN001
    vm, cs = request.getfixturevalue(stream)
    words = cs.tensor.copy()
    r = _pick(words, opcode, layer, seed=1)
    words[r, W_WAITS + 1] += 1
    with pytest.raises(DeadlockError, match=f"{opcode.name}.*waits on counter"):
        _run(vm, cs, words)


@pytest.mark.parametrize("stream,signaller,starved", [
    ("setup", Opcode.RMS_GATE_UP_SILU, "DOWN_RESIDUAL"),
    ("fused_setup", Opcode.RMS_QKV_ROPE_APPEND, "ATTN_O_PROJ"),  # the fused op waits for every QKV block
])
def test_lost_signal_is_a_deadlock(request, stream: str, signaller: Opcode, starved: str) -> None:  # noqa: ANN001
    vm, cs = request.getfixturevalue(stream)
    words = cs.tensor.copy()
    r = _pick(words, signaller, 1, seed=2)
    words[r, W_SIGNAL], words[r, W_SIGNAL_AMOUNT] = -1, 0
    with pytest.raises(DeadlockError, match=starved):
        _run(vm, cs, words)


def test_non_topological_dynamic_list_deadlocks(setup) -> None:  # noqa: ANN001
    """One SM claiming a consumer before its producer waits forever."""
    vm, cs = setup
    words = cs.tensor.copy()
    o = _pick(words, Opcode.O_PROJ_RESIDUAL, 0, seed=0)
    a = int(np.nonzero(words[:, 0] == Opcode.ATTN_PARTIAL)[0][0])
    order = list(range(len(words)))
    order.remove(o)
    order.insert(a, o)
    with pytest.raises(DeadlockError, match="O_PROJ_RESIDUAL"):
        _run(vm, cs, words[order], num_sms=1)


def test_static_queue_out_of_order_deadlocks() -> None:
    cfg = small_config()
    vm = VMBackend(random_weights(cfg, seed=2), 64, 8, num_sms=1, policy="rr")
    batch, _ = Scenario(cfg, [5], 8, 64).batch([None])
    vm.forward(batch)
    cs = vm.last_stream
    q = cs.tensor.copy()
    q[0, [0, 1]] = q[0, [1, 0]]  # first QKV block before EMBED on the only SM
    bufs, _ = cs.backend_state
    with pytest.raises(DeadlockError, match="SM 0: #0 RMS_QKV_ROPE_APPEND"):
        VM(bufs).run_static(q, SyncState.fresh(cs.stream.counter_period))
    assert torch.isfinite(bufs.get("logits")).all()


def test_fused_missing_mid_copy_changes_the_result(fused_setup) -> None:  # noqa: ANN001
    """The QKV copies are the only writes that initialise mid: without one, gate/up reads garbage (the
    race detector cannot see a missing write, the result can)."""
    vm, cs = fused_setup
    bufs, _ = cs.backend_state

    def logits(words: np.ndarray) -> torch.Tensor:
        with torch.inference_mode():  # the VM's buffers are inference tensors
            bufs.act["mid"].normal_(0.0, 1e3)  # poison what a previous run left
        _run(vm, cs, words)
        return bufs.get("logits").clone()

    clean = logits(cs.tensor)
    assert torch.equal(clean, logits(cs.tensor))
    words = cs.tensor.copy()
    r = _pick(words, Opcode.RMS_QKV_ROPE_APPEND, 0, seed=5)
    assert words[r, 7] > words[r, 6]
    words[r, 7] = words[r, 6]  # copy_end = copy_begin: an empty copy
    assert not torch.allclose(clean, logits(words))
