"""``s.rfactor(C, axis, factor_axis=0)``: a reduction as a partial one and a short final one.

For ``C[i] = sum(A[i, k], k)`` with ``ko, ki = s[C].split(k, factor=16)``, ``s.rfactor(C, ki)``
adds the stage ``C.rf`` before ``C``::

    C.rf[ki, i] = sum(A[i, ko * 16 + ki], ko)      # where ko * 16 + ki < extent of k
    C[i]        = sum(C.rf[ki, i], ki)

The factored loop becomes a *data* axis of ``C.rf`` (at position *factor_axis* among ``C``'s data
axes), so it can be vectorized or parallelized, which a reduction loop cannot (its iterations
update one accumulator).  ``C.rf`` reduces over ``C``'s other reduction loops, in their current
order; ``C`` reduces over the new axis only.  This is TVM's ``rfactor``: the long-reduction rule of
the auto-scheduler (row softmax, layer norm, a sum over everything) relies on it.

Any reducer works (``te.sum``, ``max``, ``min``, ``prod``, ``te.comm_reducer``): ``C`` combines
the partial results with the reducer itself, which is correct because it is associative and
commutative.  A split that does not divide its extent leaves some partial slots with no element:
the reduction's condition skips them, so they keep the reducer's identity.  A ``where=`` of the
reduction moves into ``C.rf``.  A multi-output reduction (a tuple reducer such as argmax, or
several reducers over the same axes) is factored whole: ``C.rf`` has one output per output of
``C``, and ``rfactor`` returns the tuple of them; the tuple's combine merges the partial tuples.

Ordering.  Before ``rfactor``, the only primitives allowed on ``C`` are ``split``, ``fuse`` and
``reorder`` of its reduction loops (they define *axis* and the reduction order of ``C.rf``) and
``compute_at``/``compute_root`` of ``C`` itself.  Everything else comes after: ``C``'s data loops
and the annotations are kept on ``C`` otherwise, and stages computed at loops of ``C`` would read
what now lives in ``C.rf``.  Afterwards ``s[C].op`` is the final reduction (its reduction axis is
``s[C].op.reduce_axis[0]``) and the returned tensor's stage ``s[RF]`` is an ordinary stage.
"""
from __future__ import annotations

import numbers

from ..arith import substitute
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.expr import LogicOp
from ..te.tensor import ComputeOp, IterKind, IterVar, Tensor
from .bound import pass_down, pass_up, root_axes, split_guards
from .stage import Split, Fuse


def rfactor(s, tensor, axis, factor_axis=0) -> Tensor:
    """Factor loop *axis* of *tensor*'s reduction into the new stage ``<name>.rf`` of schedule *s*;
    rewrite the stage of *tensor* to reduce that stage over it.  Returns the new stage's tensor
    (the tuple of its tensors for a multi-output reduction)."""
    stage = s[tensor]
    axis = _check(s, stage, axis, factor_axis)
    factor_axis = int(factor_axis)
    op, body = stage.op, stage.op.body
    ext = pass_down(stage, {iv: iv.extent for iv in root_axes(stage)})
    reduce_leaves = [iv for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE]
    taken = set()
    data = [_fresh(iv.name, iv.extent, IterKind.DATA, taken) for iv in op.axis]
    new_data = _fresh(axis.name, ext[axis], IterKind.DATA, taken)
    data.insert(factor_axis, new_data)
    rf_reduce = [_fresh(iv.name, ext[iv], IterKind.REDUCE, taken)
                 for iv in reduce_leaves if iv is not axis]
    leaf_values = {axis: new_data.var}
    leaf_values.update(zip([iv for iv in reduce_leaves if iv is not axis],
                           (iv.var for iv in rf_reduce)))
    vals = pass_up(stage, leaf_values, ext)
    mapping = {iv.var: nv.var for iv, nv in zip(op.axis, (d for d in data if d is not new_data))}
    mapping.update((iv.var, vals[iv] + E.const(iv.start) if iv.start else vals[iv])
                   for iv in op.reduce_axis)
    parts = body if isinstance(body, tuple) else (body,)
    conds = split_guards(stage, vals, ext)
    if parts[0].condition is not None:
        conds.append(substitute(parts[0].condition, mapping))
    cond = None
    for c in conds:
        cond = c if cond is None else E.logical(LogicOp.AND, cond, c)
    rf_parts = tuple(_partial(p, substitute(p.source, mapping), rf_reduce, cond) for p in parts)
    rf_op = ComputeOp(f"{stage.name}.rf", data, _one_or_tuple(rf_parts), rf_reduce)
    rfs = tuple(rf_op.output(n) for n in range(rf_op.num_outputs))

    final = IterVar(E.Var(axis.name), 0, ext[axis], IterKind.REDUCE)
    index = [iv.var for iv in op.axis]
    index.insert(factor_axis, final.var)
    final_body = tuple(E.Reduce(p.reducer, rf[tuple(index)], (final,), None, p.dtype)
                       for p, rf in zip(parts, rfs))
    stage.op = ComputeOp(op.name, op.axis, _one_or_tuple(final_body), (final,), op.attrs)
    stage.all_iter_vars = list(op.axis) + [final]
    stage.leaf_iter_vars = list(op.axis) + [final]
    stage.relations = []
    s._insert_stage(rf_op, before=stage)
    return _one_or_tuple(rfs)


def _partial(part, source, rf_reduce, cond):
    """One output of the partial stage: *part*'s reduction of *source* over the remaining
    reduction loops, or (none left) the source itself, the identity where *cond* fails."""
    if rf_reduce:
        return E.Reduce(part.reducer, source, tuple(rf_reduce), cond, part.dtype)
    if cond is not None:
        return E.Select(cond, source, part.reducer.identity(part.dtype), part.dtype)
    return source


def _one_or_tuple(items):
    return items[0] if len(items) == 1 else tuple(items)


def _fresh(name, extent, kind, taken):
    out, n = name, 1
    while out in taken:
        out, n = f"{name}{n}", n + 1
    taken.add(out)
    return IterVar(E.Var(out), 0, extent, kind)


def _check(s, stage, axis, factor_axis):
    """*axis* as a reduction leaf of *stage*, or a ScheduleError saying what is allowed."""
    where = f"rfactor of {stage.name}"
    stage._not_extern("rfactor")
    if not stage.is_compute or not isinstance(stage.op.bodies[0], E.Reduce):
        what = "a placeholder (an input)" if not stage.is_compute else "not a reduction"
        hint = (f"; after cache_write, rfactor the cache stage {stage.name}.local"
                if stage.is_compute and stage.op is not stage.origin_op else "")
        raise ScheduleError(f"{where}: {stage.name} is {what}; rfactor factors a loop of a "
                            f"reduction (te.sum, te.max, ...){hint}")
    ndim = len(stage.op.axis)
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, numbers.Integral) \
            or not 0 <= factor_axis <= ndim:
        raise ScheduleError(f"{where}: factor_axis is where the factored axis goes among the "
                            f"{ndim} data axes of {stage.name}, an integer in 0..{ndim}; got "
                            f"{factor_axis!r}")
    axis = stage._leaf(axis, "rfactor")
    if axis.kind is not IterKind.REDUCE:
        raise ScheduleError(f"{where}: {axis.name} is a data axis; rfactor a reduction loop "
                            f"({_reduce_leaves(stage)})")
    _check_order(stage, where)
    for other in s.stages:
        if other.attach_stage is stage:
            raise ScheduleError(
                f"{where}: stage {other.name} is computed at loop {other.attach_ivar.name} of "
                f"{stage.name}; call rfactor before compute_at, then compute {other.name} at a "
                f"loop of {stage.name}.rf (which now reads what {stage.name} read)")
    return axis


def _check_order(stage, where):
    allowed = ("only split, fuse and reorder of its reduction loops may come before rfactor; "
               "call rfactor first, then schedule both stages")
    data = set(map(id, stage.op.axis))
    for rel in stage.relations:
        touched = (rel.parent,) if isinstance(rel, Split) else (rel.outer, rel.inner) \
            if isinstance(rel, Fuse) else ()
        if any(id(iv) in data for iv in touched):
            raise ScheduleError(f"{where}: its data axis {touched[0].name} was already split or "
                                f"fused; {allowed}")
    if stage.annotations:
        iv, kind = next(iter(stage.annotations.items()))
        raise ScheduleError(f"{where}: loop {iv.name} is already {kind.value}; {allowed}")
    leaves = stage.leaf_iter_vars
    if [id(iv) for iv in leaves[:len(stage.op.axis)]] != [id(iv) for iv in stage.op.axis]:
        raise ScheduleError(f"{where}: the loops were reordered to "
                            f"{', '.join(iv.name for iv in leaves)}, moving a data loop; "
                            f"{allowed}")


def _reduce_leaves(stage):
    return ", ".join(iv.name for iv in stage.leaf_iter_vars if iv.kind is IterKind.REDUCE)
