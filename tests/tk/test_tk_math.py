"""GPU tests of csrc/tk math: row reductions/broadcasts and softmax on register tiles, register
vectors, and the warp matvec (decode hot path) with weights in global or shared memory."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_row_reductions(tk, mode: int) -> None:
    r, c = tk.ROW_OPS_SHAPE
    src = torch.randn(r, c, device="cuda")
    out = torch.full((r,), float("nan"), device="cuda")
    tk.row_ops(src.data_ptr(), out.data_ptr(), mode)
    expected = {0: src.sum(1), 1: src.amax(1), 2: 2 * src.sum(1)}[mode]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_row_softmax(tk) -> None:
    r, c = tk.ROW_OPS_SHAPE
    src = 3 * torch.randn(r, c, device="cuda")
    out = torch.full((r, c), float("nan"), device="cuda")
    tk.row_ops(src.data_ptr(), out.data_ptr(), 3)
    torch.testing.assert_close(out, torch.softmax(src, dim=1), rtol=1e-4, atol=1e-6)


def test_mul_row(tk) -> None:
    r, c = tk.ROW_OPS_SHAPE
    src = torch.randn(r, c, device="cuda")
    out = torch.full((r, c), float("nan"), device="cuda")
    tk.row_ops(src.data_ptr(), out.data_ptr(), 4)
    torch.testing.assert_close(out, src * src.amax(1, keepdim=True))


def test_register_vector(tk) -> None:
    n = tk.RV_LENGTH
    src = torch.randn(n, device="cuda")
    out = torch.full((n + 2,), float("nan"), device="cuda")
    tk.rv_ops(src.data_ptr(), out.data_ptr())
    torch.testing.assert_close(out[0], src.sum(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(out[1], (src * src).sum(), rtol=1e-5, atol=1e-4)
    assert torch.equal(out[2:], src.to(torch.bfloat16).float())


@pytest.mark.parametrize("rows,k,ld", [(96, 2048, 2048), (64, 1000, 1008), (32, 8, 8)])
def test_matvec_global_weights(tk, rows: int, k: int, ld: int) -> None:
    w = torch.randn(rows, ld, device="cuda").to(torch.bfloat16)
    x = torch.randn(k, device="cuda")
    out = torch.full((rows,), float("nan"), device="cuda")
    tk.matvec(w.data_ptr(), rows, ld, x.data_ptr(), k, out.data_ptr(), False)
    expected = w[:, :k].double() @ x.double()
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows,k", [(64, 2048), (32, 3072)])
def test_matvec_shared_weights(tk, rows: int, k: int) -> None:
    w = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
    x = torch.randn(k, device="cuda")
    out = torch.full((rows,), float("nan"), device="cuda")
    tk.matvec(w.data_ptr(), rows, k, x.data_ptr(), k, out.data_ptr(), True)
    expected = w.double() @ x.double()
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-3)
