"""GPU check of the other Llama shapes and of the timing-record overhead, in one process:
1. llama-3.2-3b and llama-3.1-8b (random bf16 weights): prefill + decode on the megakernel; the first
   decode step's logits vs the torch reference model on the same GPU.
2. llama-3.2-1b batch-1 decode (the bench protocol) with timing records off, then on.
Usage: python3 -m dev.shapes_and_overhead [--overhead-only]"""
from __future__ import annotations

import sys
import time

import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


@torch.inference_mode()
def check_shape(preset: str) -> bool:
    cfg = preset_config(preset)
    dev = torch.device("cuda")
    weights = random_weights(cfg, torch.bfloat16, dev, seed=0)
    table = list(range(4))
    mk = CudaBackend(weights, num_pages=4, page_size=PAGE_SIZE)
    prompt = list(range(100, 124))
    mk.prefill(prompt, table)
    step = StepBatch.build([[7]], [len(prompt)], [table], device=dev, page_size=PAGE_SIZE)
    mk_logits = mk.forward(step)[0]
    ref = LlamaModel(weights)
    kv = PagedKVCache.allocate(cfg, num_pages=4, page_size=PAGE_SIZE, dtype=torch.bfloat16, device=dev)
    ref.forward(StepBatch.build([prompt], [0], [table], device=dev, page_size=PAGE_SIZE), kv)
    ref_logits = ref.forward(step, kv)[0].float()
    diff = float((mk_logits - ref_logits).abs().max())
    t0 = time.perf_counter()
    tok = 7
    for i in range(16):
        tok = int(mk.greedy(StepBatch.build([[tok]], [len(prompt) + 1 + i], [table], device=dev,
                                            page_size=PAGE_SIZE))[0])
    ms = (time.perf_counter() - t0) / 16 * 1e3
    ok = diff < 0.5 and int(mk_logits.argmax()) == int(ref_logits.argmax())
    print(f"{preset}: max_tokens_per_step {mk.max_tokens_per_step}, first-decode max |logit diff| {diff:.3f}, "
          f"argmax equal {int(mk_logits.argmax()) == int(ref_logits.argmax())}, "
          f"host-synced decode {ms:.2f} ms/token -> {'OK' if ok else 'MISMATCH'}", flush=True)
    del mk, ref, kv, weights
    torch.cuda.empty_cache()
    return ok


def timing_overhead() -> None:
    cfg = preset_config("llama-3.2-1b")
    weights = random_weights(cfg, torch.bfloat16, torch.device("cuda"), seed=0)
    prompt = list(range(1, 33))
    pages = -(-(32 + 128) // PAGE_SIZE)
    for timing in (False, True, False, True):
        be = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE)
        be.timing = timing
        _tokens, sec = decode_on_device(be, prompt, 128)
        print(f"llama-3.2-1b decode, timing records {'on ' if timing else 'off'}: {sec * 1e3:.3f} ms/token", flush=True)


if __name__ == "__main__":
    # --overhead-only: skip the 3B/8B checks (part 2 alone)
    results = [] if "--overhead-only" in sys.argv else [check_shape(p) for p in ("llama-3.2-3b", "llama-3.1-8b")]
    timing_overhead()
    sys.exit(0 if all(results) else 1)
