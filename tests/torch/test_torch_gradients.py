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


def batch_matmul(a, b):
    bb, n, kk = a.shape
    k = te.reduce_axis((0, kk), name="k")
    return te.compute((bb, n, b.shape[2]), lambda z, i, j: te.sum(a[z, i, k] * b[z, k, j], axis=k),
                      name="bmm")


def log_softmax(x):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    m = te.compute((n,), lambda i: te.max(x[i, k], axis=k), name="m")
    k2 = te.reduce_axis((0, d), name="k2")
    s = te.compute((n,), lambda i: te.sum(te.exp(x[i, k2] - m[i]), axis=k2), name="s")
    return te.compute((n, d), lambda i, j: x[i, j] - m[i] - te.log(s[i]), name="ls")


def layer_norm(x, g, b):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    mean = te.compute((n,), lambda i: te.sum(x[i, k], axis=k) / d, name="mean")
    k2 = te.reduce_axis((0, d), name="k2")
    var = te.compute((n,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]), axis=k2)
                     / d, name="var")
    return te.compute((n, d), lambda i, j: (x[i, j] - mean[i]) / te.sqrt(var[i] + 1e-5) * g[j]
                      + b[j], name="ln")


def max_pool_2x2(x):
    n, c, h, w = x.shape
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    return te.compute((n, c, h // 2, w // 2), lambda a, ci, y, xx: te.max(
        x[a, ci, y * 2 + ry, xx * 2 + rx], axis=[ry, rx]), name="pool")


def avg_pool_3x3_pad1(x):
    n, c, h, w = x.shape
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    return te.compute((n, c, h, w), lambda a, ci, y, xx: te.sum(te.if_then_else(
        te.all(y + ry >= 1, y + ry < h + 1, xx + rx >= 1, xx + rx < w + 1),
        x[a, ci, te.max(te.min(y + ry - 1, h - 1), 0), te.max(te.min(xx + rx - 1, w - 1), 0)], 0.0),
        axis=[ry, rx]) / 9.0, name="avg")


def depthwise_conv(x, w):
    n, c, h, wd = x.shape
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    return te.compute((n, c, h - 2, wd - 2), lambda a, ci, y, xx: te.sum(
        x[a, ci, y + ry, xx + rx] * w[ci, ry, rx], axis=[ry, rx]), name="dw")


def small_attention(q, k, v):
    s, d = q.shape
    rd = te.reduce_axis((0, d), name="rd")
    sc = te.compute((s, s), lambda i, j: te.sum(q[i, rd] * k[j, rd], axis=rd) * 0.5, name="sc")
    rj = te.reduce_axis((0, s), name="rj")
    mx = te.compute((s,), lambda i: te.max(sc[i, rj], axis=rj), name="mx")
    e = te.compute((s, s), lambda i, j: te.exp(sc[i, j] - mx[i]), name="e")
    rj2 = te.reduce_axis((0, s), name="rj2")
    den = te.compute((s,), lambda i: te.sum(e[i, rj2], axis=rj2), name="den")
    rj3 = te.reduce_axis((0, s), name="rj3")
    return te.compute((s, d), lambda i, c: te.sum(e[i, rj3] * v[rj3, c], axis=rj3) / den[i],
                      name="att")


def strided_slice_sum(x):
    n, d = x.shape
    k = te.reduce_axis((0, n // 2), name="k")
    return te.compute((d // 2,), lambda j: te.sum(x[k * 2, j * 2 + 1], axis=k), name="ss")


def _eager_conv(x, w):
    return torch.nn.functional.conv2d(x, w, stride=2, padding=1)


CASES = [
    (rmsnorm, [(6, 8), (8,)], lambda x, w: x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * w),
    (matmul_bias_gelu, [(4, 5), (5, 3), (3,)],
     lambda x, w, b: torch.nn.functional.gelu(x @ w + b)),
    (softmax, [(3, 7)], lambda x: torch.softmax(x, 1)),
    (conv2d_stride2_pad1, [(1, 2, 5, 5), (3, 2, 3, 3)], _eager_conv),
    (silu_mul, [(4, 6), (4, 6)], lambda a, b: torch.nn.functional.silu(a) * b),
    (batch_matmul, [(2, 3, 4), (2, 4, 5)], torch.bmm),
    (log_softmax, [(3, 6)], lambda x: torch.log_softmax(x, 1)),
    (layer_norm, [(3, 8), (8,), (8,)],
     lambda x, g, b: torch.nn.functional.layer_norm(x, (8,), g, b, eps=1e-5)),
    (max_pool_2x2, [(1, 2, 4, 6)], lambda x: torch.nn.functional.max_pool2d(x, 2)),
    (avg_pool_3x3_pad1, [(1, 2, 4, 5)],
     lambda x: torch.nn.functional.avg_pool2d(x, 3, stride=1, padding=1)),
    (depthwise_conv, [(1, 3, 5, 6), (3, 3, 3)],
     lambda x, w: torch.nn.functional.conv2d(x, w[:, None], groups=3)),
    (small_attention, [(5, 4), (5, 4), (5, 4)],
     lambda q, k, v: torch.softmax(q @ k.T * 0.5, 1) @ v),
    (strided_slice_sum, [(6, 8)], lambda x: x[::2, 1::2].sum(0)),
]


@pytest.mark.parametrize("fn, shapes, eager", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradcheck_through_the_custom_op(fn, shapes, eager):
    op = _op(fn)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True) for s in shapes]
    assert torch.allclose(op(*args), eager(*args), atol=1e-10)
    assert torch.autograd.gradcheck(lambda *a: op(*a), args)
    torch.library.opcheck(op.torch_op, [a.detach().requires_grad_() for a in args])


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
