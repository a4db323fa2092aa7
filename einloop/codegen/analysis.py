"""Read-only queries on the loop IR that the emitters need before emitting code.

- which variables and buffers a statement uses from outside (to capture them for a parallel body),
- whether evaluating an expression could fault (so a lazy ``Select`` needs real branches),
- whether a vectorized loop can become SIMD lanes (no inner loop, every store lane-dependent),
- whether a store updates its buffer through several uses of the old value (see
  :func:`branching_update`).

Results are memoised per node identity; an :class:`Analysis` lives as long as one kernel build,
so ids cannot be reused by other objects meanwhile (the LoweredFunc keeps every node alive).
"""
from __future__ import annotations

from ..ir.visit import children as expr_children, stmt_children, stmt_exprs
from ..ir import dtypes, expr as E
from ..ir import stmt as L


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
        """Can *loop* become SIMD lanes without changing what the serial loop computes?

        Not when it has an inner loop, nor when a store could make lanes interfere: a store to a
        lane-invariant address (``C[i] = C[i] + A[i, k]`` vectorized over ``k``) is a reduction,
        and a store through a non-affine index (``C[f // 4] += ...``) into a buffer the body also
        reads may see several lanes update one element.  Such loops stay serial.
        """
        stores, loaded = [], set()
        if not self._collect(loop.body, {id(loop.var): 1}, stores, loaded):
            return False
        for buf, form in stores:
            if form is None or (form == "vec" and id(buf) in loaded):
                return False
        return True

    def _collect(self, s, lanes, stores, loaded) -> bool:
        """Gather ``(buffer, lane form of index)`` of every store and the buffers read."""
        if isinstance(s, L.For):
            return False
        for e in stmt_exprs(s):
            loaded.update(id(ld.buffer) for ld in self._loads(e))
        if isinstance(s, L.LetStmt):
            form = self.lane_form(s.value, lanes)
            if form is not None:
                lanes = {**lanes, id(s.var): form}
        if isinstance(s, L.Store):
            stores.append((s.buffer, self.lane_form(s.index, lanes)))
        return all(self._collect(c, lanes, stores, loaded) for c in stmt_children(s))

    def lane_form(self, e, lanes):
        """How *e* varies over the lanes: None (it does not), an int stride, or ``"vec"``.

        Mirrors the vector emitter: ``+``, ``-`` and ``* constant`` keep an index affine.
        """
        if isinstance(e, E.Var):
            return lanes.get(id(e))
        if not any(k in lanes for k in self.expr_vars(e)):
            return None
        if isinstance(e, E.Binary) and e.op in ("+", "-", "*") and e.dtype == dtypes.INDEX:
            fa, fb = self.lane_form(e.a, lanes), self.lane_form(e.b, lanes)
            if "vec" in (fa, fb):
                return "vec"
            if e.op == "*":
                k = e.b if fa is not None else e.a
                if (fa is None) == (fb is None) or not isinstance(k, E.Const):
                    return "vec"
                return (fa if fa is not None else fb) * k.value or None
            stride = (fa or 0) + (fb or 0) * (1 if e.op == "+" else -1)
            return stride or None
        return "vec"


#: operators emitted as one LLVM instruction or intrinsic that uses each operand once.
_SINGLE_USE_OPS = frozenset(("+", "-", "*", "max", "min"))
_MANY = 2


def _old_value_uses(e, buf, memo) -> int:
    """How many paths lead from *e* to a read of *buf* in the LLVM code (capped at 2)."""
    got = memo.get(id(e))
    if got is not None:
        return got
    if isinstance(e, L.Load) and e.buffer.name == buf.name:
        got = 1
    else:
        total = sum(_old_value_uses(c, buf, memo) for c in expr_children(e))
        single_use = isinstance(e, E.Cast) or isinstance(e, E.Binary) and (
            e.op in _SINGLE_USE_OPS or e.op == "/" and dtypes.is_float(e.dtype))
        got = min(total, _MANY) if single_use or total == 0 else _MANY
    memo[id(e)] = got
    return got


def branching_update(s, guarded=False) -> bool:
    """Does some store in *s* compute its value from the buffer's old value along several paths?

    A reduction such as ``T[i] = select(T[i] > x, T[i], x)`` or ``T[i] = T[i] * T[i] + x``, once
    LLVM has unrolled its loop, is a chain in which each value uses the previous one twice.  So
    is a guarded update ``if c: T[i] = min(T[i], x)`` (a ``where=`` or a split guard), which LLVM
    if-converts into ``select(c, min(T[i], x), T[i])``.  When the chain does not depend on an
    outer loop, LLVM 22's loop vectorizer walks every path through it
    (``narrowToSingleScalarRecipes``), exponentially many, and never finishes; the JIT then
    optimises without LLVM's loop vectorizer (einloop's own ``vectorize`` is unaffected).
    """
    if isinstance(s, L.Store):
        return _old_value_uses(s.value, s.buffer, {}) >= (1 if guarded else _MANY)
    guarded = guarded or isinstance(s, L.IfThenElse)
    return any(branching_update(c, guarded) for c in stmt_children(s))
