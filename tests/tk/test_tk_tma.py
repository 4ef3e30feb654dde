"""GPU tests of csrc/tk TMA: 1-D bulk copies (all cache hints), bulk store-add, 2-D tensor-map
tiles through the 128-byte swizzle (load, store, store-add, out-of-bounds zero fill)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("hint", [0, 1, 2])
@pytest.mark.parametrize("nbytes", [16, 4096 + 48, 96 * 1024])
def test_bulk_copy(tk, hint: int, nbytes: int) -> None:
    src = torch.randint(0, 256, (nbytes,), device="cuda", dtype=torch.uint8)
    dst = torch.randint(0, 256, (nbytes + 64,), device="cuda", dtype=torch.uint8)
    tail = dst[nbytes:].clone()
    tk.bulk_copy(dst.data_ptr(), src.data_ptr(), nbytes, hint)
    assert torch.equal(dst[:nbytes], src)
    assert torch.equal(dst[nbytes:], tail)  # nothing written past the end


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bulk_store_add(tk, dtype: torch.dtype) -> None:
    n = 4096 + 8 * 16
    src = torch.randn(n, device="cuda").to(dtype)
    dst = torch.randn(n, device="cuda").to(dtype)
    expected = (dst.float() + src.float()).to(dtype)
    tk.bulk_store_add(dst.data_ptr(), src.data_ptr(), n, dtype == torch.bfloat16)
    if dtype == torch.float32:
        torch.testing.assert_close(dst, expected, rtol=0, atol=0)
    else:
        torch.testing.assert_close(dst.float(), expected.float(), rtol=8e-3, atol=8e-3)


CASES = [  # dtype, rows, cols, ld, tile row, tile col
    (torch.bfloat16, 256, 384, 400, 64, 128),
    (torch.bfloat16, 256, 384, 384, 131, 8),
    (torch.float32, 100, 200, 204, 33, 72),
]


@pytest.mark.parametrize("dtype,rows,cols,ld,row,col", CASES)
def test_tile_load_matches_swizzled_indexing(tk, dtype, rows, cols, ld, row, col) -> None:
    tr, tc = tk.TILE_BF16_SHAPE if dtype == torch.bfloat16 else tk.TILE_FP32_SHAPE
    full = torch.randn(rows, ld, device="cuda").to(dtype)
    out = torch.full((tr, tc), float("nan"), device="cuda").to(dtype)
    tk.tile_load(full.data_ptr(), rows, cols, ld, row, col, out.data_ptr(),
                 dtype == torch.bfloat16)
    assert torch.equal(out, full[row:row + tr, col:col + tc])


def test_tile_load_out_of_bounds_is_zero_filled(tk) -> None:
    rows, cols = 96, 192
    tr, tc = tk.TILE_BF16_SHAPE
    full = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
    out = torch.full((tr, tc), float("nan"), device="cuda").to(torch.bfloat16)
    row, col = rows - tr // 2, cols - tc // 2
    tk.tile_load(full.data_ptr(), rows, cols, cols, row, col, out.data_ptr(), True)
    expected = torch.zeros(tr, tc, device="cuda", dtype=torch.bfloat16)
    expected[: tr // 2, : tc // 2] = full[row:, col:]
    assert torch.equal(out, expected)


@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("dtype,rows,cols,ld,row,col", CASES)
def test_tile_store(tk, dtype, rows, cols, ld, row, col, add: bool) -> None:
    tr, tc = tk.TILE_BF16_SHAPE if dtype == torch.bfloat16 else tk.TILE_FP32_SHAPE
    full = torch.randn(rows, ld, device="cuda").to(dtype)
    before = full.clone()
    tile = torch.randn(tr, tc, device="cuda").to(dtype)
    tk.tile_store(full.data_ptr(), rows, cols, ld, row, col, tile.data_ptr(),
                  dtype == torch.bfloat16, add)
    expected = before.clone()
    region = expected[row:row + tr, col:col + tc]
    region.copy_((region.float() + tile.float()).to(dtype) if add else tile)
    tol = 8e-3 if (add and dtype == torch.bfloat16) else 0.0
    torch.testing.assert_close(full.float(), expected.float(), rtol=tol, atol=tol)
