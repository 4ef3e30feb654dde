"""The fp8 PyTorch baselines (bench --quantization fp8): torch._scaled_mm over e4m3 weights with channel scales and
e4m3 activations with per-token scales (engine/bench/fp8_linear.py), on the CPU."""
from __future__ import annotations

import pytest
import torch

from engine.bench.baselines import compile_step, generate
from engine.bench.config import COMPILE_GRAPH, CUDA_GRAPH, EAGER, BenchConfig
from engine.bench import static_llama
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


def _emulated_fp8_matmul(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8_matmul's product in float arithmetic: the same quantised operands, dequantised and multiplied."""
    xq, xs = quantize_rows(x)
    out_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    return ((xq.float() * xs) @ (data.float() * scale.reshape(-1, 1)).T).to(out_dtype).to(x.dtype)


@torch.no_grad()
def test_fp8_static_llama_decodes_as_its_quantised_operands_do(tiny_weights: LlamaWeights,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = torch.randint(0, tiny_weights.config.vocab_size, (7,))
    exact, fp8 = StaticLlama(tiny_weights, 7 + NEW), StaticLlama(tiny_weights, 7 + NEW, fp8=True)
    assert fp8.layers[0].qkv.dtype == FP8_DTYPE and fp8.lm_head.dtype == FP8_DTYPE and not exact.fp8

    def prefill(model: StaticLlama) -> torch.Tensor:
        model.reset()
        for t in prompt.tolist():
            model.token.fill_(t)
            model()
        return model.logits()[0].clone()

    a, b = prefill(exact), prefill(fp8)
    with monkeypatch.context() as m:
        m.setattr(static_llama, "fp8_matmul", _emulated_fp8_matmul)
        emulated = prefill(fp8)
    cos = torch.nn.functional.cosine_similarity
    # _scaled_mm computes what its quantised operands give (only the order of the sums differs) ...
    assert cos(b, emulated, dim=0) > 0.999
    # ... and e4m3 on both operands stays near the exact model. Not tighter: per-token activation scales on a random
    # 256-wide model put its logits at cosine 0.84-0.91 from the fp32 twin's for about one seed in ten (0.996 typical).
    assert cos(a, b, dim=0) > 0.6
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
