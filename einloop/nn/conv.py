"""Convolutions over channels-first inputs (NCL, NCHW, NCDHW): stride, zero padding,
dilation and groups, as PyTorch's ``convolution`` defines them."""
from __future__ import annotations

from .. import te
from ..errors import TEError
from .elementwise import narrow, rounded_to, shape_of, wide


def _per_dim(v, nd, what, name):
    v = (v,) * nd if isinstance(v, int) else tuple(int(e) for e in v)
    if len(v) == 1 and nd > 1:
        v = v * nd
    if len(v) != nd:
        raise TEError(f"{name}: {what} {v} does not fit {nd} spatial dimensions")
    return v


def pad(x, padding, name="pad"):
    """*x* with *padding* zeros before and after each spatial dimension (a guarded read)."""
    shape = shape_of(x)
    if not any(padding):
        return x
    out = shape[:2] + tuple(d + 2 * p for d, p in zip(shape[2:], padding))

    def body(n, c, *sp):
        inside = te.all(*[cond for s, p, d in zip(sp, padding, shape[2:])
                          for cond in (s >= p, s < d + p)])
        return te.if_then_else(inside, x[(n, c) + tuple(s - p for s, p in zip(sp, padding))],
                               0.0)
    return te.compute(out, body, name=name)


def conv(x, w, stride=1, padding=0, dilation=1, groups=1, bias=None, name="conv"):
    """``out[n, k, y...] = sum_{c, r...} x_padded[n, g*C/G + c, y*stride + r*dilation] *
    w[k, c, r...]`` with ``g = k // (K/G)``; *w* is (K, C/groups, kernel...).  float16 and
    bfloat16 operands are multiplied and summed in float32, the result rounded once."""
    sx, sw = shape_of(x), shape_of(w)
    nd = len(sx) - 2
    if nd < 1 or len(sw) != nd + 2:
        raise TEError(f"{name}: input {sx} and weight {sw} are not an N-C-spatial input and "
                      f"a K-C-kernel weight of the same rank")
    stride, padding, dilation = (_per_dim(v, nd, what, name) for v, what in
                                 ((stride, "stride"), (padding, "padding"),
                                  (dilation, "dilation")))
    N, C = sx[:2]
    K, Cg = sw[:2]
    if groups < 1 or C % groups or K % groups or Cg != C // groups:
        raise TEError(f"{name}: {groups} groups do not fit {C} input and {K} output channels "
                      f"with a weight of {Cg} channels per group")
    out_sp = tuple((d + 2 * p - dl * (r - 1) - 1) // s + 1
                   for d, p, dl, r, s in zip(sx[2:], padding, dilation, sw[2:], stride))
    if min(out_sp) < 1:
        raise TEError(f"{name}: the kernel {sw[2:]} (dilation {dilation}) is larger than the "
                      f"padded input {tuple(d + 2 * p for d, p in zip(sx[2:], padding))}")
    xp = pad(x, padding, name + "_pad")
    c = te.reduce_axis((0, Cg), name="c")
    rs = [te.reduce_axis((0, r), name=f"r{i}") for i, r in enumerate(sw[2:])]
    per_group = K // groups

    def body(n, k, *y):
        ch = c if groups == 1 else (k // per_group) * Cg + c
        at = tuple(yi * s + r * dl for yi, s, r, dl in zip(y, stride, rs, dilation))
        return te.sum(wide(xp[(n, ch) + at]) * wide(w[(k, c) + tuple(rs)]), axis=[c] + rs)
    out = te.compute((N, K) + out_sp, body, name=name)
    if bias is None:
        return rounded_to(out, x.dtype, name)
    if shape_of(bias) != (K,):
        raise TEError(f"{name}: bias {shape_of(bias)} does not fit {K} output channels")
    return te.compute(shape_of(out), lambda n, k, *y: narrow(out[(n, k) + y] + wide(bias[k]),
                                                             x.dtype), name=name + "_bias")


def conv1d(x, w, stride=1, padding=0, dilation=1, groups=1, bias=None, name="conv1d"):
    return conv(x, w, stride, padding, dilation, groups, bias, name)


def conv2d(x, w, stride=1, padding=0, dilation=1, groups=1, bias=None, name="conv2d"):
    return conv(x, w, stride, padding, dilation, groups, bias, name)
