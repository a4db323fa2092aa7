"""Unroll pass: replicate the body of every ``unrolled`` loop once per iteration."""
from ...arith import substitute
from ...errors import ScheduleError
from ...ir.expr import const
from ...ir.stmt import For, ForKind, seq
from ...ir.visit import map_stmt

MAX_UNROLL = 512


def unroll_loops(stmt):
    def fn(s):
        if not (isinstance(s, For) and s.kind is ForKind.UNROLLED):
            return None
        if s.extent > MAX_UNROLL:
            raise ScheduleError(f"unroll of loop {s.var.name} with extent {s.extent} would copy its "
                                f"body {s.extent} times (limit {MAX_UNROLL}); split it and unroll "
                                "the inner loop")
        return seq(*[map_stmt(s.body, expr_fn=lambda e, k=k: substitute(e, {s.var: const(k)}))
                     for k in range(s.extent)])
    return map_stmt(stmt, stmt_fn=fn)
