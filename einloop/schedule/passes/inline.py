"""Inline pass: substitute the bodies of compute_inline'd stages into their readers (te level)."""
from ...arith import transform, substitute
from ...ir import expr as E
from ..stage import AttachKind


def inline_bodies(schedule):
    """Map each stage to its op body with every read of an inlined stage replaced by its value."""
    bodies = {}
    inlined = {}                      # id(origin op) -> (axis vars, inlined body)
    for stage in schedule.stages:
        if not stage.is_compute:
            continue

        def fn(x):
            if isinstance(x, E.TensorRead):
                hit = inlined.get(id(x.tensor.op))
                if hit is not None:
                    axis_vars, body = hit
                    return substitute(body, dict(zip(axis_vars, x.indices)))
            return None
        body = transform(stage.op.body, fn) if inlined else stage.op.body
        bodies[stage] = body
        if stage.attach == AttachKind.INLINE:
            inlined[id(stage.origin_op)] = ([iv.var for iv in stage.op.axis], body)
    return bodies
