"""Narrow index accumulators: a tuple reduction's int64 index kept in int32 lanes.

An argmax carries an int64 index beside a float32 value.  In vector code the comparisons of the
values give masks of 8 lanes (AVX2) and those of the indices masks of 4, and converting masks
between the two widths costs about as much as the reduction itself.  When the index is only a
label, the compiler keeps it in int32, the width of the values, and widens it where it is read:

- the combine uses component *j* only as a label: its two operands are compared with each other
  (``x[j] < y[j]``, any comparison) and the new ``x[j]``/``y[j]`` is picked by ``Select`` s
  between them, and nothing else (no arithmetic, no other component, no constant);
- every value the reduction puts in it fits in int32: the source's interval (over the static
  extents of the stage's axes) is inside int32, or it is a read of another narrowed accumulator;
- the identity fits in int32, or is int64's largest (smallest) value, kept as int32's largest
  (smallest), which then no element may take.  This encoding keeps the order and the equality
  of every value, so the comparisons, and the result, are those of the int64 combine;
- the accumulator lives in a buffer of the kernel's own (an rfactor's partial stage, a
  cache_write stage, a stage computed at a loop): a caller's int64 output stays int64, and its
  reduction reads the narrowed partials widened (``Cast``, and the identity mapped back);
- no external C function reads it (it would see int32 data).

The accumulator's buffer then has dtype int32 in the lowered IR, where the decision shows; a
read of it by an int64 reader is widened at the load (:meth:`Narrowing.widen`); a reduction
that is narrowed too reads it as it is.  Symbolic extents cannot be bounded, so their
reductions keep int64 indices.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ..arith.bounds import const_bounds
from ..ir import dtypes
from ..ir.expr import Buffer, Cast, CmpOp, Compare, Reduce, Scope, Select, TensorRead, Var, const
from ..ir.visit import children, transform
from ..te.tuple_reduce import ReducerPart, TupleCombiner, is_part
from .buffer_keys import buffer_key

#: the index dtypes narrowed, each to the dtype it is kept in
NARROWER = {"int64": "int32"}


@dataclass(frozen=True)
class Narrowing:
    """How values of dtype *wide* are kept in *narrow* lanes: unchanged, except *wide*'s
    largest value kept as *narrow*'s largest (*top*), its smallest as *narrow*'s smallest
    (*bottom*); no value kept otherwise takes the narrow extreme so used."""
    wide: str
    narrow: str
    top: bool
    bottom: bool

    def fits(self, lo, hi) -> bool:
        """Whether every value in ``lo..hi`` is kept as itself."""
        nlo, nhi = dtypes.int_range(self.narrow)
        return nlo + self.bottom <= lo and hi <= nhi - self.top

    def narrowed(self, value: int) -> int:
        """The narrow form of the constant *value* (in range, or a wide extreme)."""
        wlo, whi = dtypes.int_range(self.wide)
        nlo, nhi = dtypes.int_range(self.narrow)
        return nhi if value == whi and self.top else nlo if value == wlo and self.bottom \
            else value

    def widen(self, e):
        """The *wide* value kept as the narrow expression *e*."""
        wlo, whi = dtypes.int_range(self.wide)
        nlo, nhi = dtypes.int_range(self.narrow)
        out = Cast(self.wide, e)
        if self.top:
            out = Select(Compare(CmpOp.EQ, e, const(nhi, self.narrow)), const(whi, self.wide),
                         out, self.wide)
        if self.bottom:
            out = Select(Compare(CmpOp.EQ, e, const(nlo, self.narrow)), const(wlo, self.wide),
                         out, self.wide)
        return out


def narrow_index_accumulators(schedule, bodies, buffers, temps):
    """Decide which accumulators of tuple reductions to keep narrow (see the module).

    Returns ``(bodies, buffers, temps, narrowed)``: the stage bodies with those reductions
    retyped (their narrowed sources read raw), the buffers dict and the temps list with their
    buffers narrowed, and ``buffer key -> Narrowing``.  Nothing changes where nothing fits."""
    narrowed = {}
    off_limits = _read_by_externs(schedule)
    bodies = dict(bodies)
    for stage in schedule.stages:
        body = bodies.get(stage)
        if not (isinstance(body, tuple) and is_part(body[0])):
            continue
        for j in range(len(body)):
            key = buffer_key(stage.origin_op, j)
            buf = buffers.get(key)
            if buf is None or buf.scope is Scope.ARG or key in off_limits:
                continue
            done = _narrow_part(stage, bodies[stage], j, narrowed)
            if done is not None:
                bodies[stage], narrowed[key] = done
    if not narrowed:
        return bodies, buffers, temps, narrowed
    buffers, temps = _narrow_buffers(buffers, temps, narrowed)
    if os.environ.get("EINLOOP_DEBUG"):
        for key, nar in narrowed.items():
            print(f"--- narrow_index: {buffers[key].name} accumulates {nar.wide} indices in "
                  f"{nar.narrow}", file=sys.stderr)
    return bodies, buffers, temps, narrowed


def _read_by_externs(schedule) -> set:
    """The buffer keys of the tensors an external stage reads (its C function takes them as
    they are declared)."""
    return {buffer_key(t.op, t.value_index) for st in schedule.stages if st.is_extern
            for t in st.op.inputs}


def _narrow_buffers(buffers, temps, narrowed):
    """*buffers* and *temps* with the buffers of *narrowed* keys in their narrow dtype."""
    buffers, swap = dict(buffers), {}
    for key, nar in narrowed.items():
        old = buffers[key]
        buffers[key] = swap[id(old)] = Buffer(old.name, nar.narrow, old.shape, old.scope)
    return buffers, [swap.get(id(t), t) for t in temps]


def _narrow_part(stage, parts, j, narrowed):
    """``(parts, Narrowing)``: *parts* (one tuple reduction of *stage*) with component *j*
    narrowed, or None if it may not be (see the module)."""
    part = parts[j]
    narrow = NARROWER.get(part.dtype)
    if narrow is None or not _worth_it(parts, j, narrow):
        return None
    comb = part.reducer.combiner
    ident = comb.identities[j]
    if not _labels_only(comb, j) or type(ident.value) is not int:
        return None
    wlo, whi = dtypes.int_range(part.dtype)
    nar = Narrowing(part.dtype, narrow, ident.value == whi, ident.value == wlo)
    if not (nar.top or nar.bottom or nar.fits(ident.value, ident.value)):
        return None
    source = _narrow_source(stage, part.source, nar, narrowed)
    if source is None:
        return None
    comb = _retyped(comb, j, nar)
    new = tuple(Reduce(ReducerPart(comb, n), source if n == j else p.source, p.axes,
                       p.condition, narrow if n == j else p.dtype)
                for n, p in enumerate(parts))
    return new, nar


def _worth_it(parts, j, narrow) -> bool:
    """Whether the other components are no wider than *narrow*: then the narrow index has their
    lanes (a float64 value has int64's, and narrowing would split its masks instead)."""
    width = dtypes.bits(narrow)
    return any(dtypes.bits(p.dtype) <= width for n, p in enumerate(parts) if n != j)


def _labels_only(comb: TupleCombiner, j) -> bool:
    """Whether *comb* uses component *j* only as a label: compares its two operands with each
    other, and makes the new component from Selects between them, nothing else."""
    x, y = comb.lhs[j], comb.rhs[j]

    def picked(e):                  # a Select tree whose leaves are x and y
        if e is x or e is y:
            return True
        return isinstance(e, Select) and _compared_only(e.cond, x, y) \
            and picked(e.true_value) and picked(e.false_value)

    return picked(comb.combined[j]) and all(
        _compared_only(e, x, y) for n, e in enumerate(comb.combined) if n != j)


def _compared_only(e, x, y, seen=None) -> bool:
    """Whether *x* and *y* occur in *e* only as the two operands of comparisons."""
    seen = set() if seen is None else seen
    if id(e) in seen:
        return True
    seen.add(id(e))
    if e is x or e is y:
        return False
    if isinstance(e, Compare) and (e.a is x or e.a is y) and (e.b is x or e.b is y):
        return True
    return all(_compared_only(c, x, y, seen) for c in children(e))


def _narrow_source(stage, source, nar, narrowed):
    """The narrow form of a reduction's *source*: a read of an accumulator narrowed alike, read
    raw; else the source cast, if its interval over the stage's axes fits; else None."""
    if isinstance(source, TensorRead):
        key = buffer_key(source.tensor.op, source.tensor.value_index)
        if narrowed.get(key) == nar:
            return TensorRead(source.tensor, source.indices, nar.narrow)
    ranges = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        if isinstance(iv.start, int) and isinstance(iv.extent, int) and iv.extent > 0:
            ranges[iv.var] = (iv.start, iv.start + iv.extent - 1)
    bounds = const_bounds(source, ranges)
    if bounds is None or not nar.fits(*bounds):
        return None
    return Cast(nar.narrow, source)


def _retyped(comb: TupleCombiner, j, nar) -> TupleCombiner:
    """*comb* with component *j* in *nar*'s narrow dtype: its operands, the Selects that pick
    it, and its identity."""
    x, y = comb.lhs[j], comb.rhs[j]
    nx, ny = Var(x.name, nar.narrow), Var(y.name, nar.narrow)

    def fn(e):
        if e is x or e is y:
            return nx if e is x else ny
        if isinstance(e, Select) and e.dtype != nar.narrow \
                and e.true_value.dtype == e.false_value.dtype == nar.narrow:
            return Select(e.cond, e.true_value, e.false_value, nar.narrow)
        return None

    memo = {}
    combined = tuple(transform(e, fn, memo) for e in comb.combined)
    ident = const(nar.narrowed(comb.identities[j].value), nar.narrow)
    swap = (lambda seq, v: seq[:j] + (v,) + seq[j + 1:])
    return TupleCombiner(comb.name, swap(comb.dtypes, nar.narrow), swap(comb.lhs, nx),
                         swap(comb.rhs, ny), combined, swap(comb.identities, ident))
