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
guard is affine in, or affine in its block index ``var // J`` (a parallel loop fused over row
blocks and column blocks: its whole-block iterations come first, so the threads share those
evenly, then the last block's, instead of one thread getting every short one); loops nested in
the main part are split the same way (a symbolic inner extent keeps full vectors in its main
part).  Guards that involve no symbolic extent are left to
:mod:`.partition`.
"""
from __future__ import annotations

from ...arith import simplify, substitute
from ...arith.linear import terms_of
from ...ir import dtypes
from ...ir import expr as E
from ...ir.stmt import For, ForKind, IfThenElse, IntrinsicCall, LetStmt, Scope, Store, seq
from ...ir.visit import StmtMutator, free_vars, map_stmt, stmt_children, structural_key


def split_tails(stmt):
    """*stmt* with each loop over a symbolic extent whose split guards can be decided split
    into a main part without them and a tail with them."""
    return _TailSplitter().visit(stmt)


class _TailSplitter(StmtMutator):
    def visit_For(self, s):
        if s.kind is ForKind.VECTORIZED or s.kind is ForKind.UNROLLED:
            return super().visit_For(s)
        guards = {}                          # id(IfThenElse) -> its bounds (M, R, J) on s.var
        _collect(s.body, s.var, {}, guards)
        if not guards:
            return super().visit_For(s)
        bounds = {structural_key(m): m for m in (simplify(b[0]) for b in guards.values())}
        bound = None
        for m in bounds.values():
            bound = m if bound is None else _min(bound, m)
        # past the last iteration where some guard can hold, an iteration does nothing visible
        # when every store to memory outside the loop is under these guards: the tail stops there
        # (a tile of 2052 rows at n = 333 has 287 empty 6-row blocks after its last one)
        reach = None
        if _stores_guarded(s.body, guards):
            for m in {structural_key(m): m for m in (simplify(b[1])
                                                     for b in guards.values())}.values():
                reach = m if reach is None else _max(reach, m)
        steady = E.Var(f"{s.var.name}.steady", dtypes.INDEX)
        main_body = _Drop(guards).visit(s.body)
        end = _max(E.const(0), _min(E.as_expr(s.extent), bound))
        if s.kind is ForKind.PARALLEL and not any(b[2] > 1 for b in guards.values()):
            return LetStmt(steady, simplify(end), self._one_team(s, steady, main_body, reach))
        main = For(s.var, steady, s.kind, self.visit(main_body))
        tail_var = E.Var(s.var.name, s.var.dtype)
        shifted = E.Binary(E.BinOp.ADD, tail_var, steady, dtypes.INDEX)
        tail_body = map_stmt(s.body, expr_fn=lambda e: substitute(e, {s.var: shifted}))
        # the tail's inner loops are split too (a tile of 258 rows at n = 64 is all tail, but
        # its 6-row blocks are whole but the last); the tail loop itself is not split again
        tail_extent = E.as_expr(s.extent) - steady
        if reach is not None:
            tail_extent = _max(E.const(0), _min(tail_extent, reach - steady))
        tail = For(tail_var, simplify(tail_extent), s.kind, self.visit(tail_body))
        return LetStmt(steady, simplify(end), seq(main, tail))

    def _one_team(self, s, steady, main_body, reach):
        """A parallel loop over whole blocks and its tail as one loop that branches per
        iteration: as two loops, the tail's few iterations would run after the others on as
        many threads (at n = 7 in blocks of 4: one block, then the other, each on one thread).
        (A loop over ``var // J`` with J > 1 runs as two: each has J iterations to share.)"""
        extent = E.as_expr(s.extent)
        if reach is not None:
            extent = _max(E.const(0), _min(extent, reach))
        tail = self.visit(s.body)
        return For(s.var, simplify(extent), s.kind,
                   IfThenElse(E.Compare(E.CmpOp.LT, s.var, steady), self.visit(main_body), tail))


class _Drop(StmtMutator):
    """The statement with the guards whose ids are in *drop* replaced by their bodies."""

    def __init__(self, drop):
        self.drop = drop

    def visit_IfThenElse(self, s):
        if id(s) in self.drop:
            return self.visit(s.then_case)
        return super().visit_IfThenElse(s)


def _stores_guarded(s, guards) -> bool:
    """Is every store of *s* to a buffer that outlives it (not a local one) inside one of the
    guards (ids) of *guards*?"""
    if isinstance(s, IfThenElse) and id(s) in guards:
        return True
    if isinstance(s, Store) and s.buffer.scope is not Scope.LOCAL:
        return False
    if isinstance(s, IntrinsicCall) and s.buffers[0].scope is not Scope.LOCAL:
        return False
    return all(_stores_guarded(c, guards) for c in stmt_children(s))


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
    """``(M, R, J)``: *cond* holds for every ``var < M`` and every value of the loops in
    *ranges*, and for no ``var >= R`` (whatever those loops' values), as expressions of symbolic
    extents and outer loops; J is 1, or J when *cond* is on ``var // J``; None when *cond* is
    not of that form."""
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
    k, scale, worst, best, symbolic, shaped = 0, 0, 0, 0, E.const(0), False
    for atom, c in terms_of(diff).items():
        if c == 0:
            continue
        if atom is None:
            worst += c
            best += c
        elif atom is var or _block_of(atom, var):
            if k:
                return None                          # both var and var // J
            k, scale = c, 1 if atom is var else atom.b.value
        elif isinstance(atom, E.ShapeVar):
            symbolic = symbolic + atom * c
            shaped = True
        elif atom in ranges:
            lo, hi = ranges[atom]
            worst += c * (hi if c > 0 else lo)
            best += c * (lo if c > 0 else hi)
        else:
            # invariant in the loop (of outer loops only, e.g. ``fused // 32``): part of M
            used = free_vars(atom)
            if var in used or any(v in ranges for v in used):
                return None
            symbolic = symbolic + atom * c
    if k <= 0 or not shaped:            # only guards against a symbolic extent: partition.py
        return None                     # decides those of constant extents
    # k * var + worst + symbolic < 0  <=>  var <= (-(worst + symbolic) - 1) // k; with the inner
    # loops at their most permissive (best) instead, the last iteration where it can hold.  For
    # the block index var // J of a fused loop: var // J < M  <=>  var < M * J.
    return (((-(symbolic + worst) - 1) // k + 1) * scale,
            ((-(symbolic + best) - 1) // k + 1) * scale, scale)


def _block_of(atom, var) -> bool:
    """Is *atom* ``var // J`` for a constant ``J > 0`` (the outer index of a fused loop, whose
    iterations with ``var // J < M`` are exactly those with ``var < M * J``)?"""
    return (isinstance(atom, E.Binary) and atom.op is E.BinOp.FLOORDIV and atom.a is var
            and isinstance(atom.b, E.Const) and atom.b.value > 0)


def _min(a, b):
    return E.Binary(E.BinOp.MIN, a, b, dtypes.INDEX)


def _max(a, b):
    return E.Binary(E.BinOp.MAX, a, b, dtypes.INDEX)
