"""Simplify pass: fold constants and index arithmetic using loop ranges, drop decided guards,
and turn floor division of provably non-negative values into cheaper truncating division.

Statements left with nothing to run (a guard whose body folded away, a loop, let or allocation
around an empty body) are removed, so codegen never sees an empty or missing body."""
from ...arith import simplify, const_bounds, transform
from ...ir import expr as E
from ...ir.stmt import For, Store, IfThenElse, Seq, Allocate, LetStmt, seq
from ...ir.visit import StmtMutator


def _fast_divmod(e, ranges, memo=None):
    def fn(x):
        if isinstance(x, E.Binary) and (x.op is E.BinOp.FLOORDIV or x.op is E.BinOp.MOD) \
                and isinstance(x.b, E.Const) \
                and x.b.value > 0:
            b = const_bounds(x.a, ranges)
            if b is not None and b[0] >= 0:
                op = E.BinOp.TDIV if x.op is E.BinOp.FLOORDIV else E.BinOp.TMOD
                return E.Binary(op, x.a, x.b, x.dtype)
        return None
    return transform(e, fn, memo)


def simplify_stmt(stmt, ranges=None):
    """Simplify every expression of *stmt* given the ranges of the loops around it."""
    out = _Simplifier(dict(ranges or {})).visit(stmt)
    return out if out is not None else Seq(())


class _Simplifier(StmtMutator):
    """``visit`` returns the simplified statement, or None when nothing of it is left to run.

    Unlike other mutators it returns fresh statements even where nothing changed: loop
    partitioning keeps a loop's body beside simplified copies of it, and feature extraction
    tells loops apart by identity, so the copies must not share statements with the original.

    The range of a loop or let variable holds in its binder's body only.  Unrolled copies bind
    the same variable in sibling bodies, each to its own value: a let whose value has no known
    bounds removes whatever range an earlier copy recorded, and a binder nested in another of
    the same variable (or in one the caller's ``ranges`` stand for) gives the outer range back
    when its body ends.  A range left behind by a sibling whose body has ended is kept: no
    expression outside that body can read the variable (a variable bound in the statement does
    not also occur free in it), and the next binder of the variable records its own range.

    Expressions are simplified through memos shared by the whole statement (the copies that
    unrolling made share most of their subtrees); they are dropped whenever a range is recorded,
    removed or changes, since a rewrite may depend on every range known.  Keeping the ranges of
    ended siblings is what lets the copies of an unrolled loop share them.
    """

    def __init__(self, ranges):
        self.ranges = ranges
        self.open = set(ranges)     # variables inside whose binder (or caller's scope) we are
        self._forget()

    def _forget(self):
        self.memo, self.divmod_memo = {}, {}

    def _set_range(self, var, r):
        """Record *var*'s range *r*; None: nothing is known of it."""
        if r is None:
            if self.ranges.pop(var, None) is not None:
                self._forget()
        elif self.ranges.get(var) != r:
            self.ranges[var] = r
            self._forget()

    def _visit_bound(self, var, r, body):
        """Visit *body* with *var*'s range *r* (None: unknown), scoped to *body*."""
        if var in self.open:                    # shadowing: the outer range comes back after
            outer = self.ranges.get(var)
            self._set_range(var, r)
            out = self.visit(body)
            self._set_range(var, outer)
            return out
        self._set_range(var, r)
        self.open.add(var)
        out = self.visit(body)
        self.open.discard(var)
        return out

    def visit_expr(self, e):
        return _fast_divmod(simplify(e, self.ranges, self.memo), self.ranges, self.divmod_memo)

    def visit_Seq(self, s):
        out = seq(*[self.visit(c) for c in s.stmts])
        return None if isinstance(out, Seq) and not out.stmts else out

    def visit_For(self, s):
        static = isinstance(s.extent, int)
        if static and s.extent == 1:        # the body alone, its variable folded to 0
            return self._visit_bound(s.var, (0, 0), s.body)
        # a symbolic extent: the loop variable's range has no constant bound to use
        extent = s.extent if static else self.visit_expr(s.extent)
        body = self._visit_bound(s.var, (0, s.extent - 1) if static else None, s.body)
        return None if body is None else For(s.var, extent, s.kind, body)

    def visit_Store(self, s):
        return Store(s.buffer, self.visit_expr(s.index), self.visit_expr(s.value), s.nontemporal)

    def visit_IfThenElse(self, s):
        cond = self.visit_expr(s.cond)
        if isinstance(cond, E.Const):
            branch = s.then_case if cond.value else s.else_case
            return None if branch is None else self.visit(branch)
        then = self.visit(s.then_case)
        other = None if s.else_case is None else self.visit(s.else_case)
        if then is None:
            return None if other is None else IfThenElse(E.Not(cond), other)
        return IfThenElse(cond, then, other)

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        return None if body is None else Allocate(s.buffer, body)

    def visit_LetStmt(self, s):
        value = self.visit_expr(s.value)
        body = self._visit_bound(s.var, const_bounds(value, self.ranges), s.body)
        return None if body is None else LetStmt(s.var, value, body)
