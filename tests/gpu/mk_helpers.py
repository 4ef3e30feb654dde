"""Shared drivers for the megakernel GPU tests: identical steps through the VM and the GPU."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from engine.backends.cuda_backend import CudaBackend
from engine.backends.vm_backend import VMBackend
from models.llama.config import LlamaConfig
from models.llama.weights import LlamaWeights

if TYPE_CHECKING:
    from tests.vm.helpers import Scenario

BUFFERS = ("hidden", "mid", "q", "attn_out", "act", "logits")


def pair(weights: LlamaWeights, policy: str, num_pages: int = 64, page_size: int = 16,
         gpu_kw: dict[str, object] | None = None, **split_kw: object) -> tuple[VMBackend, CudaBackend]:
    # Identical split parameters on both sides, so both run the very same instruction tensors; one KV
    # page per split (the default here) keeps the split-KV + reduce path covered at these short contexts.
    # gpu_kw: kernel-only options (e.g. attn_kv_ring) that do not change the instruction tensors.
    split_kw.setdefault("min_pages_per_split", 1)
    split_kw.setdefault("fuse_o_proj", False)  # the cuda backend's own default may fuse; the VM's does not
    split_kw.setdefault("tile_min_tokens", None)  # ditto for tiles (KernelOptions.tile_matmul): a test asks for them
    # Unpadded steps (engine/cuda/step_padding.py): the tests compare every buffer of the step with the VM's.
    gpu = CudaBackend(weights, num_pages=num_pages, page_size=page_size, policy=policy, pad_steps=False,
                      **split_kw, **(gpu_kw or {}))
    vm = VMBackend(weights, num_pages=num_pages, page_size=page_size, num_sms=gpu.num_sms, policy=policy,
                   check_races=False, weight_dtype=torch.bfloat16, **split_kw)
    return vm, gpu


def kv_err(gpu: CudaBackend, vm: VMBackend) -> float:
    """Relative error of the GPU's K and V caches against the VM's, over the engine's pages (the cuda backend keeps
    one more: the padded steps' spare page)."""
    n = vm.kv.k.shape[1]
    return max(rel_err(gpu.kv.k[:, :n], vm.kv.k), rel_err(gpu.kv.v[:, :n], vm.kv.v))


def clear_winners(ref_logits: torch.Tensor) -> torch.Tensor:
    """Rows whose top logit leads the runner-up by more than 1 % (at least 0.01): there the GPU's greedy id
    must equal the VM's; closer rows are fp32-vs-bf16 near-ties either may break."""
    top2 = torch.topk(ref_logits, 2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]) > 1e-2 * top2[:, 0].abs().clamp_min(1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float().cpu(), b.float().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))


# Max relative error of a buffer against the fp32 VM on steps whose matvecs take the tensor cores (x rounded to
# bf16, as torch's bf16 linear layers round their input; prompt chunks included, so the rounding of every prompt
# token's K and V reaches the decodes after it). The attention output amplifies the rounding of q and k through
# the softmax. Measured on these tests' 512-wide shapes (H100, H200): attn_out up to 8.4e-2, the other buffers
# up to 2.5e-2; a wrong result (a dropped row, split or token) is off by O(1).
VM_REL_TOLERANCE = 3e-2
VM_ATTN_OUT_TOLERANCE = 1.5e-1


def vm_tolerance(name: str) -> float:
    """The relative tolerance of buffer `name` against the VM (see VM_REL_TOLERANCE)."""
    return VM_ATTN_OUT_TOLERANCE if name in ("attn_out", "attn_bf16") else VM_REL_TOLERANCE


def steps_match_vm(vm: VMBackend, gpu: CudaBackend, scen: Scenario, plans: list[list[int | None]], label: str,
                   tolerance: Callable[[str], float] = vm_tolerance, check_kv: bool = False,
                   skip: tuple[str, ...] = (), kv_tolerance: float = 2e-2, also: tuple[str, ...] = ()) -> None:
    """Run each plan (tokens per sequence, as Scenario.batch takes them) through both backends: every buffer
    within tolerance(name) of the VM's (relative), the KV caches within 2e-2 when check_kv, and the same
    greedy ids wherever the VM's winner is clear; then feed the VM's tokens back. `skip`: buffers the step does not
    write; `also`: buffers to compare besides BUFFERS; `kv_tolerance`: the caches' (the tensor-core attention's bf16
    products reach later layers' K and V)."""
    for step, plan in enumerate(plans):
        batch, seqs = scen.batch(plan)
        ref_logits = vm.forward(batch)
        vm_tokens = vm.last_tokens
        gpu_tokens = gpu.greedy(batch)
        vm_bufs, _ = vm.last_stream.backend_state
        for name in BUFFERS + also:
            if name in skip:  # e.g. attn_out, which the fused ATTN_O_PROJ never writes
                continue
            err = rel_err(gpu.last.acts[name], vm_bufs.get(name))
            assert err < tolerance(name), f"{label}: {name} differs (rel {err:.2e}) at step {step}"
        if check_kv:
            err = kv_err(gpu, vm)
            assert err < kv_tolerance, f"{label}: KV cache differs (rel {err:.2e}) at step {step}"
        clear = clear_winners(ref_logits)
        assert torch.equal(gpu_tokens.cpu()[clear], vm_tokens[clear]), f"{label}: greedy ids differ at step {step}"
        scen.feed(seqs, vm_tokens.tolist())


def small(hidden: int, heads: int, kv: int, hd: int, inter: int, layers: int, vocab: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, rope_theta=10000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=False)


NEAR_TIE = 0.125  # bf16 rounding of the reference's logits: a token this close to its max is a tie


def _reference_steps(weights: LlamaWeights, prompt: list[int], tokens: list[int],
                     page_size: int) -> Iterator[torch.Tensor]:
    """The torch reference's logits before each of `tokens`, teacher-forced on `prompt` + the tokens before it."""
    from engine.backends.torch_backend import TorchBackend
    from engine.bench.logprob_error import teacher_forced_logits

    pages = -(-(len(prompt) + len(tokens)) // page_size)
    backend = TorchBackend(weights, num_pages=pages, page_size=page_size, device=weights.device)
    return teacher_forced_logits(backend, prompt, tokens, page_size)


def follows_reference(weights: LlamaWeights, prompt: list[int], tokens: list[int], page_size: int = 16,
                      label: str = "") -> int:
    """Teacher-force the torch reference on `prompt` + `tokens`: asserts every token is within NEAR_TIE of the
    reference's max logit at its step (a step that read stale step args, activations or KV lands far from it)
    and returns how many are its exact argmax."""
    exact = 0
    for i, (logits, tok) in enumerate(zip(_reference_steps(weights, prompt, tokens, page_size), tokens)):
        gap = float(logits.max()) - float(logits[tok])
        assert gap <= NEAR_TIE, f"{label} step {i}: token {tok} is {gap:.3f} below the reference's max"
        exact += int(tok == int(logits.argmax()))
    return exact


def reference_logprobs(weights: LlamaWeights, prompt: list[int], tokens: list[int],
                       page_size: int = 16) -> torch.Tensor:
    """float64 [len(tokens), V]: the torch reference's log-softmax before each of `tokens`, teacher-forced."""
    return torch.stack([torch.log_softmax(logits.double(), dim=-1)
                        for logits in _reference_steps(weights, prompt, tokens, page_size)])
