"""Steps of more tokens than one matvec takes (the cuda backend's token groups, csrc/interpreter/token_groups.cuh):
the builder cuts every weight-streaming op into blocks whose pages fit the ring the kernel holds them in
(SplitParams.token_group / held_pages), and those streams compute what the reference model computes — prompt
chunks of several groups with decodes beside them, and LM heads over more sequences than one group."""
from __future__ import annotations

from engine.instructions.registry import OPCODES, Opcode
from engine.scheduler.compiler.split_params import SplitParams
from tests.vm.helpers import random_weights, run_pair, small_config

# The page a 64-wide model's rows would fill at the GPU's 16 KB: scaled down so the held pages really cut blocks.
GROUPED = {"token_group": 8, "held_pages": 4, "page_bytes": 1024}


def held_rows_fit(vm) -> None:  # noqa: ANN001 (an after_step check)
    cs = vm.last_stream
    p = SplitParams(**GROUPED)
    d = cs.stream.dims
    grouped = cs.shape.num_tokens > p.token_group
    assert not cs.stream.plan.fused or not grouped
    for ins in cs.stream.instrs:
        code = OPCODES.code_of(ins)
        if code == Opcode.LM_HEAD and cs.shape.num_seqs > p.token_group:
            rows, k = ins.v_end - ins.v_begin, d.hidden
        elif not grouped:
            continue
        elif code == Opcode.RMS_QKV_ROPE_APPEND:
            rows, k = ins.row_end - ins.row_begin, d.hidden
        elif code == Opcode.RMS_GATE_UP_SILU:
            rows, k = 2 * (ins.i_end - ins.i_begin), d.hidden
        elif code == Opcode.O_PROJ_RESIDUAL:
            rows, k = ins.row_end - ins.row_begin, d.q_cols
        elif code == Opcode.DOWN_RESIDUAL:
            rows, k = ins.row_end - ins.row_begin, ins.k_end - ins.k_begin
        else:
            continue
        assert rows <= p.held_pages * (p.page_bytes // (2 * k)), f"{Opcode(code).name} block of {rows} rows of {k}"


def test_prompt_chunks_of_several_groups_with_decodes_beside_them() -> None:
    cfg = small_config()
    prompts = [29, 11, 3]
    schedule = [[20, 11, 3], [9, 1, 1], [1, 1, 1]]
    run_pair(cfg, random_weights(cfg, seed=5), schedule, prompts, num_sms=8, after_step=held_rows_fit, **GROUPED)


def test_more_sequences_than_a_group_in_one_step() -> None:
    """12 sequences: their prompts in one step of 40 tokens, then decodes of 12 (the LM head in two groups)."""
    cfg = small_config()
    prompts = [7, 5, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2]
    schedule = [list(prompts), [1] * 12, [1] * 12]
    run_pair(cfg, random_weights(cfg, seed=6), schedule, prompts, num_sms=8, policy="lpt",
             after_step=held_rows_fit, fuse_o_proj=True, **GROUPED)


def test_prompt_attention_cut_in_query_parts() -> None:
    """A long prompt chunk's attention spread over instructions that each take a part of its tokens (their writes
    disjoint: the race detector checks it), beside split-KV decodes and their reduce."""
    cfg = small_config()
    parts: list[int] = []
    run_pair(cfg, random_weights(cfg, seed=7), [[45, 3], [1, 1], [1, 1]], [45, 3], num_sms=32, policy="dynamic",
             after_step=lambda vm: parts.append(vm.last_stream.stream.plan.q_parts))
    assert parts[0] > 1 and parts[1:] == [1, 1]


def test_lm_heads_cut_for_direct_logits_compute_the_same() -> None:
    """SplitParams.lm_head_direct_max_seqs (the cuda backend's lm_head_direct): decodes of 12 sequences with their LM
    head in blocks the out buffer does not cap; the streams still compute what the reference computes."""
    cfg = small_config()
    prompts = [5, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2, 2]
    run_pair(cfg, random_weights(cfg, seed=8), [list(prompts), [1] * 12, [1] * 12], prompts, num_sms=8, policy="lpt",
             token_group=16, held_pages=4, page_bytes=1024, max_out_floats=64, lm_head_direct_max_seqs=16)
