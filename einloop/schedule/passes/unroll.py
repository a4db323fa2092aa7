"""Unroll pass: replicate the body of every ``unrolled`` loop once per iteration.

``MAX_UNROLL`` bounds the copies; a longer unrolled loop is a schedule error that
:mod:`einloop.schedule.verify` reports before lowering, so here it is an internal one.
"""
from ...arith import transform
from ...errors import InternalError
from ...ir.expr import Var, const
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
        unchanged = {}
        return seq(*[_copy(s.body, s.var, k, unchanged) for k in range(s.extent)])
    return map_stmt(stmt, stmt_fn=fn)


def _copy(body, var, k, unchanged):
    """*body* with *var* replaced by *k*.  *unchanged* (``transform`` memo entries, filled by
    the first copy) holds the subexpressions without *var*: the same in every copy, so each is
    walked once per loop rather than once per copy."""
    value = {var: const(k)}
    memo = dict(unchanged)

    def fn(x):
        return value.get(x) if type(x) is Var else None

    out = map_stmt(body, expr_fn=lambda e: transform(e, fn, memo))
    if not unchanged:
        unchanged.update((key, hit) for key, hit in memo.items() if hit[0] is hit[1])
    return out
