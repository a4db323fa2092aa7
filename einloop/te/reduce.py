"""Commutative reducers: ``te.sum``, ``te.max``, ``te.min`` and user-defined ones."""
from __future__ import annotations

from ..errors import TEError
from ..ir import dtypes
from ..ir.expr import Expr, Var, Reduce, as_expr, const
from .tensor import IterVar, IterKind
from .tuple_reduce import tuple_reduce


class CommReducer:
    """A commutative, associative reducer: ``combine(x, y)`` with identity element ``identity``.

    Calling it, ``reducer(expr, axis=k)``, builds a reduction of *expr* over the axes *k*.
    """

    def __init__(self, name, combine, identity):
        self.name = name
        self._combine = combine
        self._identity = identity

    def identity(self, dtype) -> Expr:
        v = self._identity(dtype)
        return v if isinstance(v, Expr) else const(v, dtype)

    def combine(self, x: Expr, y: Expr) -> Expr:
        out = as_expr(self._combine(x, y))
        if out.dtype != x.dtype:
            raise TEError(f"reducer {self.name}: combine returned dtype {out.dtype} for "
                          f"{x.dtype} operands; it must keep the dtype")
        return out

    def __call__(self, source, axis=None, where=None) -> Reduce:
        """A reduction of *source* over *axis*; a tuple *source* (for a reducer whose functions
        take tuples, such as argmax) gives a tuple of reductions, one per component, that
        ``te.compute`` computes together (see :mod:`einloop.te.tuple_reduce`)."""
        if axis is None:
            raise TEError(f"te.{self.name}(...) needs axis=: the reduce axis (or list of them) to "
                          f"reduce over, e.g. te.{self.name}(A[i, k], axis=k)")
        axes = self._check_axes(axis)
        if where is not None:
            where = as_expr(where)
            if where.dtype != dtypes.BOOL:
                raise TEError(f"te.{self.name}: where= must be a condition, got {where.dtype}")
        if isinstance(source, (tuple, list)):
            return tuple_reduce(self, source, axes, where)
        source = as_expr(source)
        if source.dtype == dtypes.BOOL:
            raise TEError(f"te.{self.name}: cannot reduce a boolean expression {source}; "
                          "cast it with .astype('int32') first")
        # check the combiner on symbolic operands once, so errors surface at declaration
        x, y = Var("x", source.dtype), Var("y", source.dtype)
        try:
            out = self._combine(x, y)
            if isinstance(out, (tuple, list)):
                raise TEError(f"reducer {self.name}: fcombine returned {len(out)} values for "
                              "single values; a reducer of one value returns one (reduce a "
                              "tuple of values, reducer((a, b), axis=k), for a tuple reducer)")
            self.combine(x, y)
            self.identity(source.dtype)
        except TEError:
            raise
        except Exception as exc:          # the user's functions failed: say which reducer
            raise TEError(f"reducer {self.name}: its combine(x, y) or identity(dtype) failed on "
                          f"{source.dtype} operands: {type(exc).__name__}: {exc}") from None
        return Reduce(self, source, axes, where, source.dtype)

    def _check_axes(self, axis) -> tuple:
        """*axis* (one reduce axis or a list of them) as a non-empty tuple of reduce axes."""
        axes = axis if isinstance(axis, (list, tuple)) else [axis]
        if not axes:
            raise TEError(f"te.{self.name}: axis= is empty; give the reduce_axis (or list of them) "
                          "to reduce over")
        for a in axes:
            if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
                raise TEError(f"te.{self.name}: axis {a!r} is not a reduction axis; create it "
                              "with te.reduce_axis((0, n), name='k')")
        if len(set(map(id, axes))) != len(axes):
            raise TEError(f"te.{self.name}: an axis is listed twice in axis={axes}")
        return tuple(axes)

    def __reduce__(self):
        """Pickle a built-in reducer by name (its functions are lambdas) and a user's by its
        functions, which must then be importable: build workers unpickle the operator."""
        if _BUILTIN.get(self.name) is self:
            return _builtin_reducer, (self.name,)
        for fn in (self._combine, self._identity):
            qual = getattr(fn, "__qualname__", "")
            if "<lambda>" in qual or "<locals>" in qual or getattr(fn, "__module__", None) == "__main__":
                raise TEError(
                    f"reducer {self.name!r} cannot be sent to another process: its function "
                    f"{qual or fn!r} is a lambda, a local function or defined in the main script. "
                    "Define fcombine and fidentity as module-level functions of an importable "
                    "module, or declare the operator in a module function and tune that "
                    "(autotune.create_task(fn, args))")
        return type(self), (self.name, self._combine, self._identity)

    def __repr__(self):
        return f"CommReducer({self.name})"


def comm_reducer(fcombine, fidentity, name="reduce") -> CommReducer:
    """A user-defined commutative reducer, as TVM's ``te.comm_reducer``.

    ``fcombine(x, y)`` returns an expression; ``fidentity(dtype)`` returns the identity element
    (a Python number or an expression).  Commutativity and associativity are the user's promise.

    A tuple reducer reduces several values at once: called on a tuple,
    ``reducer((a, b), axis=k)``, ``fcombine`` takes two tuples (the accumulated values and the
    new ones) and returns a tuple, and ``fidentity`` takes one dtype per component and returns
    one identity per component (TVM's API); see :mod:`einloop.te.tuple_reduce`.
    """
    if not callable(fcombine) or not callable(fidentity):
        raise TEError("comm_reducer(fcombine, fidentity): both arguments must be callables")
    import inspect
    try:
        n = len(inspect.signature(fcombine).parameters)
    except (TypeError, ValueError):
        n = 2
    if n != 2:
        raise TEError(f"comm_reducer {name!r}: fcombine takes {n} argument(s); it must take two, "
                      "the accumulated value and the new one: lambda x, y: ...")
    return CommReducer(name, fcombine, fidentity)


def _lowest(dtype):
    import numpy as np
    return float("-inf") if dtypes.is_float(dtype) else int(np.iinfo(dtype).min)


def _highest(dtype):
    import numpy as np
    return float("inf") if dtypes.is_float(dtype) else int(np.iinfo(dtype).max)


def _max(x, y):
    from ..ir.expr import Binary, BinOp
    return Binary(BinOp.MAX, x, y, x.dtype)


def _min(x, y):
    from ..ir.expr import Binary, BinOp
    return Binary(BinOp.MIN, x, y, x.dtype)


sum = CommReducer("sum", lambda x, y: x + y, lambda dt: 0)        # noqa: A001
class _ExtremumReducer(CommReducer):
    """``te.max(expr, axis=k)`` reduces; ``te.max(a, b)`` is the elementwise maximum."""

    def __call__(self, source, other=None, axis=None, where=None):
        if axis is None and other is not None and not _is_reduce_axes(other):
            from ..ir.expr import _unify
            a, b = _unify(self.name, source, other)
            return self._combine(a, b)
        if axis is None:
            axis = other
        if axis is None:
            raise TEError(f"te.{self.name} needs axis= to reduce, or two operands for the "
                          f"elementwise {self.name}")
        return super().__call__(source, axis, where)


def _is_reduce_axes(x):
    """Is *x* what ``axis=`` takes (a reduce axis or a list of them)?  A data axis is a value."""
    if isinstance(x, (list, tuple)):
        return True
    return isinstance(x, IterVar) and x.kind is IterKind.REDUCE


max = _ExtremumReducer("max", _max, _lowest)                       # noqa: A001
min = _ExtremumReducer("min", _min, _highest)                      # noqa: A001
prod = CommReducer("prod", lambda x, y: x * y, lambda dt: 1)

_BUILTIN = {r.name: r for r in (sum, max, min, prod)}


def register_builtin(reducer):
    """Make *reducer* (of an einloop module) pickle by name, like ``te.sum``; returns it."""
    _BUILTIN[reducer.name] = reducer
    return reducer


def _builtin_reducer(name):
    """The built-in reducer *name* (how a pickled one comes back)."""
    return _BUILTIN[name]
