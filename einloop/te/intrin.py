"""Math intrinsics, conditionals and casts usable inside compute expressions."""
from __future__ import annotations

from functools import reduce as _fold

from ..errors import TEError
from ..ir import dtypes
from ..ir.expr import Expr, Call, Select, Logical, LogicOp, as_expr, const, _unify

FLOAT_ONLY = ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "pow", "floor", "ceil")


def _call(name, *args):
    # unify before wrapping: a Python literal takes the dtype of the expression it meets
    args = list(_unify(name, *args)) if len(args) == 2 else [as_expr(a) for a in args]
    x = args[0]
    if name in FLOAT_ONLY and not dtypes.is_float(x.dtype):
        raise TEError(f"te.{name}({x}): {name} needs a float argument, got {x.dtype}; "
                      f"cast with .astype('float32')")
    if x.dtype == dtypes.BOOL:
        raise TEError(f"te.{name}: boolean argument {x}")
    return Call(name, tuple(args), x.dtype)


def exp(x): return _call("exp", x)
def log(x): return _call("log", x)
def sqrt(x): return _call("sqrt", x)
def tanh(x): return _call("tanh", x)
def sigmoid(x): return _call("sigmoid", x)
def erf(x): return _call("erf", x)
def floor(x): return _call("floor", x)
def ceil(x): return _call("ceil", x)
def abs(x): return _call("abs", x)           # noqa: A001


def power(x, y):
    """``x ** y`` for floats."""
    return _call("pow", x, y)


pow = power                                  # noqa: A001


def maximum(a, b):
    a, b = _unify("max", a, b)
    from ..ir.expr import Binary, BinOp
    return Binary(BinOp.MAX, a, b, a.dtype)


def minimum(a, b):
    a, b = _unify("min", a, b)
    from ..ir.expr import Binary, BinOp
    return Binary(BinOp.MIN, a, b, a.dtype)


def if_then_else(cond, then_value, else_value) -> Expr:
    """``then_value`` where *cond* holds, else ``else_value``; only the chosen side is evaluated."""
    cond = as_expr(cond)
    if cond.dtype != dtypes.BOOL:
        raise TEError(f"if_then_else: the condition {cond} has dtype {cond.dtype}; it must be a "
                      "comparison such as (i < n)")
    t, f = _unify("if_then_else", then_value, else_value)
    return Select(cond, t, f, t.dtype)


def all(*conds) -> Expr:                      # noqa: A001
    """The conjunction of the conditions."""
    if not conds:
        return const(True)
    return _fold(lambda a, b: Logical(LogicOp.AND, a, b), [_bool(c) for c in conds])


def any(*conds) -> Expr:                      # noqa: A001
    """The disjunction of the conditions."""
    if not conds:
        return const(False)
    return _fold(lambda a, b: Logical(LogicOp.OR, a, b), [_bool(c) for c in conds])


def _bool(c):
    c = as_expr(c)
    if c.dtype != dtypes.BOOL:
        raise TEError(f"te.all/te.any: {c} is not a condition (dtype {c.dtype})")
    return c
