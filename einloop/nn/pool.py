"""Pooling over NCHW inputs: max and average windows, adaptive average."""
from __future__ import annotations

from .. import te
from ..errors import TEError
from ..ir.expr import const
from .conv import _per_dim
from .elementwise import narrow, shape_of, wide


def _window(x, kernel, stride, padding, dilation, ceil_mode, name):
    sx = shape_of(x)
    if len(sx) != 4:
        raise TEError(f"{name}: needs an NCHW input, got {sx}")
    kernel = _per_dim(kernel, 2, "kernel", name)
    stride = _per_dim(stride if stride else kernel, 2, "stride", name)
    padding = _per_dim(padding, 2, "padding", name)
    dilation = _per_dim(dilation, 2, "dilation", name)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise TEError(f"{name}: padding {padding} must be at most half the kernel {kernel}")
    out = []
    for d, k, s, p, dl in zip(sx[2:], kernel, stride, padding, dilation):
        span = d + 2 * p - dl * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= d + p:          # the last window must start inside
            o -= 1
        out.append(o)
    if min(out) < 1:
        raise TEError(f"{name}: the window {kernel} does not fit the input {sx[2:]}")
    return sx, kernel, stride, padding, dilation, tuple(out)


def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False,
               name="max_pool2d"):
    sx, kernel, stride, padding, dilation, out = _window(x, kernel, stride, padding, dilation,
                                                         ceil_mode, name)
    H, W = sx[2:]
    ry, rx = te.reduce_axis((0, kernel[0]), name="ry"), te.reduce_axis((0, kernel[1]), name="rx")

    def body(n, c, y, xx):
        h = y * stride[0] - padding[0] + ry * dilation[0]
        w = xx * stride[1] - padding[1] + rx * dilation[1]
        inside = te.all(h >= 0, h < H, w >= 0, w < W)
        return te.max(te.if_then_else(inside, x[n, c, h, w], const(float("-inf"), x.dtype)),
                      axis=[ry, rx])
    return te.compute(sx[:2] + out, body, name=name)


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, name="avg_pool2d"):
    sx, kernel, stride, padding, _, out = _window(x, kernel, stride, padding, 1, ceil_mode,
                                                  name)
    H, W = sx[2:]
    ry, rx = te.reduce_axis((0, kernel[0]), name="ry"), te.reduce_axis((0, kernel[1]), name="rx")

    def window(n, c, y, xx):
        h, w = y * stride[0] - padding[0] + ry, xx * stride[1] - padding[1] + rx
        inside = te.all(h >= 0, h < H, w >= 0, w < W)
        return te.sum(te.if_then_else(inside, wide(x[n, c, h, w]), 0.0), axis=[ry, rx])
    total = te.compute(sx[:2] + out, window, name=name + "_sum")
    acc = total.dtype

    def count(y, k, s, size, p):                        # PyTorch's divisor of a window
        start = y * s - p
        end = te.minimum(start + k, size + p)
        if not count_include_pad:
            start, end = te.maximum(start, 0), te.minimum(end, size)
        return (end - start).astype(acc)

    def body(n, c, y, xx):
        if divisor_override:
            return narrow(total[n, c, y, xx] / const(divisor_override, acc), x.dtype)
        dy = count(y, kernel[0], stride[0], H, padding[0])
        dx = count(xx, kernel[1], stride[1], W, padding[1])
        return narrow(total[n, c, y, xx] / (dy * dx), x.dtype)
    return te.compute(sx[:2] + out, body, name=name)


def adaptive_avg_pool2d(x, output_size, name="adaptive_avg_pool2d"):
    """The mean of window ``[floor(i*H/Ho), ceil((i+1)*H/Ho))`` for each output ``i`` (as
    PyTorch divides the input)."""
    sx = shape_of(x)
    if len(sx) != 4:
        raise TEError(f"{name}: needs an NCHW input, got {sx}")
    Ho, Wo = _per_dim(output_size, 2, "output size", name)
    H, W = sx[2:]
    # the largest window along each dimension bounds the reduction; shorter ones are guarded
    ky = max(-(-((i + 1) * H) // Ho) - (i * H) // Ho for i in range(Ho))
    kx = max(-(-((j + 1) * W) // Wo) - (j * W) // Wo for j in range(Wo))
    ry, rx = te.reduce_axis((0, ky), name="ry"), te.reduce_axis((0, kx), name="rx")

    def bounds(i, size, out):
        return (i * size) // out, ((i + 1) * size + out - 1) // out

    def window(n, c, y, xx):
        y0, y1 = bounds(y, H, Ho)
        x0, x1 = bounds(xx, W, Wo)
        inside = te.all(y0 + ry < y1, x0 + rx < x1)
        return te.sum(te.if_then_else(inside, wide(x[n, c, te.minimum(y0 + ry, H - 1),
                                                     te.minimum(x0 + rx, W - 1)]), 0.0),
                      axis=[ry, rx])
    total = te.compute(sx[:2] + (Ho, Wo), window, name=name + "_sum")

    def body(n, c, y, xx):
        y0, y1 = bounds(y, H, Ho)
        x0, x1 = bounds(xx, W, Wo)
        return narrow(total[n, c, y, xx] / ((y1 - y0) * (x1 - x0)).astype(total.dtype),
                      x.dtype)
    return te.compute(sx[:2] + (Ho, Wo), body, name=name)
