"""GPU tests of csrc/tk tiles: swizzled shared tiles <-> register fragments (ldmatrix, .trans,
dtype conversion, subtile views) and the warp mma.sync products against torch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", [0, 1])
def test_bf16_roundtrip_row_and_col_layouts(tk, mode: int) -> None:
    r, c = tk.ROUNDTRIP_SHAPE
    src = torch.randn(r, c, device="cuda").to(torch.bfloat16)
    out = torch.full((r, c), float("nan"), device="cuda").to(torch.bfloat16)
    tk.tile_roundtrip(src.data_ptr(), out.data_ptr(), mode)
    assert torch.equal(out, src)


def test_bf16_tile_to_fp32_registers(tk) -> None:
    r, c = tk.ROUNDTRIP_SHAPE
    src = torch.randn(r, c, device="cuda").to(torch.bfloat16)
    out = torch.full((r, c), float("nan"), device="cuda")
    tk.tile_roundtrip(src.data_ptr(), out.data_ptr(), 2)
    assert torch.equal(out, src.float())


def test_fp32_tile_col_layout_apply_and_store(tk) -> None:
    r, c = tk.ROUNDTRIP_SHAPE
    src = torch.randn(r, c, device="cuda")
    out = torch.full((r, c), float("nan"), device="cuda")
    tk.tile_roundtrip(src.data_ptr(), out.data_ptr(), 3)
    assert torch.equal(out, 2 * src)


def test_subtile_view(tk) -> None:
    r, c = tk.ROUNDTRIP_SHAPE
    src = torch.randn(2 * r, 2 * c, device="cuda").to(torch.bfloat16)
    out = torch.full((r, c), float("nan"), device="cuda").to(torch.bfloat16)
    tk.tile_roundtrip(src.data_ptr(), out.data_ptr(), 4)
    assert torch.equal(out, src[r:, c:])


@pytest.mark.parametrize("transpose_b", [True, False])
def test_mma(tk, transpose_b: bool) -> None:
    m, n, k = tk.MMA_SHAPE
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b_shape = (n, k) if transpose_b else (k, n)
    b = torch.randn(*b_shape, device="cuda").to(torch.bfloat16)
    d = torch.randn(m, n, device="cuda")
    bt = b.float().T if transpose_b else b.float()
    expected = a.float() @ bt + d
    tk.mma(a.data_ptr(), b.data_ptr(), d.data_ptr(), transpose_b)
    torch.testing.assert_close(d, expected, rtol=1e-4, atol=1e-4)


def test_raw_fragment_mma(tk) -> None:
    """ldmatrix_x4_shared, load_shared_f2 and mma_16x8x16_acc on hand-built fragments (no tiles)."""
    a = torch.randn(16, 16, device="cuda").to(torch.bfloat16)
    bt = torch.randn(8, 16, device="cuda")
    d = torch.randn(16, 8, device="cuda")
    expected = a.float() @ bt.to(torch.bfloat16).float().T + d
    tk.raw_mma(a.data_ptr(), bt.data_ptr(), d.data_ptr())
    torch.testing.assert_close(d, expected, rtol=1e-4, atol=1e-4)
