"""docs/ADDING_AN_OPCODE.md, followed for a toy opcode: SCALE_ROWS (toy_scale_rows.py, toy_scale_rows.cuh) joins
an opcode table with `OpcodeTable.with_op`, encodes and decodes, runs in the VM on a small stream with the race
detector on, and (with nvcc) compiles into the kernel from its header, its include and its one list line."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from engine import cuda_build
from engine.instructions.format import NO_COUNTER, Header, InstructionFormatError, Wait
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.op_spec import Instruction
from engine.instructions.ops.embed import Embed
from engine.instructions.packing import pack_weights
from engine.instructions.registry import OPCODES
from engine.instructions.step_args import StepArgsView, encode_step_args
from engine.vm.buffers import GlobalBuffers
from engine.vm.machine import VM, SyncState
from engine.vm.race import RaceError
from models.llama.kv_cache import PagedKVCache
from models.llama.step_batch import StepBatch
from tests.cuda_build.test_cuda_build import needs_nvcc
from tests.instructions import toy_scale_rows as toy
from tests.instructions.cuda_opcodes import INTERPRETER, cuda_opcodes, macro_body
from tests.vm.helpers import random_weights, small_config

CODE = max(OPCODES.specs) + 1  # the next free number
TABLE = OPCODES.with_op(CODE, toy.SPEC)


def test_encode_decode_round_trip() -> None:
    ins = toy.ScaleRows(3, 9, header=Header(instr_id=5, waits=(Wait(0, 2),), signal=1, signal_amount=1))
    words = TABLE.encode(ins)
    assert words[0] == CODE and words[3:5] == [3, 9]
    assert TABLE.decode(words) == ins
    assert TABLE.name_of(ins) == "SCALE_ROWS"
    with pytest.raises(InstructionFormatError):
        OPCODES.encode(ins)  # not in the product's table
    with pytest.raises(InstructionFormatError, match="unknown opcode"):
        OPCODES.decode(words)


def _stream(hidden: int, tokens: int, last_waits: bool = True) -> list[Instruction]:
    """EMBED; SCALE_ROWS of each half of the rows (after EMBED); SCALE_ROWS of all rows (after both halves)."""
    h = lambda i, waits, signal: Header(instr_id=i, waits=waits, signal=signal,  # noqa: E731
                                        signal_amount=0 if signal == NO_COUNTER else 1)
    half = hidden // 2
    return [Embed(0, tokens, header=h(0, (), 0)),
            toy.ScaleRows(0, half, header=h(1, (Wait(0, 1),), 1)),
            toy.ScaleRows(half, hidden, header=h(2, (Wait(0, 1),), 1)),
            toy.ScaleRows(0, hidden, header=h(3, (Wait(1, 2),) if last_waits else (), 2))]


def _buffers() -> tuple[GlobalBuffers, ModelDims, list[int]]:
    cfg = small_config()
    dims = ModelDims.from_config(cfg)
    kv = PagedKVCache.allocate(cfg, num_pages=4, page_size=8, dtype=torch.float32)
    tokens = [5, 17, 3]
    batch = StepBatch.build([tokens], [0], [[2]], page_size=8)
    shape = StepShape(len(tokens), 1, 1)
    bufs = GlobalBuffers.allocate(dims, pack_weights(random_weights(cfg)), kv.k, kv.v, shape, 1, 1)
    bufs.args = StepArgsView.decode(encode_step_args(batch, shape, 8))
    return bufs, dims, tokens


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_runs_in_the_vm_race_free(mode: str) -> None:
    bufs, dims, tokens = _buffers()
    instrs = _stream(dims.hidden, len(tokens))
    words = TABLE.encode_many(instrs)
    sync = SyncState.fresh(np.array([1, 2, 1]))
    vm = VM(bufs, seed=3, check_races=True, table=TABLE)
    if mode == "dynamic":
        vm.run_dynamic(words, num_sms=3, sync=sync)
    else:  # the halves on two SMs, the rest on a third
        queues = np.zeros((3, 2, 32), dtype=np.int32)
        queues[0, :2], queues[1, 0], queues[2, 0] = words[[0, 3]], words[1], words[2]
        vm.run_static(queues, sync)
    want = 4 * bufs.w("embed")[torch.tensor(tokens)].to(torch.float32)
    assert torch.equal(bufs.get("hidden")[: len(tokens)], want)


def test_its_accesses_let_the_race_detector_catch_a_missing_wait() -> None:
    bufs, dims, tokens = _buffers()
    words = TABLE.encode_many(_stream(dims.hidden, len(tokens), last_waits=False))
    with pytest.raises(RaceError):
        VM(bufs, check_races=True, table=TABLE).run_dynamic(words, num_sms=3, sync=SyncState.fresh(np.array([1, 2, 1])))


def _add_to_the_kernel(interpreter: Path) -> None:
    """The recipe's CUDA steps: the header, its line in MK_OPCODES, its include in ops/dispatch.cuh."""
    shutil.copy(Path(__file__).with_name("toy_scale_rows.cuh"), interpreter / "ops" / "scale_rows.cuh")
    opcodes = interpreter / "opcodes.cuh"
    text = opcodes.read_text()
    body = macro_body(text, "MK_OPCODES")
    opcodes.write_text(text.replace(body, f"{body} \\\n  X(SCALE_ROWS, {CODE}, NONE)"))
    dispatch = interpreter / "ops" / "dispatch.cuh"
    dispatch.write_text(dispatch.read_text().replace('#include "rms_qkv_rope_append.cuh"\n',
                                                     '#include "rms_qkv_rope_append.cuh"\n#include "scale_rows.cuh"\n'))


@needs_nvcc
@pytest.mark.slow
def test_compiles_into_the_kernel(tmp_path: Path) -> None:
    csrc = tmp_path / "csrc"
    shutil.copytree(INTERPRETER, csrc / "interpreter")
    shutil.copytree(INTERPRETER.parent / "tk", csrc / "tk")
    _add_to_the_kernel(csrc / "interpreter")
    assert {op.name: op.code for op in cuda_opcodes((csrc / "interpreter" / "opcodes.cuh").read_text())}[
        "SCALE_ROWS"] == TABLE.code_of(toy.ScaleRows(0, 1))
    # The general kernel alone (the batch-1 ones do not compile the toy: its in_variant), as dev/kernel_size.sh
    # builds one: the kernel part of interpreter.cu, up to its host bindings.
    kernel = (csrc / "interpreter" / "interpreter.cu").read_text().split("\nnamespace {")[0]
    kernel = "\n".join(line for line in kernel.splitlines() if "pybind11" not in line)
    src = csrc / "interpreter" / "one.cu"
    src.write_text(kernel + "\ntemplate __global__ void mk::vm::megakernel<false, mk::vm::VARIANT_GENERAL>("
                            "const __grid_constant__ mk::vm::Globals);\n")
    out = subprocess.run([str(cuda_build.find_nvcc()), "-std=c++20", "-gencode=arch=compute_90a,code=sm_90a", "-O3",
                          "--expt-relaxed-constexpr", "-Xptxas=-v", "-cubin", f"-I{csrc}", "-o",
                          str(tmp_path / "one.cubin"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    assert re.search(r"Compiling entry function '_ZN2mk2vm10megakernelILb0ELi0E", out.stderr)
