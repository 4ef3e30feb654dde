"""Fixed step shapes compile to the same instruction tensors, and the VM computes the same outputs, as
recorded below: moving code between modules (opcode modules, compiler packages) must not change a bit of
what the GPU runs.

Tensors are compared by hash (integers: identical on every machine). VM outputs are compared by greedy
tokens (exact) and logit summaries (to 1e-4: a CPU's matmul kernels may round differently elsewhere);
within one run the outputs of the three policies must agree exactly (the VM applies accumulations in
instruction-id order, so its result does not depend on the schedule).

After an intended change to the stream format or the builder, print the new values with
`.venv/bin/python -m tests.vm.test_golden_streams` and review them before pasting them here.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib

import numpy as np
import pytest
import torch

from engine.backends.vm_backend import VMBackend
from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_cache import BuildParams, CompiledStream, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from models.llama.config import LlamaConfig
from models.llama.init_random import random_state_dict
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights, weights_from_state_dict

POLICIES = ("rr", "lpt", "dynamic")
PAGE = 16
# The cuda backend's split settings for a 1B-shape batch-1 decode (engine/backends/cuda_backend.py).
CUDA_LIKE = dict(min_pages_per_split=8, fuse_o_proj=True, fused_head_chunks=4, one_token_slice_floats=4096,
                 one_token_slice_unit=128, max_out_floats=4096, embed_in_stream=False)


def one_b_shape(layers: int, vocab: int) -> LlamaConfig:
    """Llama-3.2-1B's per-layer shape with fewer layers and a smaller vocabulary (fast on a CPU)."""
    return dataclasses.replace(preset_config("llama-3.2-1b"), num_hidden_layers=layers, vocab_size=vocab,
                               bos_token_id=vocab - 2, eos_token_ids=(vocab - 1,))


def decode_batch(batch: int, context: int, page_size: int) -> StepBatch:
    """A decode step of `batch` sequences whose new token sits at position `context - 1`."""
    pages = -(-context // page_size)
    tables = [list(range(s * pages, (s + 1) * pages)) for s in range(batch)]
    return StepBatch.build([[1]] * batch, [context - 1] * batch, tables, page_size=page_size)


def prefill_batch() -> StepBatch:
    """Two prefill chunks: 19 tokens of a new sequence, 3 tokens of one already holding 5."""
    return StepBatch.build([list(range(3, 22)), [7, 8, 9]], [0, 5], [[4, 1], [0]], page_size=PAGE)


STREAM_CASES: dict[str, tuple[LlamaConfig, int, StepBatch, dict[str, object]]] = {
    "tiny-decode": (preset_config("tiny"), 8, decode_batch(2, 37, PAGE), {}),
    "tiny-prefill": (preset_config("tiny"), 8, prefill_batch(), {"mlp_slices": 2}),
    "tiny-fused": (preset_config("tiny"), 8, decode_batch(1, 37, PAGE), {"fuse_o_proj": True}),
    "1b-decode": (one_b_shape(2, 128256), 132, decode_batch(1, 129, PAGE), {}),
    "1b-decode-cuda-like": (one_b_shape(2, 128256), 132, decode_batch(1, 33, PAGE), CUDA_LIKE),
    "1b-prefill": (one_b_shape(2, 128256), 132, prefill_batch(), {}),
}

STREAM_HASHES: dict[str, str] = {
    "1b-decode/rr": "92fa6669adeb3cf12727",
    "1b-decode/lpt": "e7a71e243a9833135f50",
    "1b-decode/dynamic": "7cc7278e5d8c1d7a01c1",
    "1b-decode-cuda-like/rr": "325a6e338b26bb3c4a7c",
    "1b-decode-cuda-like/lpt": "9b62314c6eecffe45867",
    "1b-decode-cuda-like/dynamic": "74dba33d747613b8f28a",
    "1b-prefill/rr": "ea4ded258af7f71de39a",
    "1b-prefill/lpt": "479218a841d3b2485603",
    "1b-prefill/dynamic": "4d7de15eb595ece8ba37",
    "tiny-decode/rr": "538da062122ad78fe7cd",
    "tiny-decode/lpt": "59def128c8fd7aa07fbe",
    "tiny-decode/dynamic": "11a8efa78dc77f5d4b73",
    "tiny-fused/rr": "b75e04d9e224db10dcff",
    "tiny-fused/lpt": "26349e3e7a603e84068d",
    "tiny-fused/dynamic": "e2f9bfcae6349e8a85ac",
    "tiny-prefill/rr": "2b173dc813668c53244c",
    "tiny-prefill/lpt": "214733e8a2fa0fd1e0b7",
    "tiny-prefill/dynamic": "548b943988bd002714a7",
}


def compile_case(name: str, policy: str) -> CompiledStream:
    cfg, num_sms, batch, split_kw = STREAM_CASES[name]
    params = BuildParams.of(policy, **split_kw)
    return compile_stream(ModelDims.from_config(cfg), batch, PAGE, params, TargetDevice(num_sms=num_sms))


def stream_hash(cs: CompiledStream) -> str:
    h = hashlib.sha256()
    for a in (cs.tensor, cs.stream.counter_period, cs.step_args.numpy()):
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:20]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(STREAM_CASES))
def test_instruction_tensors_are_unchanged(name: str, policy: str) -> None:
    assert stream_hash(compile_case(name, policy)) == STREAM_HASHES[f"{name}/{policy}"]


# (config, SMs, weight dtype, extra VMBackend keywords): a prefill step of two sequences, then two decode steps.
VM_CASES: dict[str, tuple[LlamaConfig, int, torch.dtype, dict[str, object]]] = {
    "tiny": (preset_config("tiny"), 8, torch.float32, {}),
    "tiny-fused": (preset_config("tiny"), 8, torch.float32, {"fuse_o_proj": True, "max_attn_splits": 1}),
    "1b-shape": (one_b_shape(1, 4096), 32, torch.bfloat16, {}),
}

VM_OUTPUTS: dict[str, list[tuple[list[int], float, float, list[float]]]] = {
    "1b-shape": [
        ([2699, 3730], 24.60801611095667, 29577.380956299603, [-7.958504, 3.113306, -2.088067, 1.089058, -6.37697]),
        ([3594, 459], -278.0348012447357, 29763.68017476797, [0.760768, 1.265818, 5.690783, -6.017846, -2.051781]),
        ([1966, 1340], -541.1108701303601, 29753.32882397622, [-3.054925, -1.89568, 2.366088, 2.322284, 1.029217]),
    ],
    "tiny": [
        ([800, 414], 64.40551482886076, 2550.788343526423, [-0.267213, -0.018675, -1.970803, -1.020696, 1.461407]),
        ([952, 665], 123.01356518268585, 2561.4984298199415, [2.797435, -1.736966, 0.416527, -0.712512, 0.74699]),
        ([882, 776], 108.37572441250086, 2483.632226102054, [0.381191, 2.896231, -0.057598, 0.113851, 0.112027]),
    ],
    "tiny-fused": [
        ([800, 414], 64.40550233796239, 2550.788430329412, [-0.267211, -0.018674, -1.970805, -1.020695, 1.461407]),
        ([952], 62.8983913064003, 1291.4463512599468, [2.797436, 0.648591, -1.736965, -1.113022, 0.416528]),
        ([882], 38.17126403003931, 1217.7142317071557, [0.381194, -0.058417, 2.896231, -2.424094, -0.057597]),
    ],
}


@functools.lru_cache(maxsize=1)
def case_weights(name: str) -> LlamaWeights:
    cfg, _, dtype, _ = VM_CASES[name]
    sd = random_state_dict(cfg, seed=11, dtype=torch.float32)
    sd = {k: (v * 5 if not k.endswith("norm.weight") else v) for k, v in sd.items()}  # separated logits
    return weights_from_state_dict(cfg, sd, dtype=dtype)


def vm_steps(name: str, policy: str) -> list[tuple[list[int], torch.Tensor]]:
    _, num_sms, _, kw = VM_CASES[name]
    vm = VMBackend(case_weights(name), 16, PAGE, num_sms=num_sms, policy=policy, seed=3, **kw)  # type: ignore[arg-type]
    fused_alone = bool(kw.get("fuse_o_proj"))
    batches = [StepBatch.build([list(range(3, 22)), [7, 8, 9]], [0, 0], [[4, 1], [0]], page_size=PAGE)]
    out = []
    tokens = [[0], [0]]
    for step in range(3):
        if step:
            seqs = [0] if fused_alone else [0, 1]
            pos = [19 + step - 1, 3 + step - 1]
            tables = [[4, 1], [0]]
            batches.append(StepBatch.build([tokens[s] for s in seqs], [pos[s] for s in seqs],
                                           [tables[s] for s in seqs], page_size=PAGE))
        logits = vm.forward(batches[step])
        ids = vm.last_tokens.tolist()
        tokens = [[t] for t in ids] + [[0]] * (2 - len(ids))
        out.append((ids, logits))
    return out


def summary(logits: torch.Tensor) -> tuple[float, float, list[float]]:
    flat = logits.double().reshape(-1)
    probe = torch.linspace(0, flat.numel() - 1, 5).long()
    return float(flat.sum()), float(flat.abs().sum()), [float(v) for v in flat[probe]]


@pytest.mark.parametrize("name", sorted(VM_CASES))
def test_vm_outputs_are_unchanged(name: str) -> None:
    runs = {p: vm_steps(name, p) for p in POLICIES}
    for p in POLICIES[1:]:
        for (ids_a, la), (ids_b, lb) in zip(runs[POLICIES[0]], runs[p]):
            assert ids_a == ids_b and torch.equal(la, lb), f"{name}: policy {p} differs from {POLICIES[0]}"
    for step, ((ids, logits), (want_ids, s, a, probes)) in enumerate(zip(runs["rr"], VM_OUTPUTS[name])):
        got_s, got_a, got_probes = summary(logits)
        assert ids == want_ids, f"{name} step {step}: tokens"
        assert got_s == pytest.approx(s, rel=1e-4, abs=1e-3) and got_a == pytest.approx(a, rel=1e-4)
        assert got_probes == pytest.approx(probes, rel=1e-4, abs=1e-3), f"{name} step {step}: logits"


def _print_recorded() -> None:
    print("STREAM_HASHES: dict[str, str] = {")
    for name in sorted(STREAM_CASES):
        for policy in POLICIES:
            print(f'    "{name}/{policy}": "{stream_hash(compile_case(name, policy))}",')
    print("}")
    print("VM_OUTPUTS = {")
    for name in sorted(VM_CASES):
        rows = [(ids, *summary(lg)) for ids, lg in vm_steps(name, "rr")]
        print(f'    "{name}": [')
        for ids, s, a, probes in rows:
            print(f"        ({ids}, {s!r}, {a!r}, {[round(v, 6) for v in probes]}),")
        print("    ],")
    print("}")


if __name__ == "__main__":
    _print_recorded()
