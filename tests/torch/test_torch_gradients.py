"""Gradients of einloop custom ops come from te.gradient: torch.autograd.gradcheck in float64
(finite differences) through the registered operator, for operators of several kinds, and
torch.compile(fullgraph=True) of forward and backward equal to eager."""
import itertools

import pytest
import torch

import einloop.torch as et
from einloop import te
from torch_ops import rmsnorm

_ids = itertools.count()


def _op(fn):
    return et.custom_op(f"einloop_grad_test::{fn.__name__}_{next(_ids)}")(fn)


def matmul_bias_gelu(x, w, b):
    n, kk = x.shape
    k = te.reduce_axis((0, kk), name="k")
    h = te.compute((n, w.shape[1]), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k) + b[j],
                   name="h")
    return te.compute(h.shape, lambda i, j: 0.5 * h[i, j] * (1.0 + te.erf(h[i, j] * 0.7071067811865476)),
                      name="g")


def softmax(x):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    m = te.compute((n,), lambda i: te.max(x[i, k], axis=k), name="m")
    e = te.compute((n, d), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    k2 = te.reduce_axis((0, d), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    return te.compute((n, d), lambda i, j: e[i, j] / s[i], name="p")


def conv2d_stride2_pad1(x, w):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    p = te.compute((n, c, h + 2, wd + 2),
                   lambda b, ci, y, xx: te.if_then_else(
                       te.all(y >= 1, y < h + 1, xx >= 1, xx < wd + 1), x[b, ci, y - 1, xx - 1], 0.0),
                   name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    oh, ow = (h + 2 - kh) // 2 + 1, (wd + 2 - kw) // 2 + 1
    return te.compute((n, o, oh, ow), lambda b, f, y, xx: te.sum(
        p[b, rc, y * 2 + ry, xx * 2 + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")


def silu_mul(a, b):
    return te.compute(a.shape, lambda i, j: a[i, j] * te.sigmoid(a[i, j]) * b[i, j], name="sm")


def _eager_conv(x, w):
    return torch.nn.functional.conv2d(x, w, stride=2, padding=1)


CASES = [
    (rmsnorm, [(6, 8), (8,)], lambda x, w: x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * w),
    (matmul_bias_gelu, [(4, 5), (5, 3), (3,)],
     lambda x, w, b: torch.nn.functional.gelu(x @ w + b)),
    (softmax, [(3, 7)], lambda x: torch.softmax(x, 1)),
    (conv2d_stride2_pad1, [(1, 2, 5, 5), (3, 2, 3, 3)], _eager_conv),
    (silu_mul, [(4, 6), (4, 6)], lambda a, b: torch.nn.functional.silu(a) * b),
]


@pytest.mark.parametrize("fn, shapes, eager", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradcheck_through_the_custom_op(fn, shapes, eager):
    op = _op(fn)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True) for s in shapes]
    assert torch.allclose(op(*args), eager(*args), atol=1e-10)
    assert torch.autograd.gradcheck(lambda *a: op(*a), args)


def test_compiled_forward_and_backward_equal_eager():
    norm, act = _op(rmsnorm), _op(silu_mul)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(32))

        def forward(self, x, gate):
            return act(norm(x, self.w), gate).sum()

    m = Block()
    x, gate = torch.randn(16, 32, requires_grad=True), torch.randn(16, 32, requires_grad=True)
    eager = m(x, gate)
    want = torch.autograd.grad(eager, (x, gate, m.w))
    compiled = torch.compile(m, fullgraph=True)(x, gate)
    got = torch.autograd.grad(compiled, (x, gate, m.w))
    assert torch.allclose(eager, compiled, rtol=1e-4, atol=1e-4)
    for a, b in zip(want, got):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4)
