"""Read-only queries on the loop IR that the emitters need before emitting code.

- which variables and buffers a statement uses from outside (to capture them for a parallel body),
- whether evaluating an expression could fault (so a lazy ``Select`` needs real branches),
- whether a store updates its buffer through several uses of the old value (see
  :func:`branching_update`).

Whether a vectorized loop can become lanes is not asked here: the vectorize pass
(:mod:`einloop.schedule.passes.vectorize`) decided it, and the loop kinds say it.

Results are memoised per node identity; an :class:`Analysis` lives as long as one kernel build,
so ids cannot be reused by other objects meanwhile (the LoweredFunc keeps every node alive).
"""
from __future__ import annotations

from ..ir import dtypes, expr as E
from ..ir.expr import BinOp
from ..ir.visit import StmtVisitor, children as expr_children, stmt_exprs, walk

_DIV_OPS = frozenset((BinOp.FLOORDIV, BinOp.MOD, BinOp.TDIV, BinOp.TMOD, BinOp.DIV))


def _int_div_may_trap(e):
    if not (type(e) is E.Binary and e.op in _DIV_OPS):
        return False
    return not dtypes.is_float(e.dtype) and not (type(e.b) is E.Const and e.b.value != 0)


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
            if type(e) is E.Var or type(e) is E.ShapeVar:
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
            got = type(e) is E.Load or _int_div_may_trap(e) or any(
                self.may_trap(c) for c in expr_children(e))
            self._trap[key] = got
        return got

    def free_names(self, s):
        """Variables and buffers that *s* uses but does not bind or allocate itself.

        Returns ``(vars, buffers)`` as ``{id: object}`` dicts in first-use order.
        """
        scan = _FreeNames(self)
        scan.visit(s)
        return scan.vars, scan.bufs


class _FreeNames(StmtVisitor):
    """The names a statement uses from outside, in first-use order (statements before their
    bodies, a store's buffer before its index and value)."""

    def __init__(self, an):
        self.an = an
        self.bound, self.allocated = set(), set()
        self.vars, self.bufs = {}, {}

    def visit_expr(self, e):
        for k, v in self.an.expr_vars(e).items():
            if k not in self.bound:
                self.vars.setdefault(k, v)
        for x in walk(e):
            if type(x) is E.Load and id(x.buffer) not in self.allocated:
                self.bufs.setdefault(id(x.buffer), x.buffer)

    def _within(self, scope, key, body):
        new = key not in scope
        scope.add(key)
        self.visit(body)
        if new:
            scope.discard(key)

    def visit_For(self, s):
        for e in stmt_exprs(s):                 # a symbolic extent reads its shape variables
            self.visit_expr(e)
        self._within(self.bound, id(s.var), s.body)

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        self._within(self.bound, id(s.var), s.body)

    def visit_Allocate(self, s):
        self._within(self.allocated, id(s.buffer), s.body)

    def visit_Store(self, s):
        if id(s.buffer) not in self.allocated:
            self.bufs.setdefault(id(s.buffer), s.buffer)
        self.generic_visit(s)

    visit_Prefetch = visit_Store        # a prefetch uses its buffer's address, as a store does

    def visit_ExternCall(self, s):
        for b in s.inputs + (s.output,):
            if id(b) not in self.allocated:
                self.bufs.setdefault(id(b), b)
        self.generic_visit(s)

    def visit_IntrinsicCall(self, s):
        for b in s.buffers:
            if id(b) not in self.allocated:
                self.bufs.setdefault(id(b), b)
        self.generic_visit(s)


#: operators emitted as one LLVM instruction or intrinsic that uses each operand once.
_SINGLE_USE_OPS = frozenset((BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MAX, BinOp.MIN))
_MANY = 2


def _old_value_uses(e, buf, memo) -> int:
    """How many paths lead from *e* to a read of *buf* in the LLVM code (capped at 2)."""
    got = memo.get(id(e))
    if got is not None:
        return got
    if type(e) is E.Load and e.buffer.name == buf.name:
        got = 1
    else:
        total = sum(_old_value_uses(c, buf, memo) for c in expr_children(e))
        single_use = type(e) is E.Cast or type(e) is E.Binary and (
            e.op in _SINGLE_USE_OPS or e.op is BinOp.DIV and dtypes.is_float(e.dtype))
        got = min(total, _MANY) if single_use or total == 0 else _MANY
    memo[id(e)] = got
    return got


def branching_update(s) -> bool:
    """Does some store in *s* compute its value from the buffer's old value along several paths?

    A reduction such as ``T[i] = select(T[i] > x, T[i], x)`` or ``T[i] = T[i] * T[i] + x``, once
    LLVM has unrolled its loop, is a chain in which each value uses the previous one twice.  So
    is a guarded update ``if c: T[i] = min(T[i], x)`` (a ``where=`` or a split guard), which LLVM
    if-converts into ``select(c, min(T[i], x), T[i])``.  When the chain does not depend on an
    outer loop, LLVM 22's loop vectorizer walks every path through it
    (``narrowToSingleScalarRecipes``), exponentially many, and never finishes; the JIT then
    optimises without LLVM's loop vectorizer (einloop's own ``vectorize`` is unaffected).
    """
    scan = _BranchingUpdate()
    scan.visit(s)
    return scan.found


class _BranchingUpdate(StmtVisitor):
    def __init__(self):
        self.found, self.guarded = False, False

    def visit_Store(self, s):
        if not self.found:
            uses = _old_value_uses(s.value, s.buffer, {})
            self.found = uses >= (1 if self.guarded else _MANY)

    def visit_IfThenElse(self, s):
        saved, self.guarded = self.guarded, True
        self.generic_visit(s)
        self.guarded = saved
