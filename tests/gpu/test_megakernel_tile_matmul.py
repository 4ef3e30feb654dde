"""Steps whose linear layers run as TILE_MATMUL tiles (csrc/interpreter/tile_matmul.cuh), on the GPU against the VM on
the same instruction tensors: prompt chunks over several token chunks of a tile, decodes of many sequences, both in
one step; a 2048-wide model (the 1B's widths: 128-row tiles, O and down cut over K) and a 512-wide one. Then
`LLM.generate` on a batch of 40 greedy requests follows the torch reference (teacher-forced, near-ties allowed)."""
from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.instructions.ops.tile_matmul import TileKind
from engine.instructions.registry import OPCODES, Opcode
from models.llama.config import LlamaConfig
from models.llama.weights import load_weights
from tests.gpu.mk_helpers import follows_reference, pair, small, steps_match_vm
from tests.gpu.test_megakernel_mma_matvec import scaled_weights, tolerance
from tests.vm.helpers import Scenario

pytestmark = pytest.mark.gpu

SHAPES = {
    "rows-2048": small(2048, 32, 8, 64, 8192, 2, 512),
    "rows-512": small(512, 8, 2, 64, 1024, 2, 384),
}


def _tiles_ran(gpu) -> bool:  # noqa: ANN001
    cs = gpu.last.compiled
    return cs.stream.plan.tiles is not None and any(OPCODES.code_of(i) == Opcode.TILE_MATMUL for i in cs.stream.instrs)


# (shape, policy, pages in pairs): the pair loop is the default for tiles with an even number of K steps
# (KernelOptions.tile_page_pairs); odd K slices take the single-page loop either way.
CASES = [(shape, policy, True) for shape in SHAPES for policy in ("dynamic", "lpt")] + [("rows-2048", "dynamic", False)]


@pytest.mark.parametrize(("shape", "policy", "pairs"), CASES)
def test_tile_steps_match_vm(shape: str, policy: str, pairs: bool) -> None:
    cfg = SHAPES[shape]
    vm, gpu = pair(scaled_weights(cfg, seed=41), policy, num_pages=256,
                   gpu_kw={"mma_matvec": True, "tile_page_pairs": pairs},
                   token_group=16, held_pages=9, page_bytes=16384, tile_min_tokens=17)
    prompts = [70, 21, 9] + [3] * 37
    scen = Scenario(cfg, prompts, page_size=16, num_pages=256, seed=17)
    plans: list[list[int | None]] = [
        [70] + [0] * 39,  # one sequence, two token chunks (64 + 6)
        [0] + [None] * 39,  # the rest of every prompt: 39 sequences, 141 tokens
        [1] * 40, [1] * 40,  # decodes: 40 sequences
        [1] * 20 + [0] * 20,  # 20 sequences
    ]
    for step, plan in enumerate(plans):
        steps_match_vm(vm, gpu, scen, [plan], f"{shape} {policy} tiles step {step}",
                       lambda name: tolerance(name, True), check_kv=True, skip=("mid", "act"),
                       also=("x_bf16", "attn_bf16", "act_bf16"))  # a tile layer's inputs are its bf16 ones
        assert _tiles_ran(gpu), f"step {step} did not run tiles"


@pytest.mark.parametrize("pairs,wide_rows", [(True, 128), (False, 128), (True, 256)])
def test_wide_tiles_match_vm(pairs: bool, wide_rows: int) -> None:
    """Chunks of more than 64 tokens run as wide tiles (each warpgroup 64 tokens against all 128 rows): a prefill of
    100 three-token prompts (300 tokens: three wide chunks), then decodes of the 100 sequences (one wide chunk, the LM
    head's tiles wide too), then of 65 (a wide chunk with one token in the second half); with and without the pages
    taken in pairs, and with tile_wide_rows=256 (tall gate/up, O and down tiles: 256 rows, two pages per K step)."""
    cfg = SHAPES["rows-2048"]
    vm, gpu = pair(scaled_weights(cfg, seed=43), "dynamic", num_pages=256,
                   gpu_kw={"mma_matvec": True, "tile_page_pairs": pairs},
                   token_group=16, held_pages=9, page_bytes=16384, tile_min_tokens=17, tile_wide_rows=wide_rows)
    scen = Scenario(cfg, [3] * 100, page_size=16, num_pages=256, seed=19)
    plans: list[list[int | None]] = [[None] * 100, [1] * 100, [1] * 65 + [0] * 35]
    for step, plan in enumerate(plans):
        steps_match_vm(vm, gpu, scen, [plan], f"wide tiles step {step}", lambda name: tolerance(name, True),
                       check_kv=True, skip=("mid", "act"), also=("x_bf16", "attn_bf16", "act_bf16"))
        tiles = [i for i in gpu.last.compiled.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL]
        assert any(i.tok_end - i.tok_begin > 64 for i in tiles), f"step {step} ran no wide tile"
        if wide_rows == 256 and step < 2:
            assert any(i.row_end - i.row_begin > 128 for i in tiles), f"step {step} ran no tall tile"


@pytest.mark.parametrize("max_ring_pages", [None, 9])
def test_packed_tile_pages_match_vm(max_ring_pages: int | None) -> None:
    """KernelOptions.tile_pack_k: a narrow tile of at most 32 rows (the decode steps' QKV tiles here: 12 of 32 rows per
    KV group) packs four K steps into each ring page where x holds eight of its stages, two where it holds four
    (tile_streams.cuh tile_pack): with each stream's own ring (20 sequences: two; 40: none) and a 9-page one (x for
    eight 32-row and eight 64-row stages: four for both); a prompt step (wide tiles, never packed) between them."""
    cfg = SHAPES["rows-2048"]
    gpu_kw: dict[str, object] = {"mma_matvec": True, "tile_pack_k": True}
    if max_ring_pages is not None:
        gpu_kw["max_ring_pages"] = max_ring_pages
    vm, gpu = pair(scaled_weights(cfg, seed=47), "dynamic", num_pages=256, gpu_kw=gpu_kw,
                   token_group=16, held_pages=9, page_bytes=16384, tile_min_tokens=9)
    scen = Scenario(cfg, [5] * 40, page_size=16, num_pages=256, seed=29)
    plans: list[list[int | None]] = [[None] * 40, [1] * 40, [1] * 20 + [0] * 20, [1] * 12 + [0] * 28]
    for step, plan in enumerate(plans):
        steps_match_vm(vm, gpu, scen, [plan], f"packed tiles step {step}", lambda name: tolerance(name, True),
                       check_kv=True, skip=("mid", "act"), also=("x_bf16", "attn_bf16", "act_bf16"))
        tiles = [i for i in gpu.last.compiled.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL]
        if step:
            assert any(i.kind == TileKind.QKV and i.row_end - i.row_begin <= 32 for i in tiles), f"step {step}: no packing"


def test_8b_widths_run_tile_steps_past_one_token_group() -> None:
    """The 8B's widths (4096 hidden, 128-wide heads, 14336 intermediate; one layer): its gate/up rows do not fit a
    ring held across token groups, so only tiles give it steps of more than 8 tokens (InterpreterLimits.max_tokens
    `tiles`); those steps match the VM."""
    cfg = small(4096, 32, 8, 128, 14336, 1, 512)
    vm, gpu = pair(scaled_weights(cfg, seed=45), "lpt", num_pages=256, gpu_kw={"mma_matvec": True},
                   token_group=8, held_pages=9, page_bytes=16384, tile_min_tokens=9)
    assert gpu.max_tokens_per_step > gpu.token_group == 8
    scen = Scenario(cfg, [40, 13] + [3] * 22, page_size=16, num_pages=256, seed=23)
    plans: list[list[int | None]] = [[None] * 24, [1] * 24]  # a prefill of 24 sequences (85 tokens), 24 decodes
    for step, plan in enumerate(plans):
        steps_match_vm(vm, gpu, scen, [plan], f"8b widths tiles step {step}", lambda name: tolerance(name, True),
                       check_kv=True, skip=("mid", "act"), also=("x_bf16", "attn_bf16", "act_bf16"))
        assert _tiles_ran(gpu), f"step {step} did not run tiles"


def test_generate_batch_follows_reference(tiny_checkpoint: str) -> None:
    """40 greedy requests through LLM.generate: their decode steps run as tiles, and each request's tokens follow the
    torch reference teacher-forced on its own prompt (a tile that read stale activations or wrote the wrong KV rows
    lands far from it)."""
    cfg = LlamaConfig.from_dir(tiny_checkpoint)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, cfg.vocab_size, (3 + s % 11,), generator=gen).tolist() for s in range(40)]
    llm = LLM(tiny_checkpoint, backend="cuda", dtype="bfloat16", progress=False, max_num_seqs=40)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    backend = llm.engine.backend
    streams = (cs for cache in backend.streams.caches for cs in cache._streams.values())
    assert any(cs.stream.plan.tiles is not None for cs in streams), \
        "no step ran tiles"
    weights = load_weights(tiny_checkpoint, cfg, dtype=torch.bfloat16, device=torch.device("cuda"), progress=False)
    for prompt, out in zip(prompts, outs):
        tokens = out.outputs[0].token_ids
        assert follows_reference(weights, prompt, tokens, 16, "tiles generate") >= int(0.8 * len(tokens))
