"""Built-in tuple reductions: ``te.argmax``/``te.argmin``, ``te.welford``, and
``te.min_value``/``max_value``.

``te.argmax(X, axis=1)`` returns the tensors ``(index, value)`` of NumPy's ``np.argmax`` and
``np.max`` along that axis: ties go to the first index and a NaN wins (``np.argmax`` returns the
first NaN's index, ``np.max`` is NaN).  The combine decides by value and then by index, never
by which operand came first, so it is commutative as ``rfactor`` and vector lanes need: the
partial results of any split of the axis combine to the same answer.  The index identity is the
largest index value, so that a real element wins a tie with it (an all ``-inf`` row gives 0).

``te.welford(X, axis=1)`` returns the mean and the (population) variance along that axis in one
pass, as a tuple reduction of (count, mean, M2) summaries merged by Chan et al.'s formula: no
cancellation where the mean is large against the spread, as in ``E[x^2] - E[x]^2``.
"""
from __future__ import annotations

from ..errors import TEError
from ..ir import dtypes
from ..ir.expr import Binary, BinOp, Select, const
from .compute import compute
from .reduce import CommReducer, register_builtin
from .tensor import Tensor, reduce_axis


def min_value(dtype):
    """The smallest value of *dtype*: ``-inf`` for a float (the identity of max), the minimum
    of an integer type (TVM's ``min_value`` gives the lowest finite float instead)."""
    dtype = dtypes.canonical(dtype, "te.min_value")
    return const(float("-inf") if dtypes.is_float(dtype) else dtypes.int_range(dtype)[0], dtype)


def max_value(dtype):
    """The largest value of *dtype*: ``inf`` for a float, the maximum of an integer type."""
    dtype = dtypes.canonical(dtype, "te.max_value")
    return const(float("inf") if dtypes.is_float(dtype) else dtypes.int_range(dtype)[1], dtype)


def _first_wins(x, y, better):
    """Whether the pair *x* = (index, value) wins over *y*: a strictly better value, an equal
    value at a smaller index, or a NaN (the first NaN, between two).  The value comparisons are
    ordered (false when either side is NaN), so the NaN cases need one more term only; the
    comparisons against the accumulator, on the loop-carried path, are few."""
    (i, v), (j, w) = x, y
    earlier = i < j
    by_value = better(v, w) | ((v == w) & earlier)
    if not dtypes.is_float(v.dtype):
        return by_value
    v_nan, w_number = v != v, w == w       # '!=' is unordered, '==' ordered: NaN tests
    return by_value | (v_nan & (w_number | earlier))


def _arg_combine(better):
    def combine(x, y):
        take = _first_wins(x, y, better)
        return (Select(take, x[0], y[0], x[0].dtype), Select(take, x[1], y[1], x[1].dtype))
    return combine


def _argmax_combine(x, y):
    return _arg_combine(lambda v, w: v > w)(x, y)


def _argmin_combine(x, y):
    return _arg_combine(lambda v, w: v < w)(x, y)


def _argmax_identity(index_dtype, value_dtype):
    return max_value(index_dtype), min_value(value_dtype)


def _argmin_identity(index_dtype, value_dtype):
    return max_value(index_dtype), max_value(value_dtype)


argmax_reducer = register_builtin(CommReducer("argmax", _argmax_combine, _argmax_identity))
argmin_reducer = register_builtin(CommReducer("argmin", _argmin_combine, _argmin_identity))


def argmax(x, axis, dtype="int64", name=None):
    """The ``(index, value)`` tensors of the largest element of *x* along *axis*, as NumPy's
    ``np.argmax`` and ``np.max`` (first index on ties, NaN wins).  *dtype* is the index's:
    ``int64`` (NumPy's) by default, or ``int32``.  The result drops *axis* (a 1-D *x* gives
    shape ``(1,)``)."""
    return _arg_reduce(argmax_reducer, x, axis, dtype, name or f"{_name(x)}.argmax")


def argmin(x, axis, dtype="int64", name=None):
    """The ``(index, value)`` tensors of the smallest element of *x* along *axis*, as
    ``np.argmin`` and ``np.min``; see :func:`argmax`."""
    return _arg_reduce(argmin_reducer, x, axis, dtype, name or f"{_name(x)}.argmin")


def _name(x):
    return getattr(x, "name", "x")


def _arg_reduce(reducer, x, axis, dtype, name):
    where = f"te.{reducer.name}"
    axis = _check_axis(where, x, axis)
    dtype = dtypes.canonical(dtype, where)
    if dtype not in ("int32", "int64"):
        raise TEError(f"{where}({x.name}): the index dtype must be int32 or int64, got {dtype}")
    if x.dtype == dtypes.BOOL:
        raise TEError(f"{where}({x.name}): cannot compare boolean values; cast it first")
    return _reduce_along(x, axis, name,
                         lambda k, value: reducer((k.var.astype(dtype), value), axis=k))


def _check_axis(where, x, axis):
    """*axis* of tensor *x* as a non-negative int, or a TEError."""
    if not isinstance(x, Tensor):
        raise TEError(f"{where}: expected a tensor, got {x!r}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise TEError(f"{where}({x.name}): axis must be an integer in {-x.ndim}..{x.ndim - 1} "
                      f"for a tensor of shape {x.shape}, got {axis!r}")
    return axis % x.ndim


def _reduce_along(x, axis, name, reduction):
    """The compute *name* over *x*'s shape without *axis* (``(1,)`` for a vector) whose body is
    ``reduction(k, x[..., k, ...])``, k a reduce axis over *axis*."""
    k = reduce_axis((0, x.shape[axis]), name="k")
    shape = tuple(d for n, d in enumerate(x.shape) if n != axis) or (1,)
    keep = [n for n in range(x.ndim) if n != axis]

    def body(*ix):
        at = [None] * x.ndim
        for n, v in zip(keep, ix):
            at[n] = v
        at[axis] = k.var
        return reduction(k, x[tuple(at)])

    return compute(shape, body if keep else (lambda i: body()), name=name)


def _welford_combine(a, b):
    """Merge two (count, mean, M2) summaries; a zero count merges as nothing (no 0 / 0)."""
    n = a[0] + b[0]
    delta = b[1] - a[1]
    share = b[0] / Binary(BinOp.MAX, n, const(1, n.dtype), n.dtype)
    return n, a[1] + delta * share, a[2] + b[2] + delta * delta * a[0] * share


def _welford_identity(count_dtype, mean_dtype, m2_dtype):
    return 0, 0, 0


welford_reducer = register_builtin(CommReducer("welford", _welford_combine, _welford_identity))


def welford(x, axis, name=None):
    """The ``(mean, variance)`` tensors of *x* (a float tensor) along *axis*, as ``np.mean``
    and ``np.var`` (the population variance, ``ddof=0``), in one pass by Welford's method:
    accurate where the mean is large against the spread.  The reduction stage ``<name>``
    computes (count, mean, M2); the variance is ``M2 / count``, a stage ``<name>.var``."""
    where = "te.welford"
    name = name or f"{_name(x)}.welford"
    axis = _check_axis(where, x, axis)
    if not dtypes.is_float(x.dtype):
        raise TEError(f"{where}({x.name}): the mean and variance of {x.dtype} values are "
                      "fractions; cast the tensor to a float dtype first")
    one, zero = const(1, x.dtype), const(0, x.dtype)
    count, mean, m2 = _reduce_along(x, axis, name, lambda k, value: welford_reducer(
        (one, value, zero), axis=k))
    var = compute(mean.shape, lambda *ix: m2[ix] / count[ix], name=f"{name}.var")
    return mean, var
