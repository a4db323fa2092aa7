"""Symbolic extents: ``te.var`` / ``te.size_var``.

A shape entry or a reduce-axis extent may be a :class:`~einloop.ir.expr.ShapeVar` instead of an
int: one kernel then serves every value, taken from the arguments' shapes at each call.  The
declaration checks must hold for all of those values at once (:mod:`einloop.arith.symbolic`
proves index bounds for them); a read that cannot be proven inside is guarded (clamped), never
rejected, since no single value of the variables is known to put it outside.
"""
from __future__ import annotations

from ..errors import TEError
from ..ir import dtypes
from ..ir import expr as E


def var(name="n", dtype="int64") -> E.ShapeVar:
    """A symbolic extent of at least 0, for shapes and reduce axes (``n = te.var("n")``)."""
    return _shape_var(name, dtype, 0, "te.var")


def size_var(name="n", dtype="int64") -> E.ShapeVar:
    """A symbolic extent known to be at least 1 (a batch size, a sequence length): proofs may
    use that, and a call with 0 is refused."""
    return _shape_var(name, dtype, 1, "te.size_var")


def _shape_var(name, dtype, min_value, what) -> E.ShapeVar:
    if not isinstance(name, str) or not name.isidentifier():
        raise TEError(f"{what}: the name must be an identifier such as 'n', got {name!r}")
    if dtypes.canonical(dtype, what) != dtypes.INDEX:
        raise TEError(f"{what}({name!r}): symbolic extents are {dtypes.INDEX}, got dtype "
                      f"{dtype!r}")
    return E.ShapeVar(name, dtypes.INDEX, min_value)


def check_extent(d, where):
    """*d* as an extent: a positive int or a ShapeVar; TEError otherwise."""
    if isinstance(d, E.ShapeVar):
        return d
    if isinstance(d, E.Expr):
        raise TEError(f"{where}: the extent {d} is an expression; an extent is a positive int or "
                      "a symbolic variable of its own (te.var / te.size_var): declare "
                      f"m = te.size_var('m') for it and pass arrays whose shapes agree")
    return None


def is_symbolic(extent) -> bool:
    return not isinstance(extent, int)
