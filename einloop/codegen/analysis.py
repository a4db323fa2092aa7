"""Read-only queries on the loop IR that the emitters need before emitting code.

- which variables and buffers a statement uses from outside (to capture them for a parallel body),
- whether evaluating an expression could fault (so a lazy ``Select`` needs real branches),
- whether a vectorized loop can become SIMD lanes (no inner loop, every store lane-dependent).

Results are memoised per node identity; an :class:`Analysis` lives as long as one kernel build,
so ids cannot be reused by other objects meanwhile (the LoweredFunc keeps every node alive).
"""
from __future__ import annotations

from ..te import dtypes, expr as E
from ..schedule import loop_ir as L


def expr_children(e):
    if isinstance(e, (E.Binary, E.Compare, E.Logical)):
        return (e.a, e.b)
    if isinstance(e, E.Not):
        return (e.a,)
    if isinstance(e, E.Select):
        return (e.cond, e.true_value, e.false_value)
    if isinstance(e, E.Cast):
        return (e.value,)
    if isinstance(e, E.Call):
        return tuple(e.args)
    if isinstance(e, L.Load):
        return (e.index,)
    return ()


def stmt_exprs(s):
    """Expressions directly held by statement *s* (not those of nested statements)."""
    if isinstance(s, L.Store):
        return (s.index, s.value)
    if isinstance(s, L.IfThenElse):
        return (s.cond,)
    if isinstance(s, L.LetStmt):
        return (s.value,)
    return ()


def stmt_children(s):
    if isinstance(s, L.Seq):
        return tuple(s.stmts)
    if isinstance(s, (L.For, L.Allocate, L.LetStmt)):
        return (s.body,)
    if isinstance(s, L.IfThenElse):
        return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)
    return ()


def _int_div_may_trap(e):
    if not (isinstance(e, E.Binary) and e.op in ("//", "%", "tdiv", "tmod", "/")):
        return False
    return not dtypes.is_float(e.dtype) and not (isinstance(e.b, E.Const) and e.b.value != 0)


class Analysis:
    """Memoised queries over one LoweredFunc."""

    def __init__(self):
        self._vars: dict = {}
        self._trap: dict = {}

    def expr_vars(self, e) -> dict:
        """{id(var): var} of the variables *e* reads."""
        key = id(e)
        got = self._vars.get(key)
        if got is None:
            if isinstance(e, E.Var):
                got = {id(e): e}
            else:
                got = {}
                for c in expr_children(e):
                    got.update(self.expr_vars(c))
            self._vars[key] = got
        return got

    def may_trap(self, e) -> bool:
        """Could evaluating *e* fault: does it read memory or divide integers by a variable?"""
        key = id(e)
        got = self._trap.get(key)
        if got is None:
            got = isinstance(e, L.Load) or _int_div_may_trap(e) or any(
                self.may_trap(c) for c in expr_children(e))
            self._trap[key] = got
        return got

    def free_names(self, s):
        """Variables and buffers that *s* uses but does not bind or allocate itself.

        Returns ``(vars, buffers)`` as ``{id: object}`` dicts in first-use order.
        """
        vars_, bufs = {}, {}
        self._free(s, set(), set(), vars_, bufs)
        return vars_, bufs

    def _free(self, s, bound, allocated, vars_, bufs):
        if isinstance(s, (L.For, L.LetStmt)):
            if isinstance(s, L.LetStmt):
                self._free_expr(s.value, bound, allocated, vars_, bufs)
            self._free(s.body, bound | {id(s.var)}, allocated, vars_, bufs)
            return
        if isinstance(s, L.Allocate):
            self._free(s.body, bound, allocated | {id(s.buffer)}, vars_, bufs)
            return
        if isinstance(s, L.Store) and id(s.buffer) not in allocated:
            bufs.setdefault(id(s.buffer), s.buffer)
        for e in stmt_exprs(s):
            self._free_expr(e, bound, allocated, vars_, bufs)
        for c in stmt_children(s):
            self._free(c, bound, allocated, vars_, bufs)

    def _free_expr(self, e, bound, allocated, vars_, bufs):
        for k, v in self.expr_vars(e).items():
            if k not in bound:
                vars_.setdefault(k, v)
        for ld in self._loads(e):
            if id(ld.buffer) not in allocated:
                bufs.setdefault(id(ld.buffer), ld.buffer)

    def _loads(self, e, out=None):
        out = [] if out is None else out
        if isinstance(e, L.Load):
            out.append(e)
        for c in expr_children(e):
            self._loads(c, out)
        return out

    def vectorizable(self, loop: L.For) -> bool:
        """Can *loop* become lanes: no inner For, and every Store's index varies with the lane?

        A store to a lane-invariant address (``C[i] = C[i] + A[i, k]`` vectorized over ``k``)
        is a loop-carried reduction, which lanes cannot express; such loops stay serial.
        """
        return self._lanes_ok(loop.body, {id(loop.var)})

    def _lanes_ok(self, s, lane_vars) -> bool:
        if isinstance(s, L.For):
            return False
        if isinstance(s, L.LetStmt):
            if any(k in lane_vars for k in self.expr_vars(s.value)):
                lane_vars = lane_vars | {id(s.var)}
            return self._lanes_ok(s.body, lane_vars)
        if isinstance(s, L.Store):
            return any(k in lane_vars for k in self.expr_vars(s.index))
        return all(self._lanes_ok(c, lane_vars) for c in stmt_children(s))
