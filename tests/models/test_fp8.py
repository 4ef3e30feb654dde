"""FP8 matrices (models/llama/fp8.py): quantise / dequantise round trips and scale layouts, on fresh random inputs."""
from __future__ import annotations

import pytest
import torch

from models.llama.fp8 import FP8_DTYPE, FP8_MAX, Fp8Matrix, Fp8Scheme, quantize_fp8, scale_shape
from tests.models.llama_testlib import fresh_seed

# e4m3 keeps 3 mantissa bits: a rounding error of at most 2^-4 of the value, for values inside its normal range.
REL = 2.0 ** -4


def _matrix(rows: int, cols: int, g: torch.Generator) -> torch.Tensor:
    # rows of very different magnitudes: a per-tensor scale underflows the small ones, per-channel scales do not
    return torch.randn(rows, cols, generator=g) * torch.logspace(-3, 1, rows)[:, None]


@pytest.mark.parametrize("granularity", ["tensor", "channel", "block"])
@pytest.mark.parametrize("shape", [(64, 48), (300, 200), (1, 7)])
def test_round_trip_within_e4m3_rounding(granularity: str, shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(fresh_seed())
    w = _matrix(*shape, g)
    m = quantize_fp8(w, Fp8Scheme(granularity, (128, 64)))
    assert m.data.dtype == FP8_DTYPE and tuple(m.scale.shape) == scale_shape(shape, granularity, (128, 64))
    back = m.dequantize()
    # Each group's largest magnitude maps to 448 exactly-ish; no element saturates.
    assert float(m.data.float().abs().max()) <= FP8_MAX
    if granularity == "tensor":
        big = w.abs() > w.abs().max() * 2 ** -6  # below that, e4m3's subnormals lose relative precision
        assert torch.allclose(back[big], w[big], rtol=REL, atol=0)
    else:
        # per-channel and per-block scales keep every row's own range: the small rows stay accurate
        err = (back - w).abs()
        bound = REL * w.abs() + (m.row_scales() * 2.0 ** -9)  # the smallest subnormal step of each group
        assert bool((err <= bound + 1e-12).all()), float((err - bound).max())


def test_channel_scales_are_each_rows_max_over_448() -> None:
    w = torch.tensor([[1.0, -4.0, 2.0], [0.0, 0.0, 0.0], [896.0, 1.0, -3.0]])
    m = quantize_fp8(w)
    assert m.granularity == "channel"
    assert torch.equal(m.scale, torch.tensor([4.0 / 448, 1.0, 2.0]))  # a row of zeros gets scale 1
    assert torch.equal(m.data.float()[:, 0], torch.tensor([112.0, 0.0, 448.0]))


def test_block_scales_cover_ragged_edges() -> None:
    w = torch.zeros(5, 7)
    w[4, 6] = 8.0  # the last, partial block's only non-zero
    w[0, 0] = -2.0
    m = quantize_fp8(w, Fp8Scheme("block", (2, 3)))
    assert tuple(m.scale.shape) == (3, 3)
    want = torch.ones(3, 3)
    want[2, 2], want[0, 0] = 8.0 / 448, 2.0 / 448
    assert torch.equal(m.scale, want)
    assert torch.equal(m.dequantize(), w)  # powers of two: exact


def test_row_lookup_equals_full_dequantisation() -> None:
    g = torch.Generator().manual_seed(fresh_seed())
    for scheme in (Fp8Scheme("channel"), Fp8Scheme("block", (4, 8)), Fp8Scheme("tensor")):
        m = quantize_fp8(_matrix(37, 20, g), scheme)
        rows = torch.tensor([36, 0, 5, 5, 17])
        assert torch.equal(m.dequantize(torch.bfloat16, rows=rows), m.dequantize(torch.bfloat16)[rows])


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        quantize_fp8(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(ValueError, match="2-D float"):
        quantize_fp8(torch.ones(3, dtype=torch.float32))
    with pytest.raises(ValueError, match="granularity"):
        Fp8Scheme("row")
    with pytest.raises(ValueError, match=r"channel scale of a \[4, 3\] matrix must have shape \[4\]"):
        Fp8Matrix(torch.zeros(4, 3).to(FP8_DTYPE), torch.ones(3), "channel")
