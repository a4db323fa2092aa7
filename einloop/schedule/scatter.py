"""Scheduling and lowering of scatter stages (:mod:`einloop.te.scatter`).

Lowering.  A scatter stage is two loop nests: one over its whole output storing ``init``, then
its own loops (free axes and domain, in the stage's leaf order, split and annotated as scheduled)
around ``out[index] = combine(out[index], value)``, under its condition.

Parallel and vector loops.  A free axis is the whole index of one output dimension, so two of its
iterations always write different elements: it may be split, vectorized and run in parallel like
any data loop.  Two iterations of a domain loop may write the same element (repeated ids, equal
pixels), so a domain loop is never parallel nor vectorized (``Stage.parallel`` refuses it and
points here) unless it is first *privatized*: ``s.rfactor(H, ro)`` on a scatter, after
``ro, ri = s[H].split(r, nparts=P)``, gives every iteration of ``ro`` its own copy of the output
(Halide's rfactor of a histogram)::

    H.rf[ro, b...] = identity;   H.rf[ro, index(ro, ri)] op= value      # ro is a free axis now
    H[b...]        = init;       H[b...] op= H.rf[ro, b...]  over ro    # b... are free axes

Both are scatter stages: ``ro`` of ``H.rf`` and every axis of ``H`` may be parallel.

What a scatter stage does not support is refused by the primitives (:mod:`.scatter_checks`).
"""
from __future__ import annotations

from ..arith import substitute
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import LogicOp
from ..ir.stmt import For, ForKind, IfThenElse, Load, Store, seq
from ..te.scatter import ScatterOp, unpack_update
from ..te.tensor import IterKind, IterVar, Tensor
from .bound import pass_down, pass_up, root_axes, split_guards
from .scatter_checks import leaf_names


# lowering ---------------------------------------------------------------------------------------

def scatter_nest(builder, stage, loops):
    """The statements of scatter *stage*: the init nest, then its update nest (*builder*: the
    :class:`~.nest.NestBuilder`; *loops*: the stage's ``_StageLoops``)."""
    op = stage.op
    buf = builder.buffers[id(stage.origin_op)]
    value, index, cond = unpack_update(builder.bodies[stage])
    value = builder._loads(substitute(value, loops.absolute))
    index = [builder._loads(substitute(ix, loops.absolute)) for ix in index]
    flat = builder._flat(stage.origin_op, buf, index, None)
    update = Store(buf, flat, op.reducer.combine(Load(buf, flat, op.dtype), value))
    if cond is not None:
        update = IfThenElse(builder._loads(substitute(cond, loops.absolute)), update)
    nest = builder._main_nest(loops, update, None, 0) if loops.leaves else update
    return seq(_init_nest(builder, stage, buf), loops.guard(nest, -1))


def _init_nest(builder, stage, buf):
    """Loops over the whole output of *stage* storing its initial value."""
    shape = stage.op.shape
    vars_ = [E.Var(f"{stage.name}.init{d}") for d in range(len(shape))]
    body = Store(buf, builder._flat(stage.origin_op, buf, vars_, None), stage.op.init)
    for v, n in reversed(list(zip(vars_, shape))):
        body = For(v, n, ForKind.SERIAL, body)
    return body


# privatization ------------------------------------------------------------------------------------

def privatize(s, tensor, axis, factor_axis=0) -> Tensor:
    """``s.rfactor`` of a scatter: domain loop *axis* of *tensor*'s stage becomes the first,
    free axis of a new scatter stage ``<name>.rf`` holding one copy of the output per iteration
    of *axis*; *tensor*'s stage then combines the copies (see the module doc)."""
    stage = s[tensor]
    axis = _check(s, stage, axis, factor_axis)
    op = stage.op
    ext = pass_down(stage, {iv: iv.extent for iv in root_axes(stage)})
    others = [iv for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE and iv is not axis]
    copy = IterVar(E.Var(axis.name), 0, ext[axis], IterKind.DATA)
    free = [IterVar(E.Var(iv.name), 0, iv.extent, IterKind.DATA) for iv in op.axis]
    domain = [IterVar(E.Var(iv.name), 0, ext[iv], IterKind.REDUCE) for iv in others]
    vals = pass_up(stage, dict([(axis, copy.var)] + [(o, d.var) for o, d in zip(others, domain)]),
                   ext)
    mapping = {iv.var: nv.var for iv, nv in zip(op.axis, free)}
    mapping.update((iv.var, vals[iv] + E.const(iv.start) if iv.start else vals[iv])
                   for iv in op.reduce_axis)
    value, index, cond = unpack_update(op.body)
    conds = split_guards(stage, vals, ext) + ([] if cond is None else [cond])
    new_cond = None
    for c in conds:
        c = substitute(c, mapping)
        new_cond = c if new_cond is None else E.logical(LogicOp.AND, new_cond, c)
    rf_op = ScatterOp(f"{stage.name}.rf", (ext[axis],) + tuple(op.shape), [copy] + free, domain,
                      (copy.var,) + tuple(substitute(ix, mapping) for ix in index),
                      substitute(value, mapping), op.reducer, new_cond,
                      op.reducer.identity(op.dtype))
    rf = rf_op.output()
    stage.op = _combine_copies(op, rf, axis.name)
    stage.all_iter_vars = list(stage.op.axis) + list(stage.op.reduce_axis)
    stage.leaf_iter_vars = list(stage.all_iter_vars)
    stage.relations = []
    s._insert_stage(rf_op, before=stage)
    return rf


def _combine_copies(op, rf, name):
    """The scatter combining the private copies *rf* into the output of *op* (from its init)."""
    out = [IterVar(E.Var(f"ax{d}"), 0, n, IterKind.DATA) for d, n in enumerate(op.shape)]
    k = IterVar(E.Var(name), 0, rf.shape[0], IterKind.REDUCE)
    index = tuple(iv.var for iv in out)
    return ScatterOp(op.name, op.shape, out, [k], index, rf[(k.var,) + index], op.reducer, None,
                     op.init)


def _check(s, stage, axis, factor_axis):
    """*axis* as a domain loop of scatter *stage* that rfactor may privatize."""
    where = f"rfactor of the scatter {stage.name}"
    if factor_axis != 0:
        raise ScheduleError(f"{where}: the private copies are the first dimension of "
                            f"{stage.name}.rf; factor_axis must be 0, got {factor_axis!r}")
    axis = stage._leaf(axis, "rfactor")
    if axis.kind is not IterKind.REDUCE:
        raise ScheduleError(f"{where}: {axis.name} is a free axis, which needs no "
                            f"privatization (parallelize it directly); rfactor a domain loop "
                            f"({leaf_names(stage, IterKind.REDUCE)})")
    if not any(iv.kind is IterKind.REDUCE and iv is not axis for iv in stage.leaf_iter_vars):
        raise ScheduleError(f"{where}: {axis.name} is its only domain loop, so every iteration "
                            f"would get its own copy of the output; split it first (ro, ri = "
                            f"s[{stage.name}].split({axis.name}, nparts=P)) and rfactor ro")
    data = {id(iv) for iv in stage.op.axis}
    for rel in stage.relations:
        parts = [getattr(rel, a, None) for a in ("parent", "outer", "inner")]
        if any(id(p) in data for p in parts if p is not None):
            raise ScheduleError(f"{where}: a free axis was already split or fused; only split, "
                                "fuse and reorder of its domain loops may come before rfactor")
    if stage.annotations:
        iv, kind = next(iter(stage.annotations.items()))
        raise ScheduleError(f"{where}: loop {iv.name} is already {kind.value}; annotate the "
                            "loops after rfactor")
    if any(other.attach_stage is stage for other in s.stages):
        raise ScheduleError(f"{where}: a stage is computed at one of its loops; call rfactor "
                            "before compute_at")
    return axis
