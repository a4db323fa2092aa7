"""Bounds that hold for every value of the symbolic extents (``te.var``, ``te.size_var``).

Where a static extent is checked by interval arithmetic on ints, a symbolic one is checked on
*affine forms in the shape variables*: the bound of ``i + k`` over ``i in [0, n-1]``,
``k in [0, 2]`` is ``n + 1``, which is below the extent ``n + 2`` for every ``n``.  A form
``sum(c_s * s) + c0`` is provably non-negative when every ``c_s >= 0`` and it is non-negative
with each ``s`` at its ``min_value``.  The questions are asked with *ranges* mapping a loop
variable to ``(lo, hi)``, each an int or an affine expression in shape variables.
"""
from __future__ import annotations

from ..ir import expr as E
from .linear import terms_of


def affine_bound(ix, ranges, high):
    """The upper (*high*) or lower bound of int64 *ix* over *ranges* (var -> (lo, hi), each an
    int or an expression in shape variables) as a dict {ShapeVar or None: coefficient}, or None
    when *ix* is not affine in variables with known ranges."""
    out = {None: 0}
    for atom, k in terms_of(ix).items():
        if k == 0:
            continue
        if atom is None:
            out[None] += k
        elif isinstance(atom, E.ShapeVar):
            out[atom] = out.get(atom, 0) + k
        elif atom in ranges:
            lo, hi = ranges[atom]
            pick = _form(hi if (k > 0) == high else lo)
            if pick is None:
                return None
            for a, c in pick.items():
                out[a] = out.get(a, 0) + k * c
        else:
            return None
    return out


def _form(x):
    """An int or an affine expression in shape variables as {ShapeVar or None: coefficient}
    (None if it is not one)."""
    if isinstance(x, int):
        return {None: x}
    out = {None: 0}
    for atom, k in terms_of(E.as_expr(x)).items():
        if atom is not None and not isinstance(atom, E.ShapeVar):
            return None
        out[atom] = out.get(atom, 0) + k
    return out


def provably_nonnegative(form) -> bool:
    """``sum(c_s * s) + c0 >= 0`` for every value of the shape variables s (each at least its
    min_value)?  True only when it is proven: every c_s >= 0 and the sum is >= 0 at the minima."""
    if form is None or any(k < 0 for a, k in form.items() if a is not None):
        return False
    return form[None] + sum(k * a.min_value for a, k in form.items() if a is not None) >= 0


def provably_inside(ix, ranges, extent) -> bool:
    """Is int64 *ix* within ``0 .. extent - 1`` for every value of the loop variables in
    *ranges* and of the shape variables?"""
    lo, hi = affine_bound(ix, ranges, False), affine_bound(ix, ranges, True)
    if lo is None or hi is None:
        return False
    room = _form(extent)                       # extent - 1 - hi >= 0
    if room is None:
        return False
    room[None] -= 1
    for a, k in hi.items():
        room[a] = room.get(a, 0) - k
    return provably_nonnegative(lo) and provably_nonnegative(room)




def provably_nonnegative_expr(e, ranges) -> bool:
    """Is int64 *e* >= 0 for every value of the loop variables in *ranges* (whose lower bounds
    are ints or forms) and of the shape variables?  By the affine bound where *e* is affine;
    else structurally: sums and products of non-negative terms, and floor division or modulo of
    a non-negative term by a positive constant (what fused and split loops leave behind)."""
    form = affine_bound(e, ranges, False)
    if form is not None:
        return provably_nonnegative(form)
    if isinstance(e, E.Const):
        return e.value >= 0
    if isinstance(e, E.ShapeVar):
        return e.min_value >= 0
    if isinstance(e, E.Var):
        lo = ranges.get(e, (None, None))[0] if e in ranges else None
        return lo is not None and provably_nonnegative(_form(lo))
    if isinstance(e, E.Binary):
        op = e.op
        if op in (E.BinOp.ADD, E.BinOp.MUL, E.BinOp.MIN):
            return provably_nonnegative_expr(e.a, ranges) and \
                provably_nonnegative_expr(e.b, ranges)
        if op is E.BinOp.MAX:
            return provably_nonnegative_expr(e.a, ranges) or \
                provably_nonnegative_expr(e.b, ranges)
        if op in (E.BinOp.FLOORDIV, E.BinOp.TDIV, E.BinOp.MOD, E.BinOp.TMOD) \
                and isinstance(e.b, E.Const) and e.b.value > 0:
            return provably_nonnegative_expr(e.a, ranges)
    return False
