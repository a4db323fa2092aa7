"""Gradients of einloop custom ops come from te.gradient: a zoo of operators as a user would
declare them, each checked through the registered operator with torch.autograd.gradcheck in
float64 (finite differences), torch.library.opcheck (forward and backward operators) and eager
PyTorch's forward; the gradient kernels each op builds are in gather form (tests/gather_form.py);
and torch.compile(fullgraph=True) of forward and backward equals eager."""
import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as fn

import einloop.torch as et
from ops import causal_multihead_attention
from einloop import lower, te
from einloop.ir import expr as E
from einloop.ir.stmt import Store
from einloop.ir.visit import walk_stmt
from einloop.te.dag import ComputeDAG
from einloop.te.tensor import PlaceholderOp
from einloop.torch.signature import DTYPES
import gather_form
from torch_ops import rmsnorm

_ids = itertools.count()


def _op(f):
    return et.custom_op(f"einloop_grad_test::{f.__name__}_{next(_ids)}")(f)


# -- the zoo: declarations ------------------------------------------------------------------------

def matmul(x, w):
    n, kk = x.shape
    k = te.reduce_axis((0, kk), name="k")
    return te.compute((n, w.shape[1]), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="mm")


def linear(x, w, b):
    """nn.Linear: x @ w.T + b, the weight read transposed."""
    n, kk = x.shape
    k = te.reduce_axis((0, kk), name="k")
    return te.compute((n, w.shape[0]), lambda i, o: te.sum(x[i, k] * w[o, k], axis=k) + b[o],
                      name="linear")


def matmul_bias_gelu(x, w, b):
    n, kk = x.shape
    k = te.reduce_axis((0, kk), name="k")
    h = te.compute((n, w.shape[1]), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k) + b[j],
                   name="h")
    return te.compute(h.shape, lambda i, j: 0.5 * h[i, j]
                      * (1.0 + te.erf(h[i, j] / math.sqrt(2.0))), name="g")


def gelu(x):
    return te.compute(x.shape, lambda i, j: 0.5 * x[i, j]
                      * (1.0 + te.erf(x[i, j] / math.sqrt(2.0))), name="gelu")


def gelu_tanh(x):
    c = math.sqrt(2.0 / math.pi)
    return te.compute(x.shape, lambda i, j: 0.5 * x[i, j] * (1.0 + te.tanh(
        c * (x[i, j] + 0.044715 * te.pow(x[i, j], 3.0)))), name="gelu_tanh")


def silu(x):
    return te.compute(x.shape, lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="silu")


def silu_mul(a, b):
    return te.compute(a.shape, lambda i, j: a[i, j] * te.sigmoid(a[i, j]) * b[i, j], name="sm")


def softplus(x):
    return te.compute(x.shape, lambda i, j: te.log(1.0 + te.exp(x[i, j])), name="softplus")


def softmax(x):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    m = te.compute((n,), lambda i: te.max(x[i, k], axis=k), name="m")
    e = te.compute((n, d), lambda i, j: te.exp(x[i, j] - m[i]), name="e")
    k2 = te.reduce_axis((0, d), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    return te.compute((n, d), lambda i, j: e[i, j] / s[i], name="p")


def causal_softmax(x):
    """Softmax over the keys at or before each query: the mask is an if_then_else."""
    n, d = x.shape
    masked = te.compute((n, d), lambda i, j: te.if_then_else(j <= i, x[i, j], -1e30),
                        name="masked")
    k = te.reduce_axis((0, d), name="k")
    m = te.compute((n,), lambda i: te.max(masked[i, k], axis=k), name="m")
    e = te.compute((n, d), lambda i, j: te.exp(masked[i, j] - m[i]), name="e")
    k2 = te.reduce_axis((0, d), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    return te.compute((n, d), lambda i, j: e[i, j] / s[i], name="p")


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


def batch_norm(x, g, b):
    """Training-mode batch norm: statistics reduced over the batch and both spatial axes."""
    n, c, h, w = x.shape
    count = n * h * w
    rn, rh, rw = (te.reduce_axis((0, e), name=nm) for e, nm in ((n, "rn"), (h, "rh"), (w, "rw")))
    mean = te.compute((c,), lambda ci: te.sum(x[rn, ci, rh, rw], axis=[rn, rh, rw]) / count,
                      name="mean")
    sn, sh, sw = (te.reduce_axis((0, e), name=nm) for e, nm in ((n, "sn"), (h, "sh"), (w, "sw")))
    var = te.compute((c,), lambda ci: te.sum(
        (x[sn, ci, sh, sw] - mean[ci]) * (x[sn, ci, sh, sw] - mean[ci]), axis=[sn, sh, sw])
        / count, name="var")
    return te.compute(x.shape, lambda a, ci, y, xx: (x[a, ci, y, xx] - mean[ci])
                      / te.sqrt(var[ci] + 1e-5) * g[ci] + b[ci], name="bn")


def group_norm_2_groups(x, g, b):
    """Group norm: each group's channels are read through a floor division (c // per_group)."""
    n, c, h, w = x.shape
    groups, per = 2, c // 2
    count = per * h * w
    rc, rh, rw = (te.reduce_axis((0, e), name=nm) for e, nm in ((per, "rc"), (h, "rh"), (w, "rw")))
    mean = te.compute((n, groups), lambda a, gi: te.sum(x[a, gi * per + rc, rh, rw],
                                                        axis=[rc, rh, rw]) / count, name="mean")
    sc, sh, sw = (te.reduce_axis((0, e), name=nm) for e, nm in ((per, "sc"), (h, "sh"), (w, "sw")))
    var = te.compute((n, groups), lambda a, gi: te.sum(
        (x[a, gi * per + sc, sh, sw] - mean[a, gi]) * (x[a, gi * per + sc, sh, sw] - mean[a, gi]),
        axis=[sc, sh, sw]) / count, name="var")
    return te.compute(x.shape, lambda a, ci, y, xx: (x[a, ci, y, xx] - mean[a, ci // per])
                      / te.sqrt(var[a, ci // per] + 1e-5) * g[ci] + b[ci], name="gn")


def l2_normalize(x):
    """F.normalize: each row divided by its norm, floored at eps (te.maximum)."""
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    ss = te.compute((n,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="ss")
    return te.compute(x.shape, lambda i, j: x[i, j] / te.maximum(te.sqrt(ss[i]), 1e-12),
                      name="l2n")


def conv2d_stride2_pad2_dilation2(x, w, bias):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    p = te.compute((n, c, h + 4, wd + 4), lambda b, ci, y, xx: te.if_then_else(
        te.all(y >= 2, y < h + 2, xx >= 2, xx < wd + 2), x[b, ci, y - 2, xx - 2], 0.0), name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    oh, ow = (h + 4 - 2 * (kh - 1) - 1) // 2 + 1, (wd + 4 - 2 * (kw - 1) - 1) // 2 + 1
    return te.compute((n, o, oh, ow), lambda b, f, y, xx: te.sum(
        p[b, rc, y * 2 + ry * 2, xx * 2 + rx * 2] * w[f, rc, ry, rx], axis=[rc, ry, rx])
        + bias[f], name="conv")


def depthwise_conv(x, w):
    n, c, h, wd = x.shape
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    return te.compute((n, c, h - 2, wd - 2), lambda a, ci, y, xx: te.sum(
        x[a, ci, y + ry, xx + rx] * w[ci, ry, rx], axis=[ry, rx]), name="dw")


def conv1d_same(x, w, b):
    """A 'same' 1-d convolution (kernel 3, padding 1) with a bias; the padding is a where=."""
    n, c, length = x.shape
    o, _, kk = w.shape
    rc = te.reduce_axis((0, c), name="rc")
    r = te.reduce_axis((0, kk), name="r")
    return te.compute((n, o, length), lambda a, f, t: te.sum(
        x[a, rc, t + r - 1] * w[f, rc, r], axis=[rc, r],
        where=te.all(t + r >= 1, t + r < length + 1)) + b[f], name="conv1d")


def conv_transpose1d_stride2(x, w):
    """ConvTranspose1d (stride 2): each output reads the input at (t - r) // 2 where the tap
    lands on an input point."""
    c, length = x.shape
    _, o, kk = w.shape
    rc = te.reduce_axis((0, c), name="rc")
    r = te.reduce_axis((0, kk), name="r")
    return te.compute((o, (length - 1) * 2 + kk), lambda f, t: te.sum(
        x[rc, (t - r) // 2] * w[rc, f, r], axis=[rc, r],
        where=te.all(t >= r, (t - r) % 2 == 0, t - r < 2 * length)), name="convT")


def max_pool_2x2(x):
    n, c, h, w = x.shape
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    return te.compute((n, c, h // 2, w // 2), lambda a, ci, y, xx: te.max(
        x[a, ci, y * 2 + ry, xx * 2 + rx], axis=[ry, rx]), name="pool")


def max_pool_3x3_stride2_pad1(x):
    """The ResNet stem's pool: the padding never wins (a where= on the window)."""
    n, c, h, w = x.shape
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    return te.compute((n, c, (h - 1) // 2 + 1, (w - 1) // 2 + 1), lambda a, ci, y, xx: te.max(
        x[a, ci, y * 2 + ry - 1, xx * 2 + rx - 1], axis=[ry, rx],
        where=te.all(y * 2 + ry >= 1, y * 2 + ry < h + 1, xx * 2 + rx >= 1, xx * 2 + rx < w + 1)),
        name="pool")


def avg_pool_3x3_pad1(x):
    n, c, h, w = x.shape
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    return te.compute((n, c, h, w), lambda a, ci, y, xx: te.sum(te.if_then_else(
        te.all(y + ry >= 1, y + ry < h + 1, xx + rx >= 1, xx + rx < w + 1),
        x[a, ci, te.max(te.min(y + ry - 1, h - 1), 0), te.max(te.min(xx + rx - 1, w - 1), 0)], 0.0),
        axis=[ry, rx]) / 9.0, name="avg")


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


def batch_matmul(a, b):
    bb, n, kk = a.shape
    k = te.reduce_axis((0, kk), name="k")
    return te.compute((bb, n, b.shape[2]), lambda z, i, j: te.sum(a[z, i, k] * b[z, k, j], axis=k),
                      name="bmm")


def bilinear(x1, w, x2):
    """nn.Bilinear without bias, as an einsum of three operands."""
    return te.einsum("bi,oij,bj->bo", x1, w, x2, name="bilinear")


def strided_slice_sum(x):
    n, d = x.shape
    k = te.reduce_axis((0, n // 2), name="k")
    return te.compute((d // 2,), lambda j: te.sum(x[k * 2, j * 2 + 1], axis=k), name="ss")


def flip_odd_columns(x):
    """A gather by an affine index: rows reversed, every other column from the second."""
    n, d = x.shape
    return te.compute((n, d // 2), lambda i, j: x[n - 1 - i, 2 * j + 1], name="flip")


def pad2d(x):
    """F.pad(x, (1, 2, 2, 1)): zeros around the image, by an if_then_else."""
    n, c, h, w = x.shape
    return te.compute((n, c, h + 3, w + 3), lambda a, ci, y, xx: te.if_then_else(
        te.all(y >= 2, y < h + 2, xx >= 1, xx < w + 1), x[a, ci, y - 2, xx - 1], 0.0), name="pad")


def upsample_nearest_2x(x):
    n, c, h, w = x.shape
    return te.compute((n, c, 2 * h, 2 * w), lambda a, ci, y, xx: x[a, ci, y // 2, xx // 2],
                      name="up")


def cumsum(x):
    _, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    return te.compute(x.shape, lambda i, j: te.sum(x[i, k], axis=k, where=k <= j), name="cumsum")


def row_prod(x):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    return te.compute((n,), lambda i: te.prod(x[i, k], axis=k), name="prod")


def row_min(x):
    n, d = x.shape
    k = te.reduce_axis((0, d), name="k")
    return te.compute((n,), lambda i: te.min(x[i, k], axis=k), name="amin")


def bce_with_logits(x, t):
    """The mean binary cross-entropy over every element, in the overflow-free form."""
    n, d = x.shape
    ri, rj = te.reduce_axis((0, n), name="ri"), te.reduce_axis((0, d), name="rj")
    return te.compute((1,), lambda z: te.sum(
        te.maximum(x[ri, rj], 0.0) - x[ri, rj] * t[ri, rj]
        + te.log(1.0 + te.exp(-te.abs(x[ri, rj]))), axis=[ri, rj]) / (n * d), name="bce")


def masked_scale(x, mask):
    """x times an integer mask cast to x's dtype (the mask gets no gradient)."""
    return te.compute(x.shape, lambda i, j: x[i, j] * mask[i, j].astype(x.dtype), name="ms")


def learnable_power(x, p):
    """x ** p with a per-column exponent: gradients for the base and the exponent."""
    return te.compute(x.shape, lambda i, j: te.pow(x[i, j], p[j]), name="pow")


# -- the zoo: cases -------------------------------------------------------------------------------

class Case(NamedTuple):
    fn: Callable        # the declaration
    kind: str           # which operator it is: the zoo counts distinct kinds
    inputs: list        # per input: a shape (standard normal float64) or a function of a Generator
    eager: Callable     # the same operator in eager PyTorch


def _positive(*shape):
    return lambda g: torch.rand(shape, dtype=torch.float64, generator=g) + 0.5


def _unit(*shape):
    return lambda g: torch.rand(shape, dtype=torch.float64, generator=g)


def _mask(*shape):
    return lambda g: torch.randint(0, 2, shape, dtype=torch.int32, generator=g)


def _causal(x):
    n, d = x.shape[-2:]
    return x.masked_fill(~torch.ones(n, d, dtype=torch.bool).tril(), -math.inf)


CASES = [
    Case(rmsnorm, "RMSNorm", [(6, 8), (8,)],
         lambda x, w: x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6) * w),
    Case(matmul, "matmul", [(4, 5), (5, 3)], torch.matmul),
    Case(linear, "linear (transposed matmul)", [(4, 5), (3, 5), (3,)], fn.linear),
    Case(batch_matmul, "batched matmul", [(2, 3, 4), (2, 4, 5)], torch.bmm),
    Case(bilinear, "bilinear form (te.einsum)", [(3, 4), (2, 4, 5), (3, 5)],
         lambda x1, w, x2: fn.bilinear(x1, x2, w)),
    Case(matmul_bias_gelu, "matmul + bias + GELU", [(4, 5), (5, 3), (3,)],
         lambda x, w, b: fn.gelu(x @ w + b)),
    Case(gelu, "GELU (erf)", [(3, 7)], fn.gelu),
    Case(gelu_tanh, "GELU (tanh approximation)", [(3, 7)],
         lambda x: fn.gelu(x, approximate="tanh")),
    Case(silu, "SiLU", [(3, 7)], fn.silu),
    Case(silu_mul, "SwiGLU gate", [(4, 6), (4, 6)], lambda a, b: fn.silu(a) * b),
    Case(softplus, "softplus", [(3, 7)], fn.softplus),
    Case(learnable_power, "power with a tensor exponent", [_positive(3, 4), (4,)],
         lambda x, p: x ** p),
    Case(softmax, "softmax", [(3, 7)], lambda x: torch.softmax(x, 1)),
    Case(causal_softmax, "causal-masked softmax", [(4, 6)],
         lambda x: torch.softmax(_causal(x), 1)),
    Case(log_softmax, "log-softmax", [(3, 6)], lambda x: torch.log_softmax(x, 1)),
    Case(layer_norm, "layer norm", [(3, 8), (8,), (8,)],
         lambda x, g, b: fn.layer_norm(x, (8,), g, b, eps=1e-5)),
    Case(batch_norm, "batch norm", [(2, 3, 3, 4), (3,), (3,)],
         lambda x, g, b: fn.batch_norm(x, None, None, g, b, training=True, eps=1e-5)),
    Case(group_norm_2_groups, "group norm", [(2, 4, 2, 3), (4,), (4,)],
         lambda x, g, b: fn.group_norm(x, 2, g, b, eps=1e-5)),
    Case(l2_normalize, "L2 normalize", [(3, 5)], lambda x: fn.normalize(x, dim=1)),
    Case(conv2d_stride2_pad2_dilation2, "conv2d (stride 2, padding, dilation)",
         [(1, 2, 7, 7), (3, 2, 3, 3), (3,)],
         lambda x, w, b: fn.conv2d(x, w, b, stride=2, padding=2, dilation=2)),
    Case(depthwise_conv, "depthwise conv", [(1, 3, 5, 6), (3, 3, 3)],
         lambda x, w: fn.conv2d(x, w[:, None], groups=3)),
    Case(conv1d_same, "conv1d", [(2, 3, 7), (4, 3, 3), (4,)],
         lambda x, w, b: fn.conv1d(x, w, b, padding=1)),
    Case(conv_transpose1d_stride2, "transposed conv1d", [(3, 5), (3, 2, 3)],
         lambda x, w: fn.conv_transpose1d(x[None], w, stride=2)[0]),
    Case(max_pool_2x2, "max-pool", [(1, 2, 4, 6)], lambda x: fn.max_pool2d(x, 2)),
    Case(max_pool_3x3_stride2_pad1, "max-pool", [(1, 2, 5, 6)],
         lambda x: fn.max_pool2d(x, 3, stride=2, padding=1)),
    Case(avg_pool_3x3_pad1, "avg-pool", [(1, 2, 4, 5)],
         lambda x: fn.avg_pool2d(x, 3, stride=1, padding=1)),
    Case(small_attention, "attention", [(5, 4), (5, 4), (5, 4)],
         lambda q, k, v: torch.softmax(q @ k.T * 0.5, 1) @ v),
    Case(causal_multihead_attention, "attention", [(2, 4, 3), (2, 4, 3), (2, 4, 3)],
         lambda q, k, v: fn.scaled_dot_product_attention(q, k, v, is_causal=True)),
    Case(strided_slice_sum, "strided slice + sum", [(6, 8)], lambda x: x[::2, 1::2].sum(0)),
    Case(flip_odd_columns, "gather by affine index", [(4, 6)], lambda x: x.flip(0)[:, 1::2]),
    Case(pad2d, "zero padding (if_then_else)", [(1, 2, 3, 4)], lambda x: fn.pad(x, (1, 2, 2, 1))),
    Case(upsample_nearest_2x, "nearest upsampling", [(1, 2, 2, 3)],
         lambda x: fn.interpolate(x, scale_factor=2, mode="nearest")),
    Case(cumsum, "cumulative sum", [(3, 5)], lambda x: torch.cumsum(x, 1)),
    Case(row_prod, "prod reduction", [(3, 5)], lambda x: torch.prod(x, 1)),
    Case(row_min, "min reduction", [(3, 5)], lambda x: torch.amin(x, 1)),
    Case(bce_with_logits, "binary cross-entropy loss", [(3, 4), _unit(3, 4)],
         lambda x, t: fn.binary_cross_entropy_with_logits(x, t).reshape(1)),
    Case(masked_scale, "cast of an integer mask", [(3, 4), _mask(3, 4)], lambda x, m: x * m),
]

#: the operators the issue names -> the kind of the zoo case that is it
ISSUE_LIST = {
    "matmul": "matmul", "batched matmul": "batched matmul",
    "conv2d (stride 2, padding, dilation)": "conv2d (stride 2, padding, dilation)",
    "depthwise conv": "depthwise conv", "max-pool": "max-pool", "avg-pool": "avg-pool",
    "softmax": "softmax", "log-softmax": "log-softmax", "layer norm": "layer norm",
    "RMSNorm": "RMSNorm", "GELU (erf)": "GELU (erf)", "SiLU": "SiLU", "attention": "attention",
    "a gather by affine index": "gather by affine index",
    "a reduction over several axes": "batch norm",
    "an operator with if_then_else padding": "zero padding (if_then_else)",
}


def _inputs(case, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for spec in case.inputs:
        t = spec(g) if callable(spec) else torch.randn(spec, dtype=torch.float64, generator=g)
        out.append(t.requires_grad_(t.is_floating_point()))
    return out


def _declare(case, args):
    """The case's output tensors, declared on placeholders shaped and typed like *args*."""
    placeholders = [te.placeholder(tuple(a.shape), DTYPES[a.dtype], f"in{i}")
                    for i, a in enumerate(args)]
    out = case.fn(*placeholders)
    return list(out) if isinstance(out, (tuple, list)) else [out]


_ID = [c.fn.__name__ for c in CASES]


def test_the_zoo_has_twenty_distinct_operators_and_the_issues_list():
    kinds = {c.kind for c in CASES}
    assert len(kinds) >= 20, sorted(kinds)
    assert set(ISSUE_LIST.values()) <= kinds
    declared = [ComputeDAG(_declare(c, _inputs(c))) for c in CASES]
    # no operator is in the zoo twice under two names
    assert len({d.structural_hash() for d in declared}) == len(CASES)
    # what the issue's words promise, in the declarations themselves
    by_name = dict(zip(_ID, declared))
    several = [op for op in by_name["batch_norm"].compute_ops if len(op.reduce_axis) >= 2]
    assert several, "batch norm reduces over several axes"
    pad = by_name["pad2d"].compute_ops[0]
    assert isinstance(pad.body, E.Select) and pad.body.true_value.tensor.name == "in0"


@pytest.mark.parametrize("case", CASES, ids=_ID)
def test_gradcheck_and_opcheck_through_the_custom_op(case):
    op = _op(case.fn)
    args = _inputs(case)
    torch.testing.assert_close(op(*args), case.eager(*args), rtol=1e-10, atol=1e-10)
    assert torch.autograd.gradcheck(op, args)
    fresh = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    torch.library.opcheck(op.torch_op, fresh)
    inputs = [a.detach() for a in args]
    torch.library.opcheck(op.training_op, inputs)
    outs, saved = op.training_op(*inputs)
    heads = [torch.randn_like(o) for o in outs if o.is_floating_point()]
    needed = [True for a in inputs if a.is_floating_point()]
    torch.library.opcheck(op.backward_op, (inputs, heads, [*outs, *saved], True, needed))
    torch.library.opcheck(op.backward_op, (inputs, heads, list(outs), False, needed))


@pytest.mark.parametrize("case", CASES, ids=_ID)
def test_every_gradient_kernel_of_the_zoo_is_in_gather_form(case):
    """The kernels the op's backward builds (the same declarations and schedules), lowered:
    each store at a point of its own loops, none shared between parallel iterations."""
    op = _op(case.fn)
    sig = op.signature(_inputs(case))
    kernels = [list(part.tensors) for saving in (True, False)
               for _, _, parts in op.backward_plan(sig, saving).entries for part in parts]
    assert kernels
    for tensors in kernels:
        func = lower(op.schedule(tensors), tensors)
        assert gather_form.problems(func) == []
        computed = {t.name for t in tensors if not isinstance(t.op, PlaceholderOp)}
        assert computed <= {s.buffer.name for s in walk_stmt(func.body) if isinstance(s, Store)}


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


def conv3x3_bias_relu(x, w, b):
    n, c, h, wd = x.shape
    p = te.compute((n, c, h + 2, wd + 2), lambda a, ci, y, xx: te.if_then_else(
        te.all(y >= 1, y < h + 1, xx >= 1, xx < wd + 1), x[a, ci, y - 1, xx - 1], 0.0),
        name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute((n, w.shape[0], h, wd), lambda a, f, y, xx: te.sum(
        p[a, rc, y + ry, xx + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return te.compute(conv.shape, lambda a, f, y, xx: te.max(conv[a, f, y, xx] + b[f], 0.0),
                      name="out")


def test_the_training_forward_saves_the_convolution_not_its_padded_input():
    """The padded input is read by the forward's convolution (saved) and by the weight
    gradient: the weight gradient's kernel computes it again, as the forward did, rather than
    the forward writing it out; the input gradient's padded copy of the output gradient is
    computed in that gradient's kernel too.  The gradients stay exact."""
    op = _op(conv3x3_bias_relu)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True)
            for s in [(1, 3, 6, 5), (4, 3, 3, 3), (4,)]]
    plan = op.backward_plan(op.signature(args), saving=True)
    assert [t.name for t in plan.saved] == ["conv"]
    reads = [{t.name for t in part.reads} for _, _, parts in plan.entries for part in parts]
    assert {"conv.grad.out", "x"} in reads                  # the weight gradient pads x itself
    written = {t.name for _, _, parts in plan.entries for part in parts for t in part.writes}
    assert not any(name.startswith("pad") or "extended" in name for name in written)
    assert torch.autograd.gradcheck(op, args)
