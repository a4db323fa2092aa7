"""Simplify pass: fold constants and index arithmetic using loop ranges, drop decided guards,
and turn floor division of provably non-negative values into cheaper truncating division.

Statements left with nothing to run (a guard whose body folded away, a loop, let or allocation
around an empty body) are removed, so codegen never sees an empty or missing body."""
from ...arith import simplify, const_bounds, transform, substitute
from ...errors import InternalError
from ...ir import expr as E
from ...ir.stmt import For, Store, IfThenElse, Seq, Allocate, LetStmt, seq
from ...ir.visit import map_stmt


def _fast_divmod(e, ranges):
    def fn(x):
        if isinstance(x, E.Binary) and x.op in ("//", "%") and isinstance(x.b, E.Const) \
                and x.b.value > 0:
            b = const_bounds(x.a, ranges)
            if b is not None and b[0] >= 0:
                return E.Binary("tdiv" if x.op == "//" else "tmod", x.a, x.b, x.dtype)
        return None
    return transform(e, fn)


def simplify_stmt(stmt, ranges=None):
    """Simplify every expression of *stmt* given the ranges of the loops around it."""
    ranges = dict(ranges or {})

    def ex(e):
        return _fast_divmod(simplify(e, ranges), ranges)

    def go(s):
        """*s* simplified, or None when nothing of it is left to run."""
        if isinstance(s, Seq):
            out = seq(*[go(c) for c in s.stmts])
            return None if isinstance(out, Seq) and not out.stmts else out
        if isinstance(s, For) and s.extent == 1:
            return go(map_stmt(s.body, expr_fn=lambda e: substitute(e, {s.var: E.const(0)})))
        if isinstance(s, For):
            ranges[s.var] = (0, s.extent - 1)
            body = go(s.body)
            return None if body is None else For(s.var, s.extent, s.kind, body)
        if isinstance(s, Store):
            return Store(s.buffer, ex(s.index), ex(s.value))
        if isinstance(s, IfThenElse):
            cond = ex(s.cond)
            if isinstance(cond, E.Const):
                branch = s.then_case if cond.value else s.else_case
                return None if branch is None else go(branch)
            then = go(s.then_case)
            other = None if s.else_case is None else go(s.else_case)
            if then is None:
                return None if other is None else IfThenElse(E.Not(cond), other)
            return IfThenElse(cond, then, other)
        if isinstance(s, Allocate):
            body = go(s.body)
            return None if body is None else Allocate(s.buffer, body)
        if isinstance(s, LetStmt):
            value = ex(s.value)
            b = const_bounds(value, ranges)
            if b is not None:
                ranges[s.var] = b
            body = go(s.body)
            return None if body is None else LetStmt(s.var, value, body)
        raise InternalError(f"simplify_stmt: unexpected statement {type(s).__name__}")
    out = go(stmt)
    return out if out is not None else Seq(())
