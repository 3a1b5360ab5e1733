"""The chunked SSD scan against the obviously-right recurrence, token by token."""

import pytest
import torch

from runtime.mamba import segsum, ssm_chunked, ssm_step


def random_inputs(T, H=4, P=3, N=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, P, generator=g)
    dt = torch.nn.functional.softplus(torch.randn(T, H, generator=g))
    A = -torch.rand(H, generator=g) * 4
    B, C = torch.randn(T, H, N, generator=g), torch.randn(T, H, N, generator=g)
    D = torch.randn(H, generator=g)
    state = torch.randn(H, P, N, generator=g)
    return x, dt, A, B, C, D, state


@pytest.mark.parametrize("T,chunk", [(1, 4), (3, 4), (4, 4), (9, 4), (17, 8), (32, 8), (5, 128)])
def test_chunked_scan_equals_recurrence(T, chunk):
    x, dt, A, B, C, D, state = random_inputs(T)
    ref_state = state.clone()
    ref = torch.stack([ssm_step(x[t], dt[t], A, B[t], C[t], D, ref_state) for t in range(T)])
    got_state = state.clone()
    got = ssm_chunked(x, dt, A, B, C, D, got_state, chunk)
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert torch.allclose(got_state, ref_state, atol=1e-4, rtol=1e-4)


def test_segsum():
    v = torch.tensor([1.0, 2.0, 3.0])
    out = segsum(v)
    assert out[2, 0] == 5 and out[2, 2] == 0 and out[1, 0] == 2 and out[0, 1] == float("-inf")
