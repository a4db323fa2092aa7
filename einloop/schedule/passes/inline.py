"""Inline pass: substitute the bodies of compute_inline'd stages into their readers (te level)."""
from ...ir.visit import ExprMutator, substitute
from ..stage import AttachKind


def inline_bodies(schedule):
    """Map each stage to its op body with every read of an inlined stage replaced by its value
    (a multi-output stage's body is the tuple of its outputs' expressions)."""
    bodies = {}
    inlined = {}                      # id(origin op) -> (axis vars, inlined bodies per output)
    for stage in schedule.stages:
        if not stage.is_compute:
            continue
        body = stage.op.body
        if inlined:
            mutator = _Inline(inlined)
            body = tuple(map(mutator.visit, body)) if isinstance(body, tuple) \
                else mutator.visit(body)
        bodies[stage] = body
        if stage.attach == AttachKind.INLINE:
            parts = body if isinstance(body, tuple) else (body,)
            inlined[id(stage.origin_op)] = ([iv.var for iv in stage.op.axis], parts)
    return bodies


class _Inline(ExprMutator):
    """Replace each read of an inlined stage by its body at the read's indices."""

    def __init__(self, inlined):
        super().__init__()
        self.inlined = inlined

    def visit_TensorRead(self, e):
        read = self.generic_visit(e)
        hit = self.inlined.get(id(read.tensor.op))
        if hit is None:
            return read
        axis_vars, parts = hit
        return substitute(parts[read.tensor.value_index], dict(zip(axis_vars, read.indices)))
