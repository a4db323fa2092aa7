"""Whether a lowered kernel is in gather form: every store at a point of its own loops.

A gradient written as a scatter (``for i: for r: dX[s*i + r] += ...``) has stores that several
iterations make to one element, which a parallel loop can only do with atomics.  The gather form
that ``te.gradient`` produces instead loops over the gradient's own shape.  :func:`problems`
walks a lowered function with einloop's statement visitor and reports, for every ``Store``:

- an index that reads memory (a data-dependent scatter);
- an index in variables other than the loops around the store (after ``LetStmt`` bindings);
- a parallel or vectorized loop around the store whose variable the index does not use (its
  iterations would write one element at once);
- two points of the loops the index uses that write one element (the scatter itself), found by
  evaluating the index at every such point where the enclosing conditions on those loops hold;
- an argument buffer some element of which no store writes (so the loops are not its own shape).

The IR has no atomic operation: the visitor raises ``InternalError`` on a node it does not know,
so a kernel that walks cleanly has none, and every ``Call`` is checked to be a pure math function.
The evaluation uses NumPy over the loops' whole grid, so it is meant for the small shapes tests use.
"""
import math

import numpy as np

from einloop.ir import expr as E
from einloop.ir import stmt as S
from einloop.ir.visit import StmtVisitor, free_vars, substitute, walk

#: the calls lowering emits for te's math intrinsics: pure functions of their arguments
PURE_CALLS = frozenset({"exp", "log", "sqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "abs",
                        "pow"})

_PARALLEL = (S.ForKind.PARALLEL, S.ForKind.VECTORIZED)


class _Stores(StmtVisitor):
    """Collects each store with the loops, conditions and bindings around it."""

    def __init__(self):
        self.loops, self.conds, self.lets, self.allocated = [], [], {}, {}
        self.stores, self.calls = [], set()

    def visit_expr(self, e):
        self.calls.update(x.name for x in walk(e) if isinstance(x, E.Call))

    def visit_For(self, s):
        self.loops.append(s)
        self.generic_visit(s)
        self.loops.pop()

    def visit_IfThenElse(self, s):
        self.visit_expr(s.cond)
        self.conds.append(s.cond)
        self.visit(s.then_case)
        self.conds.pop()
        if s.else_case is not None:
            self.conds.append(E.Not(s.cond))
            self.visit(s.else_case)
            self.conds.pop()

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        self.lets[s.var] = substitute(s.value, self.lets)
        self.visit(s.body)
        del self.lets[s.var]

    def visit_Allocate(self, s):
        self.allocated[s.buffer] = len(self.loops)     # a local buffer: only the loops inside
        self.visit(s.body)

    def visit_Store(self, s):
        self.generic_visit(s)
        own = self.loops[self.allocated.get(s.buffer, 0):]
        self.stores.append((s, tuple(own), tuple(substitute(c, self.lets) for c in self.conds),
                            substitute(s.index, self.lets)))


def problems(func: S.LoweredFunc) -> list:
    """What keeps *func* from being in gather form (see the module's docstring); [] if nothing."""
    v = _Stores()
    v.visit(func.body)
    found = [f"a call of {name}, not a pure math function" for name in sorted(v.calls - PURE_CALLS)]
    written = {}
    for store, loops, conds, index in v.stores:
        where = f"store to {store.buffer.name}[{index}]"
        if any(isinstance(x, E.Load) for x in walk(index)):
            found.append(f"{where}: the index reads memory (a data-dependent scatter)")
            continue
        by_var = {lp.var: lp for lp in loops}
        used = free_vars(index)
        stray = [x for x in used if x not in by_var]
        if stray:
            found.append(f"{where}: the index uses {stray}, which are not loops around it")
            continue
        for lp in loops:
            if lp.kind in _PARALLEL and lp.var not in used:
                found.append(f"{where}: the {lp.kind.value} loop {lp.var} does not move the "
                             "index, so its iterations write one element at once")
        axes = [lp for lp in loops if lp.var in used]
        values = _values(index, conds, axes)
        if len(np.unique(values)) != len(values):
            found.append(f"{where}: several points of the loops "
                         f"{[lp.var.name for lp in axes]} write one element (a scatter)")
        written.setdefault(store.buffer, set()).update(values.tolist())
    for buf, seen in written.items():
        if buf.scope is E.Scope.ARG and seen != set(range(buf.size)):
            found.append(f"{buf.name}: its stores write {len(seen & set(range(buf.size)))} of "
                         f"its {buf.size} elements")
    return found


def _values(index, conds, axes):
    """The index at every point of the grid of *axes* where the conditions among *conds* that
    depend on those loops alone hold (other conditions are left out: they only remove points)."""
    grid = np.meshgrid(*[np.arange(lp.extent, dtype=np.int64) for lp in axes], indexing="ij") \
        if axes else []
    env = {lp.var: g.ravel() for lp, g in zip(axes, grid)}
    n = math.prod(lp.extent for lp in axes)
    keep = np.ones(n, dtype=bool)
    for c in conds:
        if free_vars(c) <= env.keys():
            keep &= np.broadcast_to(_eval(c, env), (n,))
    return np.broadcast_to(_eval(index, env), (n,))[keep]


_BINARY = {E.BinOp.ADD: np.add, E.BinOp.SUB: np.subtract, E.BinOp.MUL: np.multiply,
           E.BinOp.MAX: np.maximum, E.BinOp.MIN: np.minimum}
_COMPARE = {E.CmpOp.LT: np.less, E.CmpOp.LE: np.less_equal, E.CmpOp.GT: np.greater,
            E.CmpOp.GE: np.greater_equal, E.CmpOp.EQ: np.equal, E.CmpOp.NE: np.not_equal}


def _eval(e, env):
    """An integer or boolean index expression at every point of *env* (Var -> array)."""
    if isinstance(e, E.Var):
        return env[e]
    if isinstance(e, E.Const):
        return np.int64(e.value) if not isinstance(e.value, bool) else np.bool_(e.value)
    if isinstance(e, E.Binary):
        a, b = _eval(e.a, env), _eval(e.b, env)
        if e.op in _BINARY:
            return _BINARY[e.op](a, b)
        safe = np.where(b == 0, 1, b)
        if e.op in (E.BinOp.FLOORDIV, E.BinOp.MOD):
            q = np.floor_divide(a, safe)
        elif e.op in (E.BinOp.TDIV, E.BinOp.TMOD):
            q = np.sign(a) * np.sign(safe) * (np.abs(a) // np.abs(safe))
        else:
            raise ValueError(f"not an index operator: {e.op} in {e}")
        r = q if e.op in (E.BinOp.FLOORDIV, E.BinOp.TDIV) else a - q * safe
        return np.where(b == 0, 0, r)
    if isinstance(e, E.Compare):
        return _COMPARE[e.op](_eval(e.a, env), _eval(e.b, env))
    if isinstance(e, E.Logical):
        fn = np.logical_and if e.op is E.LogicOp.AND else np.logical_or
        return fn(_eval(e.a, env), _eval(e.b, env))
    if isinstance(e, E.Not):
        return np.logical_not(_eval(e.a, env))
    if isinstance(e, E.Select):
        return np.where(_eval(e.cond, env), _eval(e.true_value, env), _eval(e.false_value, env))
    if isinstance(e, E.Cast):
        return _eval(e.value, env)
    raise ValueError(f"cannot evaluate {type(e).__name__} in an index: {e}")
