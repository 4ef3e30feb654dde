"""The fp8 PyTorch baselines (bench --quantization fp8): torch._scaled_mm over e4m3 weights with channel scales and
e4m3 activations with per-token scales (engine/bench/fp8_linear.py), on the CPU."""
from __future__ import annotations

import torch

from engine.bench.baselines import compile_step, generate
from engine.bench.config import COMPILE_GRAPH, CUDA_GRAPH, EAGER, BenchConfig
from engine.bench.fp8_linear import fp8_matmul, quantize_rows
from engine.bench.harness import run_bench
from engine.bench.static_llama import StaticLlama
from models.llama.fp8 import FP8_DTYPE, Fp8Scheme, quantize_fp8
from models.llama.weights import LlamaWeights

NEW = 5


def test_fp8_matmul_matches_the_dequantised_product() -> None:
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(5, 96, generator=g), torch.randn(48, 96, generator=g)
    lin = quantize_fp8(w, Fp8Scheme("channel"))
    assert lin.data.dtype == FP8_DTYPE and lin.data.shape == (48, 96) and lin.scale.shape == (48,)
    assert lin.num_bytes() == 48 * 96 + 4 * 48
    xq, xs = quantize_rows(x)
    # both operands as _scaled_mm reads them
    want = (xq.float() * xs) @ (lin.data.float() * lin.scale.reshape(-1, 1)).T
    got = fp8_matmul(x, lin.data, lin.scale)
    assert got.dtype == x.dtype and got.shape == (5, 48)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
    exact = x @ w.T  # e4m3 on both sides: a few per cent of the largest output
    assert float((got - exact).abs().max()) < 0.1 * float(exact.abs().max())


def test_a_row_of_zeros_stays_zero() -> None:
    w = torch.randn(32, 64)
    lin = quantize_fp8(w, Fp8Scheme("channel"))
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    x[1] = torch.randn(64).to(torch.bfloat16)
    y = fp8_matmul(x, lin.data, lin.scale)
    assert y.dtype == torch.bfloat16 and bool(torch.isfinite(y).all()) and bool((y[0] == 0).all())


@torch.no_grad()
def test_fp8_static_llama_decodes_close_to_its_bf16_twin(tiny_weights: LlamaWeights) -> None:
    prompt = torch.randint(0, tiny_weights.config.vocab_size, (7,))
    exact, fp8 = StaticLlama(tiny_weights, 7 + NEW), StaticLlama(tiny_weights, 7 + NEW, fp8=True)
    assert fp8.layers[0].qkv.dtype == FP8_DTYPE and fp8.lm_head.dtype == FP8_DTYPE and not exact.fp8
    for model in (exact, fp8):
        model.reset()
        for t in prompt.tolist():
            model.token.fill_(t)
            model()
    a, b = exact.logits()[0], fp8.logits()[0]
    assert torch.nn.functional.cosine_similarity(a, b, dim=0) > 0.99
    tokens, spt = generate(fp8, fp8.forward, prompt, NEW)
    assert len(tokens) == NEW and spt > 0
    assert generate(fp8, fp8.forward, prompt, NEW)[0] == tokens  # the same buffers replayed: the same tokens


@torch.no_grad()
def test_fp8_step_compiles_as_one_graph(tiny_weights: LlamaWeights) -> None:
    torch._dynamo.reset()
    prompt = torch.randint(0, tiny_weights.config.vocab_size, (4,))
    eager, compiled_model = StaticLlama(tiny_weights, 4 + NEW, fp8=True), StaticLlama(tiny_weights, 4 + NEW, fp8=True)
    step = compile_step(compiled_model, mode="default", backend="aot_eager")
    assert generate(compiled_model, step, prompt, NEW)[0] == generate(eager, eager.forward, prompt, NEW)[0]
    torch._dynamo.reset()


def test_bench_quantization_fp8_runs_fp8_baselines(seed: int) -> None:
    config = BenchConfig(preset="tiny", prompt_len=5, new_tokens=3, dtype="float32", device="cpu", repeats=1,
                         seed=seed, bandwidth_bytes=1 << 20, quantization="fp8",
                         skip_baselines=(CUDA_GRAPH, COMPILE_GRAPH))
    result = run_bench(config, {})
    eager = result.row(EAGER)
    assert eager.status == "ok" and len(eager.tokens) == 3
    assert "_scaled_mm" in str(eager.notes["weights"])
