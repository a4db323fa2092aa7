"""Loop partitioning: run the iterations where every clamp and guard of a loop's body is decided
in a loop of their own (the steady state), where those clamps and guards are simplified away.

A read through ``max(min(x + d, W - 1), 0)`` (Halide's ``repeat_edge``), a guard of a split that
does not divide, or a padding ``select`` makes a vectorized loop gather lane by lane, though the
clamp is inactive in all but the first and last iterations.  As Halide's ``PartitionLoops``, this
pass splits such a loop into a prologue, a steady state and an epilogue; the steady state is found
from the loop ranges (:func:`~einloop.arith.refine.holds_on`), not from ``likely`` tags.  Each
clamp ``min(a, b)``/``max(a, b)`` contributes the condition ``a <= b``/``a >= b``.  Only the
conditions evaluated per vector lane count, and only vectorized loops and the loops around them
are partitioned: there a clamp costs a gather or a mask; a scalar one costs a cycle, and
partitioning it would only copy code.  For the same reason a loop is partitioned only when the
vector loops its variable clamps run a fair share (``MIN_SHARE``) of its lanes, and only when the
steady state covers most of its iterations.

Correctness does not depend on the analysis: the pieces together run the loop's iterations in
order, and each is only simplified with its own range.  A parallel loop keeps its iterations and
static share: its body branches to a steady copy instead.  Only the steady copy is partitioned
further, and at most ``MAX_DEPTH`` times along a path, so code grows linearly with nesting.
"""
from ...arith import const_bounds, free_vars, holds_on, negate, refine, substitute, walk
from ...ir import dtypes
from ...ir import expr as E
from ...ir.stmt import For, ForKind, IfThenElse, LetStmt, seq
from .simplify_stmt import simplify_stmt
from ...ir.visit import StmtMutator, StmtVisitor, map_stmt, stmt_children, structural_key

MAX_DEPTH = 3             # partitions along one path of a loop nest
MIN_VECTOR_STEADY = 16    # shorter vector loops are one vector: cutting lanes off does not pay
MIN_SHARE = 1 / 8         # of a loop's vector lanes, those its variable clamps, for it to pay


def partition_loops(stmt):
    """*stmt* with loops whose clamps and guards are decided on most iterations partitioned."""
    return _Partitioner().visit(stmt)


class _Partitioner(StmtMutator):
    """The pass.  ``ranges`` and ``depth`` describe the statement being visited: the ranges of
    the loops and lets around it, and the partitions along its path.  Keeps a memo of each
    statement's lane summary (a loop nest is summarised once, not once per loop around it)."""

    def __init__(self):
        self.ranges, self.depth = {}, 0
        self._summaries = {}

    def _visit_in(self, s, ranges, depth):
        """*s* partitioned in the context *ranges*, *depth*; the same object where nothing in it
        changed."""
        saved = self.ranges, self.depth
        self.ranges, self.depth = ranges, depth
        try:
            return self.visit(s)
        finally:
            self.ranges, self.depth = saved

    def visit_For(self, s):
        ranges, depth = self.ranges, self.depth
        if not isinstance(s.extent, int):       # a symbolic extent: no constant range to cut
            return self._descend(s, ranges, depth)
        steady = self._steady_range(s, ranges) if depth < MAX_DEPTH else None
        if steady is None:
            return self._descend(s, ranges, depth)
        if s.kind is ForKind.PARALLEL:
            return self._branch(s, steady, ranges, depth)
        return self._split(s, steady, ranges, depth)

    def visit_IfThenElse(self, s):
        then = self._visit_under(s.then_case, s.cond)
        other = None if s.else_case is None else self._visit_under(s.else_case, negate(s.cond))
        same = then is s.then_case and other is s.else_case
        return s if same else IfThenElse(s.cond, then, other)

    def visit_LetStmt(self, s):
        b = const_bounds(s.value, self.ranges)
        inner = {k: v for k, v in self.ranges.items() if k is not s.var}   # an unbounded value
        if b is not None:                                                   # hides any outer range
            inner[s.var] = b
        body = self._visit_in(s.body, inner, self.depth)
        return s if body is s.body else LetStmt(s.var, s.value, body)

    def _visit_under(self, s, cond):
        """Visit a branch with the ranges narrowed by its condition (a dead branch as it is)."""
        narrowed = refine(self.ranges, cond)
        return s if narrowed is None else self._visit_in(s, narrowed, self.depth)

    def _descend(self, loop, ranges, depth):
        """*loop* itself unpartitioned, its body visited."""
        inner = {k: v for k, v in ranges.items() if k is not loop.var}
        if isinstance(loop.extent, int):
            inner[loop.var] = (0, loop.extent - 1)
        body = self._visit_in(loop.body, inner, depth)
        return loop if body is loop.body else For(loop.var, loop.extent, loop.kind, body)

    def _split(self, loop, steady, ranges, depth):
        """Prologue, steady state and epilogue loops, each simplified on its own range."""
        lo, hi = steady
        pieces = []
        for a, b in ((0, lo - 1), (lo, hi), (hi + 1, loop.extent - 1)):
            if a > b:
                continue
            var = E.Var(loop.var.name, loop.var.dtype)
            shifted = var if a == 0 else \
                E.Binary(E.BinOp.ADD, var, E.const(a, var.dtype), var.dtype)
            body = map_stmt(loop.body, expr_fn=lambda e: substitute(e, {loop.var: shifted}))
            piece = simplify_stmt(For(var, b - a + 1, loop.kind, body), ranges)
            if a == lo:
                piece = self._descend(piece, ranges, depth + 1) if isinstance(piece, For) \
                    else self._visit_in(piece, ranges, depth + 1)
            pieces.append(piece)
        return seq(*pieces)

    def _branch(self, loop, steady, ranges, depth):
        """A parallel loop whose body runs a copy simplified for the steady iterations there."""
        lo, hi = steady
        inner = {**ranges, loop.var: (lo, hi)}
        v, c = loop.var, lambda k: E.const(k, loop.var.dtype)
        bounds = ([E.Compare(E.CmpOp.GE, v, c(lo))] if lo > 0 else []) + \
            ([E.Compare(E.CmpOp.LE, v, c(hi))] if hi < loop.extent - 1 else [])
        cond = bounds[0] if len(bounds) == 1 else E.Logical(E.LogicOp.AND, *bounds)
        fast = self._visit_in(simplify_stmt(loop.body, inner), inner, depth + 1)
        return For(loop.var, loop.extent, loop.kind, IfThenElse(cond, fast, loop.body))

    def _steady_range(self, loop, ranges):
        """The iterations ``(lo, hi)`` to run as the steady state of *loop*, or None if it does
        not pay: the widest decided interval of each condition, met greedily (widest first)
        while the result still covers most of the loop."""
        groups, inner_ranges, lanes = self._summary(loop)
        hot = [[c for c in conds if loop.var in free_vars(c)] for conds, _ in groups]
        clamped = sum(w for cs, (_, w) in zip(hot, groups) if cs)
        if not clamped or clamped < MIN_SHARE * lanes:
            return None
        full = (0, loop.extent - 1)
        scope = {**ranges, **inner_ranges, loop.var: full}
        intervals = []
        for c in {structural_key(c): c for cs in hot for c in cs}.values():
            found = [iv for iv in (holds_on(c, loop.var, scope),
                                   holds_on(negate(c), loop.var, scope)) if iv is not None]
            if found:
                intervals.append(max(found, key=_width))
        steady = full
        for iv in sorted(intervals, key=_width, reverse=True):
            met = (max(steady[0], iv[0]), min(steady[1], iv[1]))
            if met[0] <= met[1] and _pays(loop, met):
                steady = met
        return None if steady == full else steady

    def _summary(self, s):
        """``(groups, ranges, lanes)`` of *s*: per vector loop inside it, its conditions (lets
        inside *s* substituted) and the lanes it runs per run of *s*; the ranges of the loops
        inside *s*, widened over loops that share a variable; and all the lanes it runs."""
        got = self._summaries.get(id(s))
        if got is not None:
            return got[1]
        if isinstance(s, For) and not isinstance(s.extent, int):
            result = ([], {}, 0)          # symbolic: no constant range, nothing to partition
        elif isinstance(s, For) and s.kind is ForKind.VECTORIZED:
            conds = _Conditions.of(s.body)
            result = ([(conds.found, s.extent)], {**conds.ranges, s.var: (0, s.extent - 1)},
                      s.extent)
        else:
            groups, ranges, lanes = [], {}, 0
            trips = s.extent if isinstance(s, For) else 1
            for kid in stmt_children(s):
                kid_groups, kid_ranges, kid_lanes = self._summary(kid)
                if isinstance(s, LetStmt):
                    kid_groups = [([substitute(c, {s.var: s.value}) for c in conds], w)
                                  for conds, w in kid_groups]
                groups += [(conds, w * trips) for conds, w in kid_groups]
                lanes += kid_lanes * trips
                for v, (lo, hi) in kid_ranges.items():
                    old = ranges.get(v, (lo, hi))
                    ranges[v] = (min(old[0], lo), max(old[1], hi))
            if isinstance(s, For):
                ranges[s.var] = (0, s.extent - 1)
            result = (groups, ranges, lanes)
        self._summaries[id(s)] = (s, result)
        return result


def _width(iv):
    return iv[1] - iv[0] + 1


def _pays(loop, steady):
    """Whether a steady state *steady* covers enough of *loop* to be worth its copies."""
    need = max(2, (loop.extent + 1) // 2)
    if loop.kind is ForKind.VECTORIZED:
        need = max(need, MIN_VECTOR_STEADY)
    return _width(steady) >= need


class _Conditions(StmtVisitor):
    """The conditions of every clamp, select and guard in the body of a vectorized loop, in
    program order, each with the lets around it substituted, and the ranges of the loops in it
    (outer-loop vectorization leaves serial loops inside; a symbolic one has no range)."""

    def __init__(self):
        self.found = []
        self.lets = []          # (var, value) of the lets around the visited statement
        self.ranges = {}        # var of a loop inside -> (0, extent - 1)

    @classmethod
    def of(cls, s):
        v = cls()
        v.visit(s)
        return v

    def _add(self, conds):
        for c in conds:
            for var, value in reversed(self.lets):       # the innermost let first
                c = substitute(c, {var: value})
            self.found.append(c)

    def visit_expr(self, e):
        self._add(_clamp_conditions(e))

    def visit_IfThenElse(self, s):
        self._add(_leaves(s.cond))
        self.generic_visit(s)

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        self.lets.append((s.var, s.value))
        self.visit(s.body)
        self.lets.pop()

    def visit_For(self, s):
        if isinstance(s.extent, int):
            self.ranges[s.var] = (0, s.extent - 1)
        self.generic_visit(s)


def _clamp_conditions(e):
    """The conditions that decide the index min/max and selects in *e*."""
    for x in walk(e):
        if isinstance(x, E.Binary) and (x.op is E.BinOp.MIN or x.op is E.BinOp.MAX) \
                and x.dtype == dtypes.INDEX:
            yield E.Compare(E.CmpOp.LE if x.op is E.BinOp.MIN else E.CmpOp.GE, x.a, x.b)
        elif isinstance(x, E.Select):
            yield from _leaves(x.cond)


def _leaves(cond):
    """The comparisons and other atoms that ``and``/``or``/``not`` combine in *cond*: deciding
    each one decides the whole, and each may be decided on a different range."""
    if isinstance(cond, E.Logical):
        return _leaves(cond.a) + _leaves(cond.b)
    if isinstance(cond, E.Not):
        return _leaves(cond.a)
    return [cond]
