"""Reductions over chosen axes (``keepdims`` as in NumPy): sum, mean, max, min, variance."""
from __future__ import annotations

import math

from .. import te
from ..errors import TEError
from ..ir.expr import const
from .elementwise import axis_index, element_count, opmath, rounded_to, shape_of


def _axes(x, axes, where):
    n = len(shape_of(x))
    if axes is None:
        return list(range(n))
    axes = [axes] if isinstance(axes, int) else list(axes)
    out = sorted({axis_index(a, n, where) for a in axes})
    if len(out) != len(axes):
        raise TEError(f"{where}: an axis is listed twice in {axes}")
    return out or list(range(n))


def reduce(x, reducer, axes=None, keepdims=False, name="reduce", scale=None, dtype=None):
    """``reducer`` (a te reducer: ``te.sum``, ``te.max``, ...) of *x* over *axes* (all when
    None), times *scale* if given, computed in *dtype* (*x*'s when None; each element is cast
    to it).  Reducing every axis without *keepdims* gives shape (1,) (PyTorch's 0-d scalar),
    as einloop has no 0-d tensors."""
    dtype = dtype or x.dtype
    shape = shape_of(x)
    axes = _axes(x, axes, name)
    if any(isinstance(shape[a], int) and shape[a] == 0 for a in axes):
        raise TEError(f"{name}: reducing over an empty dimension of {shape}")
    red = {a: te.reduce_axis((0, shape[a]), name=f"r{a}") for a in axes}
    out = tuple(1 if k in red else d for k, d in enumerate(shape) if keepdims or k not in red)
    # einloop tensors have at least one dimension: a reduction to a scalar (every axis, no
    # keepdims) is of shape (1,), whose one index the body does not read
    scalar = not out
    out = out or (1,)

    def body(*idx):
        it = iter(() if scalar else idx)
        at = []
        for k in range(len(shape)):
            if k in red:
                if keepdims:
                    next(it)
                at.append(red[k])
            else:
                at.append(next(it))
        v = reducer(x[tuple(at)].astype(dtype), axis=list(red.values()))
        return v if scale is None else v * const(scale, dtype)
    return te.compute(out, body, name=name)


def sum(x, axes=None, keepdims=False, name="sum"):                 # noqa: A001
    """The sum over *axes*, accumulated in float32 for float16 and bfloat16 (:func:`opmath`)
    and rounded once."""
    total = reduce(x, te.sum, axes, keepdims, name, dtype=opmath(x.dtype))
    return rounded_to(total, x.dtype, name)


def mean(x, axes=None, keepdims=False, name="mean"):
    return rounded_to(_mean(x, axes, keepdims, name), x.dtype, name)


def _mean(x, axes, keepdims, name):
    """The mean over *axes* in *x*'s :func:`opmath` dtype."""
    acc = opmath(x.dtype)
    n = element_count([shape_of(x)[a] for a in _axes(x, axes, name)], acc)
    total = reduce(x, te.sum, axes, keepdims, name + "_sum", dtype=acc)
    return te.compute(shape_of(total), lambda *i: total[i] / n, name=name)


def amax(x, axes=None, keepdims=False, name="amax"):
    return reduce(x, te.max, axes, keepdims, name)


def amin(x, axes=None, keepdims=False, name="amin"):
    return reduce(x, te.min, axes, keepdims, name)


def var(x, axes=None, correction=1, keepdims=False, name="var"):
    """The variance over *axes*, divided by ``n - correction`` (PyTorch's ``correction``)."""
    shape = shape_of(x)
    picked = _axes(x, axes, name)
    n = math.prod(shape[a] for a in picked)
    acc = opmath(x.dtype)
    mu = _mean(x, picked, True, name + "_mean")
    dev = te.compute(shape, lambda *i: _sq(x[i].astype(acc) - mu[tuple(
        0 if k in picked else v for k, v in enumerate(i))]), name=name + "_dev")
    total = reduce(dev, te.sum, picked, keepdims, name + "_sum")
    d = max(n - correction, 0)
    return te.compute(shape_of(total), lambda *i: (total[i] / const(d, acc)).astype(x.dtype),
                      name=name)


def _sq(v):
    return v * v
