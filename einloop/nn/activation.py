"""Activations and elementwise math: one te stage each, which the schedule fuses into its
producer or consumer."""
from __future__ import annotations

import math

from .. import te
from ..errors import TEError
from ..ir.expr import const
from .elementwise import narrow, unary, wide


def _c(v, x):
    return const(v, x.dtype)


def _opmath(fn):
    """*fn* of a value, computed in its :func:`~.elementwise.opmath` dtype and rounded once
    (a composite such as GELU would otherwise round every step in bfloat16)."""
    return lambda v: narrow(fn(wide(v)), v.dtype)


def relu(x, name="relu"):
    return unary(x, lambda v: te.maximum(v, _c(0.0, v)), name)


def gelu(x, approximate="none", name="gelu"):
    """GELU: ``x * Phi(x)`` with the error function, or its tanh approximation
    (``approximate="tanh"``), as PyTorch defines both."""
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return unary(x, _opmath(lambda v: _c(0.5, v) * v * (_c(1.0, v) + te.tanh(
            _c(k, v) * (v + _c(0.044715, v) * v * v * v)))), name)
    if approximate != "none":
        raise TEError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return unary(x, _opmath(lambda v: _c(0.5, v) * v * (_c(1.0, v) + te.erf(
        v * _c(math.sqrt(0.5), v)))), name)


def silu(x, name="silu"):
    return unary(x, _opmath(lambda v: v * te.sigmoid(v)), name)


def sigmoid(x, name="sigmoid"):
    return unary(x, te.sigmoid, name)


def tanh(x, name="tanh"):
    return unary(x, te.tanh, name)


def exp(x, name="exp"):
    return unary(x, te.exp, name)


def log(x, name="log"):
    return unary(x, te.log, name)


def sqrt(x, name="sqrt"):
    return unary(x, te.sqrt, name)


def rsqrt(x, name="rsqrt"):
    return unary(x, _opmath(lambda v: _c(1.0, v) / te.sqrt(v)), name)


def erf(x, name="erf"):
    return unary(x, te.erf, name)


def neg(x, name="neg"):
    return unary(x, lambda v: -v, name)


def abs(x, name="abs"):                                   # noqa: A001
    return unary(x, te.abs, name)
