"""Vectorize pass: decide which ``vectorized`` loops become SIMD lanes and which ``parallel`` loops
run on threads, so that the lowered IR says what the kernel will do and codegen can trust it.

- A vectorized loop becomes lanes unless it contains another loop, or a store could make lanes
  interfere: a store to a lane-invariant address (``C[i] = C[i] + A[i, k]`` vectorized over ``k``)
  is a reduction, and a store through an index that is not affine in the lanes (``C[f // 4]``)
  into a buffer the loop also reads may see several lanes update one element.  Such a loop
  becomes ``serial``, with a :class:`~einloop.errors.VectorizeWarning` that says why.
- A parallel loop inside another parallel loop becomes ``serial``, with a
  :class:`~einloop.errors.ParallelWarning`: the outer loop's threads already share the work.

A vectorized loop of one iteration becomes serial silently (it has nothing to spread).  A loop
warns once per lowering, however many copies of it the unroll and partition passes made.  ``EINLOOP_DEBUG=1`` prints every decision to stderr (codegen's re-check of an already
decided function prints nothing).
"""
from __future__ import annotations

import os
import sys
import warnings
import weakref

from ...arith.linear import stride_in
from ...errors import ParallelWarning, VectorizeWarning
from ...ir.expr import Load
from ...ir.printer import expr_str
from ...ir.stmt import For, ForKind
from ...ir.visit import StmtMutator, StmtVisitor, walk
from ..bound import _user_stacklevel


def vectorize_loops(stmt, schedule=None):
    """*stmt* with every vectorized loop that cannot become lanes, and every parallel loop nested
    in another one, made serial (warning once per loop).  Running it again changes
    nothing, so codegen runs it on every function it is given (hand-made IR included).

    The *schedule* names the stage of each loop in the messages; without it (or for a loop
    variable it does not know) the stage is named after the buffers the loop stores to.
    """
    if schedule is None and stmt in _decided:
        return stmt
    stage_of = {} if schedule is None else {
        iv.var: st.name for st in schedule.stages for iv in st.leaf_iter_vars}
    decider = _Decider(stage_of)
    out = decider.visit(stmt)
    if decider.debug and (schedule is not None or out is not stmt):   # not codegen's re-check
        for line in decider.log:
            print(line, file=sys.stderr)
    for category, message in decider.warnings.values():
        warnings.warn(message, category, stacklevel=_user_stacklevel())
    return out


#: statements whose loops are decided (lower's results): codegen's re-check skips them, since
#: running the pass again would change nothing and say nothing.  Weak: no statement is kept alive.
_decided = weakref.WeakSet()


def mark_decided(stmt):
    """Record that *stmt* came out of :func:`vectorize_loops` (up to renaming variables), so
    that codegen need not run the pass on it again."""
    _decided.add(stmt)
    return stmt


class _Decider(StmtMutator):
    def __init__(self, stage_of):
        self.stage_of = stage_of
        self.outer_parallel = None      # the parallel loop whose threads run the current body
        self.warnings = {}              # (category, stage, loop name) -> (category, message)
        self.debug = bool(os.environ.get("EINLOOP_DEBUG"))
        self.log = []                   # the decisions, for EINLOOP_DEBUG

    def visit_For(self, s):
        kind = s.kind
        if kind is ForKind.VECTORIZED:
            kind = self._vectorized(s)
        elif kind is ForKind.PARALLEL and self.outer_parallel is not None:
            kind = self._nested_parallel(s)
        saved = self.outer_parallel
        if kind is ForKind.PARALLEL:
            self.outer_parallel = s
        try:
            body = self.visit(s.body)
        finally:
            self.outer_parallel = saved
        return s if body is s.body and kind is s.kind else For(s.var, s.extent, kind, body)

    def _vectorized(self, loop):
        if not isinstance(loop.extent, int):
            self._say(loop, "serial: symbolic extent")
            self._warn(VectorizeWarning, loop,
                       f"the vectorized loop {loop.var.name} runs serially because its extent "
                       f"{loop.extent} is symbolic (SIMD lanes are a constant number); split it by "
                       "the vector width and vectorize the inner loop.  Silence with "
                       "warnings.simplefilter('ignore', einloop.VectorizeWarning)")
            return ForKind.SERIAL
        if loop.extent < 2:
            self._say(loop, "serial (one iteration)")
            return ForKind.SERIAL
        reason = why_not_lanes(loop)
        if reason is None:
            self._say(loop, f"SIMD lanes ({loop.extent})")
            return ForKind.VECTORIZED
        why, advice = reason
        self._say(loop, f"serial: {why}")
        self._warn(VectorizeWarning, loop,
                   f"the vectorized loop {loop.var.name} runs serially because {why}; {advice}.  "
                   "Silence with warnings.simplefilter('ignore', einloop.VectorizeWarning)")
        return ForKind.SERIAL

    def _nested_parallel(self, loop):
        outer = self.outer_parallel.var.name
        self._say(loop, f"serial: inside the parallel loop {outer}")
        self._warn(ParallelWarning, loop,
                   f"the parallel loop {loop.var.name} runs serially because it is nested in the "
                   f"parallel loop {outer}, whose threads already share the work; parallelize one "
                   "loop of the nest (fuse the two loops and parallelize the fused one to spread "
                   "both).  Silence with warnings.simplefilter('ignore', einloop.ParallelWarning)")
        return ForKind.SERIAL

    def _warn(self, category, loop, text):
        """One warning per loop of the schedule, however many copies unrolling and partitioning
        made of it (the first copy's message is kept)."""
        stage = self._stage(loop)
        self.warnings.setdefault((category, stage, loop.var.name),
                                 (category, f"stage {stage}: {text}"))

    def _stage(self, loop):
        name = self.stage_of.get(loop.var)
        if name is None:
            stores = _Stores()
            stores.visit(loop.body)
            name = ", ".join(dict.fromkeys(b.name for b in stores.buffers)) or "?"
        return name

    def _say(self, loop, decision):
        if self.debug:
            self.log.append(f"--- vectorize_loops: stage {self._stage(loop)}, {loop.kind.value} "
                            f"loop {loop.var.name}: {decision}")


class _Stores(StmtVisitor):
    def __init__(self):
        self.buffers = []

    def visit_Store(self, s):
        self.buffers.append(s.buffer)


# can a loop become lanes? ----------------------------------------------------------------------

def why_not_lanes(loop: For):
    """None if *loop* can become SIMD lanes without changing what the serial loop computes,
    else ``(reason, advice)``.  The rules are the vector emitter's: see the module docstring."""
    scan = _LaneScan(loop)
    scan.visit(loop.body)
    name = loop.var.name
    if scan.inner is not None:
        return (f"it contains the loop {scan.inner.var.name}",
                "vectorize the innermost loop instead")
    for store, stride in scan.stores:
        where = f"{store.buffer.name}[{expr_str(store.index)}]"
        if stride == 0:
            return (f"the store to {where} does not depend on the lane (every lane would update "
                    f"the same element: a reduction along {name})",
                    "vectorize a data axis instead and keep reduction axes outside it")
        if stride is None and id(store.buffer) in scan.loaded:
            return (f"the store to {where} is not affine in {name} (only +, - and * by a "
                    f"constant are) and the loop also reads {store.buffer.name}, so several "
                    "lanes could update one element",
                    f"vectorize a loop that indexes {store.buffer.name} affinely")
    return None


class _LaneScan(StmtVisitor):
    """Collects, in a vectorized loop's body, each store with the lane stride of its index
    (:func:`~einloop.arith.linear.stride_in`: an int, 0 when lane-invariant, None when not
    affine), the buffers read, and the first inner loop."""

    def __init__(self, loop):
        self.steps = {loop.var: 1}      # variable -> lane stride (None: varies, not affinely)
        self.stores, self.loaded, self.inner = [], set(), None

    def visit_expr(self, e):
        self.loaded.update(id(x.buffer) for x in walk(e) if type(x) is Load)

    def visit_For(self, s):
        if self.inner is None:
            self.inner = s

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        stride = stride_in(s.value, self.steps)
        saved = self.steps
        if stride != 0:
            self.steps = {**saved, s.var: stride}
        self.visit(s.body)
        self.steps = saved

    def visit_Store(self, s):
        self.visit_expr(s.index)
        self.visit_expr(s.value)
        self.stores.append((s, stride_in(s.index, self.steps)))
