"""Normalisations: softmax, log-softmax, layer norm, RMS norm (over trailing or chosen axes),
each a few te stages the auto-scheduler fuses into passes over a row; and inference batch
norm, a per-channel affine map."""
from __future__ import annotations

from .. import te
from ..errors import TEError
from ..ir.expr import const
from .elementwise import axis_index, element_count, narrow, opmath, rounded_to, \
    same_shape, shape_of, wide
from .reduction import reduce


def _at(i, axis):
    """The index *i* with the reduced *axis* at 0 (a keepdims reduction's element)."""
    return tuple(0 if k == axis else v for k, v in enumerate(i))


def softmax(x, axis=-1, safe=False, name="softmax"):
    """``exp(x - max) / sum(exp(x - max))`` along *axis* (float16 and bfloat16 in float32,
    :func:`opmath`, rounded once).  *safe*: a row that is -inf throughout (attention fully
    masked) gives zeros rather than NaN, as PyTorch's ``_safe_softmax``."""
    shape = shape_of(x)
    axis = axis_index(axis, len(shape), name)
    m = reduce(x, te.max, [axis], True, name + "_max")
    e = te.compute(shape, lambda *i: te.exp(wide(x[i]) - wide(m[_at(i, axis)])),
                   name=name + "_exp")
    s = reduce(e, te.sum, [axis], True, name + "_sum")
    if not safe:
        return te.compute(shape, lambda *i: narrow(e[i] / s[_at(i, axis)], x.dtype), name=name)
    return te.compute(shape, lambda *i: te.if_then_else(
        m[_at(i, axis)] == const(float("-inf"), x.dtype), const(0.0, x.dtype),
        narrow(e[i] / s[_at(i, axis)], x.dtype)), name=name)


def log_softmax(x, axis=-1, name="log_softmax"):
    shape = shape_of(x)
    axis = axis_index(axis, len(shape), name)
    m = reduce(x, te.max, [axis], True, name + "_max")
    e = te.compute(shape, lambda *i: te.exp(wide(x[i]) - wide(m[_at(i, axis)])),
                   name=name + "_exp")
    s = reduce(e, te.sum, [axis], True, name + "_sum")
    return te.compute(shape, lambda *i: narrow(wide(x[i]) - wide(m[_at(i, axis)])
                                               - te.log(s[_at(i, axis)]), x.dtype), name=name)


def _normalised(x, n_axes, name, **params):
    """The shape, the normalised (last *n_axes*) axes and the keepdims-row index map of *x*;
    a ``TEError`` where *n_axes* is not 1 .. ndim (0 would reduce nothing, yet a reduction
    over no axes reduces them all) or a weight or bias in *params* is not of the trailing
    shape (a longer one would be read in part without a word)."""
    shape = shape_of(x)
    if not 1 <= n_axes <= len(shape):
        raise TEError(f"{name}: n_axes must be 1 .. {len(shape)} for the input {shape}, "
                      f"got {n_axes}")
    trail = shape[len(shape) - n_axes:]
    for what, t in params.items():
        if t is not None and not same_shape(shape_of(t), trail):
            raise TEError(f"{name}: {what} {shape_of(t)} does not fit the normalised "
                          f"dimensions {trail} of {shape}")
    axes = list(range(len(shape) - n_axes, len(shape)))
    lead = len(shape) - n_axes

    def row(i):
        return tuple(i[:lead]) + (0,) * n_axes
    return shape, axes, row


def layer_norm(x, n_axes=1, weight=None, bias=None, eps=1e-5, name="layer_norm",
               with_stats=False):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last *n_axes* dimensions
    (biased variance, as PyTorch's ``layer_norm``).  *with_stats*: ``(out, mean, rstd)``, the
    statistics with the normalised dimensions kept as 1 (what a backward pass reuses, as
    ATen's ``native_layer_norm`` returns them)."""
    shape, axes, row = _normalised(x, n_axes, name, weight=weight, bias=bias)
    acc = opmath(x.dtype)
    n = element_count([shape[a] for a in axes], acc)
    total = reduce(x, te.sum, axes, True, name + "_sum", dtype=acc)
    mu = te.compute(shape_of(total), lambda *i: total[i] / n, name=name + "_mean")
    sq = te.compute(shape, lambda *i: (wide(x[i]) - mu[row(i)]) * (wide(x[i]) - mu[row(i)]),
                    name=name + "_sq")
    var = reduce(sq, te.sum, axes, True, name + "_var")
    rstd = te.compute(shape_of(var), lambda *i: const(1.0, acc) / te.sqrt(
        var[i] / n + const(eps, acc)), name=name + "_rstd")
    out = _affine(x, shape, n_axes, lambda i: (wide(x[i]) - mu[row(i)]) * rstd[row(i)],
                  weight, bias, name)
    if not with_stats:
        return out
    return out, rounded_to(mu, x.dtype, mu.name), rounded_to(rstd, x.dtype, rstd.name)


def rms_norm(x, n_axes=1, weight=None, eps=1e-6, name="rms_norm"):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last *n_axes* dimensions."""
    shape, axes, row = _normalised(x, n_axes, name, weight=weight)
    acc = opmath(x.dtype)
    n = element_count([shape[a] for a in axes], acc)
    sq = te.compute(shape, lambda *i: wide(x[i]) * wide(x[i]), name=name + "_sq")
    ss = reduce(sq, te.sum, axes, True, name + "_ss")
    rstd = te.compute(shape_of(ss), lambda *i: const(1.0, acc) / te.sqrt(
        ss[i] / n + const(eps, acc)), name=name + "_rstd")
    return _affine(x, shape, n_axes, lambda i: wide(x[i]) * rstd[row(i)], weight, None, name)


def batch_norm(x, mean, var, weight=None, bias=None, eps=1e-5, axis=1, name="batch_norm"):
    """Inference batch norm, ``(x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]`` for
    the channel ``c`` along *axis*, computed as ``x * scale[c] + shift[c]``: the per-channel
    ``scale = weight / sqrt(var + eps)`` and ``shift = bias - mean * scale`` are stages of
    their own (in the :func:`opmath` dtype), so a square root and a division are paid once per
    channel, not once per element.  Of a model's statistics and parameters (constant
    placeholders) they are computed once, ahead of the calls, as a weight is packed: what
    graph compilers do when they fold batch norm into a multiply and an add."""
    shape = shape_of(x)
    axis = axis_index(axis, len(shape), name)
    channels = (shape[axis],)
    for what, t in (("mean", mean), ("var", var), ("weight", weight), ("bias", bias)):
        if t is not None and shape_of(t) != channels:
            raise TEError(f"{name}: {what} {shape_of(t)} does not fit: it takes one value per "
                          f"channel along axis {axis}, shape {channels}")
    acc = opmath(x.dtype)
    one = const(1.0, acc)
    scale = te.compute(channels, lambda c: (wide(weight[c]) if weight is not None else one)
                       / te.sqrt(wide(var[c]) + const(eps, acc)), name=name + "_scale")
    shift = te.compute(channels, lambda c: (wide(bias[c]) if bias is not None else
                                            const(0.0, acc)) - wide(mean[c]) * scale[c],
                       name=name + "_shift")
    return te.compute(shape, lambda *i: narrow(wide(x[i]) * scale[i[axis]] + shift[i[axis]],
                                               x.dtype), name=name)


def _affine(x, shape, n_axes, normed, weight, bias, name):
    """``normed(i) * weight + bias`` (each optional) in the :func:`opmath` dtype of *x*,
    rounded to *x*'s."""
    lead = len(shape) - n_axes

    def body(*i):
        v = normed(i)
        if weight is not None:
            v = v * wide(weight[i[lead:]])
        if bias is not None:
            v = v + wide(bias[i[lead:]])
        return narrow(v, x.dtype)
    return te.compute(shape, body, name=name)
