"""Unroll pass: replicate the body of every ``unrolled`` loop once per iteration.

``MAX_UNROLL`` bounds the copies; a longer unrolled loop is a schedule error that
:mod:`einloop.schedule.verify` reports before lowering, so here it is an internal one.
"""
from ...arith import substitute
from ...errors import InternalError
from ...ir.expr import const
from ...ir.stmt import For, ForKind, seq
from ...ir.visit import map_stmt

MAX_UNROLL = 512


def unroll_loops(stmt):
    def fn(s):
        if not (isinstance(s, For) and s.kind is ForKind.UNROLLED):
            return None
        if s.extent > MAX_UNROLL:
            raise InternalError(f"unrolled loop {s.var.name} of extent {s.extent} is longer than "
                                f"MAX_UNROLL ({MAX_UNROLL}): verify() should have rejected it")
        return seq(*[map_stmt(s.body, expr_fn=lambda e, k=k: substitute(e, {s.var: const(k)}))
                     for k in range(s.extent)])
    return map_stmt(stmt, stmt_fn=fn)
