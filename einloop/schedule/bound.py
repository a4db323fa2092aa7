"""Bound inference: the loop extents of every stage and the region an attached stage computes.

Consumers are visited before producers.  A stage computed at loop ``v`` of its consumer must
produce every element that the consumer reads while the loops inside ``v`` run and the loops
outside ``v`` are fixed.  That region is a symbolic interval per axis: a start expression over the
fixed outer loops and a constant extent, so the producer's buffer has a static size.  The start
is clamped into the producer's domain, so a producer never computes outside it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arith import region_of, simplify, const_bounds, substitute, reads_of
from ..errors import ScheduleError
from ..te import expr as E
from ..te.tensor import IterKind
from .stage import Split, Fuse, AttachKind


@dataclass
class StageBounds:
    """Per-stage facts lowering needs."""
    extents: dict            # IterVar -> loop extent (roots, intermediates and leaves)
    base: dict               # root IterVar -> expression of its first index (start or region min)
    region_lets: list        # (Var, value Expr) binding region starts, emitted at the attach point
    base_ranges: dict        # Var -> (lo, hi) of the region-start variables


def pass_down(stage, root_ext):
    """Extents of all iteration variables given the root extents (TVM's PassDownDomain)."""
    ext = dict(root_ext)
    for rel in stage.relations:
        if isinstance(rel, Split):
            p = ext[rel.parent]
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
            val[rel.parent] = val[rel.outer] * E.const(ext[rel.inner]) + val[rel.inner]
        elif isinstance(rel, Fuse):
            n = E.const(ext[rel.inner])
            val[rel.outer] = val[rel.fused] // n
            val[rel.inner] = val[rel.fused] % n
    return val


def split_guards(stage, val, ext):
    """Conditions that keep a non-dividing split inside its parent's extent."""
    out = []
    for rel in stage.relations:
        if isinstance(rel, Split) and ext[rel.outer] * ext[rel.inner] > ext[rel.parent]:
            out.append(E.Compare("<", val[rel.parent], E.const(ext[rel.parent])))
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
    tb = bounds[target]
    leaves = target.leaf_iter_vars
    pos = _position(target, stage.attach_ivar)
    ranges = {iv.var: (0, tb.extents[iv] - 1) for iv in leaves}
    ranges.update(tb.base_ranges)
    shape = stage.op.shape
    regions = [None] * len(shape)
    readers = [st for st, body in bodies.items() if st.attach != AttachKind.INLINE
               and any(r.tensor.op is stage.origin_op for r in reads_of(body))]
    for consumer in readers:
        varying = {iv.var: ranges[iv.var] for iv in leaves[pos + 1:]}
        if consumer is not target:
            _check_inside(stage, consumer, target, pos)
            cb = bounds[consumer]
            varying.update({iv.var: (0, cb.extents[iv] - 1) for iv in consumer.leaf_iter_vars})
            varying.update(cb.base_ranges)
        scope = dict(ranges)
        scope.update(varying)
        mapping = {iv.var: e for iv, e in consumer_root_exprs(consumer, bounds).items()}
        for r in reads_of(bodies[consumer]):
            if r.tensor.op is not stage.origin_op:
                continue
            for d, ix in enumerate(r.indices):
                reg = region_of(simplify(substitute(ix, mapping), scope), varying, scope)
                if reg is None:
                    reg = (E.const(0), shape[d])
                regions[d] = reg if regions[d] is None else _union(regions[d], reg, scope, shape[d])
    base, lets, base_ranges, root_ext = {}, [], {}, {}
    for d, iv in enumerate(stage.op.axis):
        start, ext = regions[d] if regions[d] is not None else (E.const(0), shape[d])
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
    return StageBounds(pass_down(stage, root_ext), base, lets, base_ranges)


def _position(stage, ivar):
    for n, iv in enumerate(stage.leaf_iter_vars):
        if iv is ivar:
            return n
    raise ScheduleError(f"loop {ivar.name} of stage {stage.name}, where another stage is "
                        f"computed, is no longer one of its loops "
                        f"({', '.join(iv.name for iv in stage.leaf_iter_vars)})")


def _check_inside(stage, consumer, target, pos):
    """A consumer other than the attach target must run inside the producer's loop scope."""
    ok = consumer.attach == AttachKind.AT and consumer.attach_stage is target
    if ok and _position(target, consumer.attach_ivar) >= pos:
        return
    where = (f"at {consumer.attach_stage.name}.{consumer.attach_ivar.name}"
             if consumer.attach == AttachKind.AT else "at the root")
    raise ScheduleError(
        f"stage {stage.name} is computed at {target.name}.{stage.attach_ivar.name}, but its "
        f"consumer {consumer.name} is computed {where}, outside that loop; compute "
        f"{consumer.name} at {target.name}.{stage.attach_ivar.name} (or a loop inside it), or "
        f"compute {stage.name} at {consumer.name}")


def _clamp(start, hi, ranges):
    """``start`` clamped into [0, hi], simplified away where the range proves it."""
    b = const_bounds(start, ranges)
    if b is not None and b[0] >= 0 and b[1] <= hi:
        return start
    if b is not None and b[0] >= 0:
        return E.Binary("min", start, E.const(hi), start.dtype)
    if b is not None and b[1] <= hi:
        return E.Binary("max", start, E.const(0), start.dtype)
    return E.Binary("max", E.Binary("min", start, E.const(hi), start.dtype), E.const(0),
                    start.dtype)


def _is_clamped(e):
    return isinstance(e, E.Binary) and e.op in ("max", "min")


def _union(a, b, ranges, full):
    (ma, ea), (mb, eb) = a, b
    d = simplify(mb - ma)
    if isinstance(d, E.Const):
        lo = min(0, d.value)
        hi = max(ea, d.value + eb)
        return (simplify(ma + E.const(lo)), hi - lo)
    ba = const_bounds(ma, ranges)
    bb = const_bounds(mb, ranges)
    if ba is None or bb is None:
        return (E.const(0), full)
    lo = min(ba[0], bb[0])
    hi = max(ba[1] + ea, bb[1] + eb)
    return (E.const(lo), hi - lo)


def is_reduce(iv):
    return iv.kind is IterKind.REDUCE
