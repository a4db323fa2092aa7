"""Vectorize pass: decide which ``vectorized`` loops become SIMD lanes and which ``parallel`` loops
run on threads, so that the lowered IR says what the kernel will do and codegen can trust it.

- A vectorized loop becomes lanes unless a store could make lanes interfere: a store to a
  lane-invariant address (``C[i] = C[i] + A[i, k]`` vectorized over ``k``) is a reduction, and a
  store through an index that is not affine in the lanes (``C[f // 4]``) into a buffer the loop
  also reads may see several lanes update one element.  Such a loop becomes ``serial``, with a
  :class:`~einloop.errors.VectorizeWarning` that says why.
- Loops inside a vectorized loop stay loops, their bodies run on all lanes at once (TVM's and
  Halide's outer-loop vectorization: ``C[i, j] += A[i, k] * B[k, j]`` vectorized over ``j``
  around the loop over ``k`` is a vector accumulator over a serial reduction, the usual register
  tile).  That interchanges the lanes with the inner loops, so the loop becomes lanes only where
  the order cannot show (:func:`why_not_lanes`): the inner loops' extents are the same for every
  lane; no lane writes what another lane reads or writes, at any inner iteration (each stored
  index is affine in the lanes and the inner loops, its lanes' elements apart from the inner
  loops' ones, and the buffer is read only at the stored indices); nothing is allocated inside
  (a buffer per lane); and no inner loop is itself vectorized or parallel.
- A parallel loop inside another parallel loop becomes ``serial``, with a
  :class:`~einloop.errors.ParallelWarning`: the outer loop's threads already share the work.

A vectorized loop of one iteration becomes serial silently (it has nothing to spread).  A loop
warns once per lowering, however many copies of it the unroll and partition passes made.  ``EINLOOP_DEBUG=1`` prints every decision to stderr (codegen's re-check of an already
decided function prints nothing).
"""
from __future__ import annotations

import math
import os
import sys
import warnings
import weakref

from ...arith.linear import from_linear, stride_in, terms_of
from ...ir import dtypes
from ...errors import ParallelWarning, VectorizeWarning
from ...ir.expr import Load
from ...ir.printer import expr_str
from ...ir.stmt import For, ForKind
from ...ir.visit import StmtMutator, StmtVisitor, structural_key, substitute, walk
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
    if scan.refused is not None:
        return scan.refused
    for store, stride, _ in scan.stores:
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
    if scan.inner:
        return _inner_loops_hold(loop, scan)
    return None


def _inner_loops_hold(loop, scan):
    """None if running *loop*'s lanes in lockstep through its inner loops computes what the
    serial loop does (see the module docstring), else ``(reason, advice)``."""
    name = loop.var.name
    advice = "vectorize the innermost loop instead"
    for inner in scan.inner:
        if inner.kind in (ForKind.VECTORIZED, ForKind.PARALLEL):
            return (f"it contains the {inner.kind.value} loop {inner.var.name}",
                    "vectorize one loop of the nest")
        if not isinstance(inner.extent, int) and stride_in(inner.extent, scan.steps) != 0:
            return (f"the extent {expr_str(inner.extent)} of the inner loop {inner.var.name} "
                    "differs from lane to lane", advice)
    extents = {inner.var: inner.extent for inner in scan.inner}
    by_buffer = {}
    for store, stride, index in scan.stores:
        by_buffer.setdefault(id(store.buffer), []).append((store, stride, index))
    stored = {}
    for stores in by_buffer.values():
        if not _lanes_apart(stores, loop, extents):
            store = stores[0][0]
            return (f"across its inner loops, a store to {store.buffer.name} "
                    f"({expr_str(store.index)}) may write an element another lane writes or "
                    "reads", advice)
        stored[id(stores[0][0].buffer)] = {structural_key(index) for _, _, index in stores}
    for buf, index in scan.loads:
        if id(buf) in stored and structural_key(index) not in stored[id(buf)]:
            return (f"it reads {buf.name}[{expr_str(index)}], which it also writes at other "
                    "indices, so a lane could read what another lane wrote in an earlier "
                    "inner iteration", advice)
    return None


def _lanes_apart(stores, loop, extents) -> bool:
    """Whether two different lanes of *loop* never store to the same element through the
    indices of *stores* (``(store, lane stride, index)`` of one buffer) whatever the iterations
    of the inner loops (*extents*: var -> extent).  The indices must be one affine form up to a
    constant offset, with one lane stride; then either the lanes' stride exceeds the span of the
    inner loops' terms plus the offsets' spread, or (one offset) the lanes' span stays below
    the step of every inner term."""
    strides = {stride for _, stride, _ in stores}
    if len(strides) != 1 or not next(iter(strides)):
        return False
    stride = next(iter(strides))
    forms, offsets = set(), []
    for _, _, index in stores:
        if index.dtype != dtypes.INDEX:
            return False
        terms = terms_of(index)
        offsets.append(terms.pop(None, 0))
        forms.add(structural_key(from_linear(terms)))
    if len(forms) != 1:
        return False
    index = stores[0][2]
    inner = []
    for var, extent in extents.items():
        k = stride_in(index, {var: 1})
        if k is None:
            return False
        if k == 0:
            continue
        if not isinstance(extent, int):
            return False
        inner.append((abs(k), extent))
    spread = max(offsets) - min(offsets)
    span = sum(k * (extent - 1) for k, extent in inner) + spread
    if abs(stride) > span:
        return True
    return bool(inner) and spread == 0 \
        and abs(stride) * (loop.extent - 1) < math.gcd(*(k for k, _ in inner))


class _LaneScan(StmtVisitor):
    """Collects, in a vectorized loop's body, each store with the lane stride of its index
    (:func:`~einloop.arith.linear.stride_in`: an int, 0 when lane-invariant, None when not
    affine), the buffers read and each read with its index, the inner loops, and a reason the
    loop cannot be lanes whatever its stores (``refused``: an allocation inside)."""

    def __init__(self, loop):
        self.steps = {loop.var: 1}      # variable -> lane stride (None: varies, not affinely)
        self.stores, self.loaded, self.loads, self.inner = [], set(), [], []
        self.refused = None
        self.lets = {}                  # let variable inside the loop -> its value, lets expanded

    def visit_expr(self, e):
        for x in walk(e):
            if type(x) is Load:
                self.loaded.add(id(x.buffer))
                self.loads.append((x.buffer, self.expanded(x.index)))

    def expanded(self, e):
        """*e* with the lets around it inside the loop replaced by their values (so its
        dependence on the inner loops shows)."""
        return substitute(e, self.lets) if self.lets else e

    def visit_For(self, s):
        self.inner.append(s)
        self.generic_visit(s)

    def visit_Allocate(self, s):
        if self.refused is None:
            self.refused = (f"it allocates {s.buffer.name} inside (one buffer per lane)",
                            "compute that stage outside the vectorized loop")
        self.generic_visit(s)

    def visit_IntrinsicCall(self, s):
        if self.refused is None:
            self.refused = (f"it calls the tensor intrinsic {s.symbol}, which works on whole "
                            "tiles, not lanes", "vectorize no loop around a tensorized one")
        self.generic_visit(s)

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        stride = stride_in(s.value, self.steps)
        saved, saved_lets = self.steps, self.lets
        if stride != 0:
            self.steps = {**saved, s.var: stride}
        self.lets = {**saved_lets, s.var: self.expanded(s.value)}
        self.visit(s.body)
        self.steps, self.lets = saved, saved_lets

    def visit_Store(self, s):
        self.visit_expr(s.index)
        self.visit_expr(s.value)
        self.stores.append((s, stride_in(s.index, self.steps), self.expanded(s.index)))
