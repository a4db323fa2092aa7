"""Tail splitting: a loop whose body guards against a symbolic extent runs as a guard-free main
part and a guarded tail.

A split of a symbolic extent ``n`` by a constant factor leaves the guard ``io * f + ii < n`` in
the body of ``io``: it is evaluated at every iteration of the loops inside, and inside a
vectorized loop it makes every access a masked one.  Every ``io < M`` satisfies it, where ``M``
follows from the guard and the constant ranges of the loops between (``ii <= f - 1`` gives
``M = (n - f) // f + 1``, which is ``n // f``).  So the loop runs as ``io in [0, M)`` with the
guard dropped, then as ``io in [M, E)`` unchanged.  :mod:`.partition` finds such steady states
for constant extents; here the bound is an expression of the symbolic extents (and of the outer
loops: a tile of 6 rows inside a loop over blocks of 1026 rows has its own bound per block),
computed once per run of the loop.  A loop is split at the outermost level whose variable the
guard is affine in; loops nested in the main part are split the same way (a symbolic inner
extent keeps full vectors in its main part).  Guards that involve no symbolic extent are left to
:mod:`.partition`.
"""
from __future__ import annotations

from ...arith import simplify, substitute
from ...arith.linear import terms_of
from ...ir import dtypes
from ...ir import expr as E
from ...ir.stmt import For, ForKind, IfThenElse, LetStmt, seq
from ...ir.visit import StmtMutator, free_vars, map_stmt, stmt_children, structural_key


def split_tails(stmt):
    """*stmt* with each loop over a symbolic extent whose split guards can be decided split
    into a main part without them and a tail with them."""
    return _TailSplitter().visit(stmt)


class _TailSplitter(StmtMutator):
    def visit_For(self, s):
        if s.kind is ForKind.VECTORIZED or s.kind is ForKind.UNROLLED:
            return super().visit_For(s)
        guards = {}                                  # id(IfThenElse) -> its bound on s.var
        _collect(s.body, s.var, {}, guards)
        if not guards:
            return super().visit_For(s)
        bounds = {structural_key(m): m for m in map(simplify, guards.values())}
        bound = None
        for m in bounds.values():
            bound = m if bound is None else _min(bound, m)
        steady = E.Var(f"{s.var.name}.steady", dtypes.INDEX)
        main_body = _Drop(guards).visit(s.body)
        main = For(s.var, steady, s.kind, self.visit(main_body))
        tail_var = E.Var(s.var.name, s.var.dtype)
        shifted = E.Binary(E.BinOp.ADD, tail_var, steady, dtypes.INDEX)
        tail_body = map_stmt(s.body, expr_fn=lambda e: substitute(e, {s.var: shifted}))
        tail = For(tail_var, simplify(E.as_expr(s.extent) - steady), s.kind, tail_body)
        end = _max(E.const(0), _min(E.as_expr(s.extent), bound))
        return LetStmt(steady, simplify(end), seq(main, tail))


class _Drop(StmtMutator):
    """The statement with the guards whose ids are in *drop* replaced by their bodies."""

    def __init__(self, drop):
        self.drop = drop

    def visit_IfThenElse(self, s):
        if id(s) in self.drop:
            return self.visit(s.then_case)
        return super().visit_IfThenElse(s)


def _collect(s, var, ranges, out):
    """Record in *out* each guard in *s* of the form ``k * var + rest < 0`` (``k > 0``, *rest*
    affine in loops of constant range and symbolic extents), with the bound below which it
    holds.  Guards under a let are left alone (their variables have no known range)."""
    if isinstance(s, IfThenElse):
        bound = _bound(s.cond, var, ranges)
        if bound is not None and s.else_case is None:
            out[id(s)] = bound
    if isinstance(s, LetStmt):
        return
    if isinstance(s, For):
        if not isinstance(s.extent, int):
            return                                   # its own turn comes
        ranges = {**ranges, s.var: (0, s.extent - 1)}
    for c in stmt_children(s):
        _collect(c, var, ranges, out)


def _bound(cond, var, ranges):
    """``M`` such that *cond* holds for every ``var < M`` and every value of the loops in
    *ranges*, as an expression of symbolic extents; None when *cond* is not of that form."""
    if not isinstance(cond, E.Compare) or cond.a.dtype != dtypes.INDEX:
        return None
    if cond.op is E.CmpOp.LT:
        diff = cond.a - cond.b                      # holds iff diff < 0
    elif cond.op is E.CmpOp.LE:
        diff = cond.a - cond.b - 1
    elif cond.op is E.CmpOp.GT:
        diff = cond.b - cond.a
    elif cond.op is E.CmpOp.GE:
        diff = cond.b - cond.a - 1
    else:
        return None
    k, worst, symbolic, shaped = 0, 0, E.const(0), False
    for atom, c in terms_of(diff).items():
        if c == 0:
            continue
        if atom is None:
            worst += c
        elif atom is var:
            k = c
        elif isinstance(atom, E.ShapeVar):
            symbolic = symbolic + atom * c
            shaped = True
        elif atom in ranges:
            lo, hi = ranges[atom]
            worst += c * (hi if c > 0 else lo)
        else:
            # invariant in the loop (of outer loops only, e.g. ``fused // 32``): part of M
            used = free_vars(atom)
            if var in used or any(v in ranges for v in used):
                return None
            symbolic = symbolic + atom * c
    if k <= 0 or not shaped:            # only guards against a symbolic extent: partition.py
        return None                     # decides those of constant extents
    # k * var + worst + symbolic < 0  <=>  var <= (-(worst + symbolic) - 1) // k
    return (-(symbolic + worst) - 1) // k + 1


def _min(a, b):
    return E.Binary(E.BinOp.MIN, a, b, dtypes.INDEX)


def _max(a, b):
    return E.Binary(E.BinOp.MAX, a, b, dtypes.INDEX)
