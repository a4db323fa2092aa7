"""Bound inference: the loop extents of every stage and the region an attached stage computes.

Consumers are visited before producers.  A stage computed at loop ``v`` of its consumer must
produce every element that the consumer reads while the loops inside ``v`` run and the loops
outside ``v`` are fixed.  That region is a symbolic interval per axis: a start expression over the
fixed outer loops and a constant extent, so the producer's buffer has a static size.  The start
is clamped into the producer's domain, so a producer never computes outside it.

Attach points nest (Halide's and TVM's compute_at chains): a consumer may itself be computed at
a loop of another stage, and so on up to a root stage.  Regions compose through the chain: a
consumer's loops and region starts are known before its producers' (consumers are visited
first), the loops of every stage the target is computed in bound the fixed variables, and the
loops of every stage between a consumer and the target sweep their ranges.

The schedule is verified first (:mod:`einloop.schedule.verify`): every attach loop exists and
encloses the producer's other consumers, directly or through such a chain.
"""
from __future__ import annotations

from dataclasses import dataclass
import os
import sys
import warnings

from ..arith import region_of, simplify, const_bounds, substitute, reads_of, free_vars
from ..arith.symbolic import provably_inside, provably_nonnegative_expr
from ..errors import InternalError, RegionFallbackWarning, ScheduleError
from ..ir import expr as E
from ..te.tensor import IterKind
from .stage import Split, Fuse, AttachKind


@dataclass
class StageBounds:
    """Per-stage facts lowering needs."""
    extents: dict            # IterVar -> loop extent (roots, intermediates and leaves)
    base: dict               # root IterVar -> expression of its first index (start or region min)
    region_lets: list        # (Var, value Expr) binding region starts, emitted at the attach point
    base_ranges: dict        # Var -> (lo, hi) of the region-start variables
    tails: tuple = ()        # root IterVars whose region may run past a symbolic extent: guarded


def pass_down(stage, root_ext):
    """Extents of all iteration variables given the root extents (TVM's PassDownDomain)."""
    ext = dict(root_ext)
    for rel in stage.relations:
        if isinstance(rel, Split):
            p = ext[rel.parent]
            if not isinstance(p, int):          # symbolic: as Stage.split made them
                ext[rel.outer], ext[rel.inner] = rel.outer.extent, rel.inner.extent
                continue
            if rel.factor is not None:
                inner = min(rel.factor, p)
                outer = -(-p // inner)
            else:
                outer = min(rel.nparts, p)
                inner = -(-p // outer)
            ext[rel.outer], ext[rel.inner] = outer, inner
        else:
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
    return ext


def pass_up(stage, values, ext):
    """Values of all iteration variables from the leaves' values (TVM's PassUpIndex)."""
    val = dict(values)
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            val[rel.parent] = val[rel.outer] * E.as_expr(ext[rel.inner]) + val[rel.inner]
        elif isinstance(rel, Fuse):
            n = E.as_expr(ext[rel.inner])
            val[rel.outer] = val[rel.fused] // n
            val[rel.inner] = val[rel.fused] % n
    return val


def split_guards(stage, val, ext):
    """Conditions that keep a non-dividing split inside its parent's extent."""
    out = []
    for rel in stage.relations:
        if not isinstance(rel, Split):
            continue
        sizes = (ext[rel.outer], ext[rel.inner], ext[rel.parent])
        if not all(isinstance(x, int) for x in sizes) or sizes[0] * sizes[1] > sizes[2]:
            out.append(E.Compare(E.CmpOp.LT, val[rel.parent], E.as_expr(ext[rel.parent])))
    return out


def root_axes(stage):
    return list(stage.op.axis) + list(stage.op.reduce_axis)


def consumer_root_exprs(stage, bounds):
    """Each root axis of *stage* as an expression of its leaf loop variables (absolute index)."""
    b = bounds[stage]
    vals = pass_up(stage, {iv: iv.var for iv in stage.leaf_iter_vars}, b.extents)
    return {iv: simplify(b.base[iv] + vals[iv]) for iv in root_axes(stage)}


def infer_bounds(schedule, bodies):
    """Compute :class:`StageBounds` for every compute stage that has loops."""
    bounds = {}
    for stage in reversed(schedule.stages):
        if not stage.is_compute or stage.attach == AttachKind.INLINE:
            continue
        if stage.attach == AttachKind.AT:
            bounds[stage] = _attached_bounds(stage, schedule, bodies, bounds)
        else:
            root_ext = {iv: iv.extent for iv in root_axes(stage)}
            base = {iv: E.const(iv.start) for iv in root_axes(stage)}
            bounds[stage] = StageBounds(pass_down(stage, root_ext), base, [], {})
    return bounds


def _attached_bounds(stage, schedule, bodies, bounds):
    target = stage.attach_stage
    leaves = target.leaf_iter_vars
    pos = _position(target, stage.attach_ivar)
    ranges = _loop_ranges(attach_chain(target), bounds)
    shape = stage.op.shape
    regions = [None] * len(shape)
    readers = [st for st, body in bodies.items() if st.attach != AttachKind.INLINE
               and st is not stage      # a scan reads its own earlier steps: not a consumer
               and any(r.tensor.op is stage.origin_op for r in reads_of(body))]
    loose = [[] for _ in shape]     # per axis: indices whose region needed a constant fallback
    # Loops of symbolic extent inside the attach point: the region may not depend on them (the
    # buffer would need a symbolic size), but a read that ignores them is fine: a weight panel
    # packed per column block, outside a loop over the blocks of n rows.
    symbolic = {iv.var: f"the loop {iv.name} of symbolic extent {bounds[target].extents[iv]}"
                for iv in leaves[pos + 1:] if iv.var not in ranges}
    for consumer in readers:
        varying = {iv.var: ranges[iv.var] for iv in leaves[pos + 1:] if iv.var in ranges}
        mapping = {iv.var: e for iv, e in consumer_root_exprs(consumer, bounds).items()}
        if consumer is not target:       # inside the loop at pos (verify.py checked)
            chain = attach_chain(consumer)
            inside = chain[:chain.index(target)]
            inner = _loop_ranges(inside, bounds)
            symbolic.update({iv.var: f"its reader {consumer.name}'s loop {iv.name} of symbolic "
                             f"extent {bounds[st].extents[iv]}" for st in inside
                             for iv in st.leaf_iter_vars if iv.var not in inner})
            varying.update(inner)
            starts = _region_starts(inside, bounds)
            mapping = {v: substitute(e, starts) for v, e in mapping.items()}
        scope = dict(ranges)
        scope.update(varying)
        for r in reads_of(bodies[consumer]):
            if r.tensor.op is not stage.origin_op:
                continue
            for d, ix in enumerate(r.indices):
                index = simplify(substitute(ix, mapping), scope)
                _refuse_symbolic_sweep(stage, index, symbolic)
                reg, exact = _read_region(index, varying, scope, shape[d])
                if regions[d] is not None:
                    reg, exact_union = _union(regions[d], reg, scope, shape[d])
                    exact = exact and exact_union
                regions[d] = reg
                if not exact:
                    loose[d].append(ix)
    _warn_whole_axis(stage, regions, loose)
    base, lets, base_ranges, root_ext, tails = {}, [], {}, {}, []
    for d, iv in enumerate(stage.op.axis):
        start, ext = regions[d] if regions[d] is not None else (E.const(0), shape[d])
        if not isinstance(shape[d], int) or not isinstance(ext, int):
            base[iv], inside = _symbolic_region(stage, d, start, ext, target, bounds)
            root_ext[iv] = ext
            if not inside:
                tails.append(iv)
            continue
        ext = min(ext, shape[d])
        start = _clamp(simplify(start, ranges), shape[d] - ext, ranges)
        if not _is_clamped(start):
            base[iv] = start          # affine in the outer loops: keep it visible to simplify
        else:
            var = E.Var(f"{stage.name}.{iv.name}.min")
            lets.append((var, start))
            base[iv] = var
            base_ranges[var] = (0, shape[d] - ext)
        root_ext[iv] = ext
    for iv in stage.op.reduce_axis:
        base[iv] = E.const(iv.start)
        root_ext[iv] = iv.extent
    return StageBounds(pass_down(stage, root_ext), base, lets, base_ranges, tuple(tails))


def _refuse_symbolic_sweep(stage, index, symbolic):
    """A ScheduleError if the read *index* of *stage* varies with a loop of symbolic extent
    inside its attach point (*symbolic*: Var -> description): its region would have a symbolic
    size."""
    swept = [symbolic[v] for v in free_vars(index) if v in symbolic]
    if swept:
        raise ScheduleError(
            f"stage {stage.name} is computed at {stage.attach_stage.name}."
            f"{stage.attach_ivar.name}, and the region read from it varies with {swept[0]} "
            f"inside that point, so {stage.name} would need a buffer of symbolic size; compute it "
            "at a loop inside that one (split the symbolic loop by a constant first), or at the "
            "root")


def _symbolic_region(stage, d, start, ext, target, bounds):
    """``(start, inside)`` of the region of *stage* along axis *d* where its extent (or the
    region's) is symbolic.  No clamp can be sized, so the start must be proven non-negative for
    every value of the extents (else a ScheduleError that says what would work); where its end
    may run past the extent (a tile of 4 rows at the tail of n rows), ``inside`` is False and
    the stage's iterations past the extent are guarded off: the consumer never reads them."""
    shape = stage.op.shape[d]
    ranges = {}                  # the loops around the region, symbolic extents included
    for st in attach_chain(target):
        ext_of = bounds[st].extents
        ranges.update({iv.var: (0, ext_of[iv] - 1) for iv in st.leaf_iter_vars})
    if isinstance(ext, int) and provably_nonnegative_expr(start, ranges):
        last = simplify(start + (ext - 1))
        return start, provably_inside(last, ranges, shape)
    raise ScheduleError(
        f"stage {stage.name} is computed at {stage.attach_stage.name}.{stage.attach_ivar.name}, "
        f"and its region along axis {d} ({start} .. + {ext}) cannot be proven to start inside "
        f"its symbolic extent {shape} for every value; einloop computes such stages at a loop "
        "whose region is a constant number of rows inside the axis (e.g. compute_at the "
        "outer loop over that axis), or at the root (compute_root())")


def attach_chain(stage):
    """*stage* and the stages it is computed in, innermost first: ``[stage, P, Q, ...]`` where
    *stage* is computed at a loop of P, P at a loop of Q, ... up to a root stage."""
    chain = [stage]
    while chain[-1].attach == AttachKind.AT:
        chain.append(chain[-1].attach_stage)
    return chain


def _loop_ranges(stages, bounds):
    """Var -> (lo, hi) of the loops of *stages* and of their region-start variables."""
    ranges = {}
    for st in stages:
        b = bounds[st]
        ranges.update({iv.var: (0, b.extents[iv] - 1) for iv in st.leaf_iter_vars
                       if isinstance(b.extents[iv], int)})      # symbolic: no constant range
        ranges.update(b.base_ranges)
    return ranges


def _region_starts(stages, bounds):
    """Var -> value of the region-start variables of *stages* (a chain, innermost first), each
    in terms of loop variables only, down to the stage the chain is computed at.

    A region start depends on the loops enclosing its stage; seen through its value, a start
    bound outside the producer's loop stays fixed, whereas as an opaque variable it would sweep
    its whole range and make the producer compute its whole axis.
    """
    values = {}
    for st in reversed(stages):
        for var, value in bounds[st].region_lets:
            values[var] = substitute(value, values) if values else value
    return values


def _position(stage, ivar):
    for n, iv in enumerate(stage.leaf_iter_vars):
        if iv is ivar:
            return n
    raise InternalError(f"stage {stage.name} has no loop {ivar.name}, where another stage is "
                        "computed: verify() should have rejected the schedule")


def _clamp(start, hi, ranges):
    """``start`` clamped into [0, hi], simplified away where the range proves it."""
    b = const_bounds(start, ranges)
    if b is not None and b[0] >= 0 and b[1] <= hi:
        return start
    if b is not None and b[0] >= 0:
        return E.Binary(E.BinOp.MIN, start, E.const(hi), start.dtype)
    if b is not None and b[1] <= hi:
        return E.Binary(E.BinOp.MAX, start, E.const(0), start.dtype)
    return E.Binary(E.BinOp.MAX, E.Binary(E.BinOp.MIN, start, E.const(hi), start.dtype),
                    E.const(0),
                    start.dtype)


def _is_clamped(e):
    return isinstance(e, E.Binary) and (e.op is E.BinOp.MAX or e.op is E.BinOp.MIN)


def _wraps_whole_axis(ix, varying, full) -> bool:
    """Is *ix* ``e % full`` with ``e`` sweeping at least *full* values: a read that needs every
    element of an axis of extent *full* (a block of a packed operand not aligned to its
    factor), so that the whole axis is the exact region, not a fallback."""
    if not (isinstance(full, int) and isinstance(ix, E.Binary)
            and ix.op in (E.BinOp.MOD, E.BinOp.TMOD) and isinstance(ix.b, E.Const)
            and ix.b.value == full):
        return False
    reg = region_of(ix.a, varying)
    return reg is not None and reg[1] >= full


def _read_region(ix, varying, scope, full):
    """Region of one read index and whether it is symbolic (not a constant-bounds fallback)."""
    reg = region_of(ix, varying)
    if reg is not None:
        return reg, True
    if _wraps_whole_axis(ix, varying, full):
        return (E.const(0), full), True
    b = const_bounds(ix, scope)
    if b is None:
        return (E.const(0), full), False
    return (E.const(b[0]), b[1] - b[0] + 1), False


def _union(a, b, ranges, full):
    """The hull of regions *a* and *b*, and whether the distance of their starts was bounded."""
    (ma, ea), (mb, eb) = a, b
    d = diff_bounds(mb, ma, ranges)
    if d is not None and d[0] >= 0:
        return (ma, max(ea, d[1] + eb)), True
    if d is not None and d[1] <= 0:
        return (mb, max(ea - d[0], eb)), True
    if d is not None:
        return (E.Binary(E.BinOp.MIN, ma, mb, ma.dtype), max(ea - d[0], d[1] + eb)), True
    ba, bb = const_bounds(ma, ranges), const_bounds(mb, ranges)
    if ba is None or bb is None:
        return (E.const(0), full), False
    lo = min(ba[0], bb[0])
    return (E.const(lo), max(ba[1] + ea, bb[1] + eb) - lo), False


def diff_bounds(a, b, ranges):
    """Inclusive constant bounds of ``a - b`` (int64) over ``ranges``, or None.

    Besides interval arithmetic on the simplified difference, a min/max/select on either side is
    split (``a - max(b1, b2) = min(a - b1, a - b2)``), and two min (or max) terms are compared
    operand-wise (min and max are 1-Lipschitz), so neighbouring clamped reads such as
    ``min(i + 1, n)`` and ``min(i, n)`` are found at distance 0..1, not 0..n.
    """
    out = const_bounds(simplify(a - b, ranges), ranges)
    parts = _split_difference(a, b, ranges)
    if parts is not None:
        out = parts if out is None else (max(out[0], parts[0]), min(out[1], parts[1]))
    return out


def _split_difference(a, b, ranges):
    if _is_clamped(a) and _is_clamped(b) and a.op == b.op:
        d1, d2 = diff_bounds(a.a, b.a, ranges), diff_bounds(a.b, b.b, ranges)
        return _hull(d1, d2)
    for side, e in (("a", a), ("b", b)):
        if isinstance(e, E.Select):
            pair = [(x, b) if side == "a" else (a, x) for x in (e.true_value, e.false_value)]
            return _hull(*(diff_bounds(x, y, ranges) for x, y in pair))
        if _is_clamped(e):
            pair = [(x, b) if side == "a" else (a, x) for x in (e.a, e.b)]
            d1, d2 = (diff_bounds(x, y, ranges) for x, y in pair)
            if d1 is None or d2 is None:
                return None
            # a - max(b1, b2) = min(a - b1, a - b2), a - min(b1, b2) = max(a - b1, a - b2)
            take_min = (e.op is E.BinOp.MIN) == (side == "a")
            pick = min if take_min else max
            return (pick(d1[0], d2[0]), pick(d1[1], d2[1]))
    return None


def _hull(d1, d2):
    if d1 is None or d2 is None:
        return None
    return (min(d1[0], d2[0]), max(d1[1], d2[1]))


def _warn_whole_axis(stage, regions, loose):
    """Warn, once per axis, where an unbounded read makes *stage* compute its whole axis."""
    for d, iv in enumerate(stage.op.axis):
        if regions[d] is None:          # nothing reads the stage (its reader was inlined away)
            continue
        size, ext = stage.op.shape[d], regions[d][1]
        whole = ext is size if not isinstance(size, int) else isinstance(ext, int) and ext >= size
        if not loose[d] or not whole or (isinstance(size, int) and size == 1):
            continue
        shown = list(dict.fromkeys(str(ix) for ix in loose[d]))
        warnings.warn(
            f"stage {stage.name} is computed at {stage.attach_stage.name}."
            f"{stage.attach_ivar.name}, but the region of {stage.name} read at index "
            f"{', '.join(shown[:3])} cannot be bounded along axis {d} ({iv.name}), so each "
            f"iteration of that loop computes the whole axis ({size} elements). Index "
            f"{stage.name} with affine expressions of the loops (min/max clamps of them are fine), "
            f"or compute it at the root (s[{stage.name}].compute_root()). Silence with "
            "warnings.simplefilter('ignore', einloop.errors.RegionFallbackWarning)",
            RegionFallbackWarning, stacklevel=_user_stacklevel())


def _user_stacklevel():
    """The ``stacklevel`` of the innermost caller outside einloop, so warnings point at user code."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def is_reduce(iv):
    return iv.kind is IterKind.REDUCE
