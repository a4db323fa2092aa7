"""``lower``: a schedule and its argument tensors to a loop-IR function, as a short list of passes.

It starts with :func:`~einloop.schedule.verify.verify` (every legality check that needs the
whole schedule); the steps after it assume a legal schedule.

Set ``EINLOOP_DEBUG=1`` to print the IR after each pass that changed it.
"""
from __future__ import annotations

import os
import sys

from ..ir.stmt import LoweredFunc, Scope
from .passes.partition import partition_loops
from .passes.simplify_stmt import simplify_stmt
from .passes.unroll import unroll_loops
from .passes.unique_names import unique_names
from .passes.vectorize import mark_decided, vectorize_loops
from .nest import NestBuilder, make_buffers, size_local_buffers
from .verify import verify


def _debug(name, stmt, last):
    if os.environ.get("EINLOOP_DEBUG") and str(stmt) != last:
        print(f"--- after {name} ---\n{stmt}", file=sys.stderr)
    return str(stmt) if os.environ.get("EINLOOP_DEBUG") else None


def lower(s, args, name="main", expand_unroll=True) -> LoweredFunc:
    """Lower schedule *s* to a loop-IR function whose parameters are *args*, in that order.

    ``str()`` of the result is readable pseudo-code with parallel/vectorized/unrolled loops
    marked.  ``expand_unroll=False`` keeps unrolled loops as loops (for analysis such as the
    tuner's features: much faster, same loop structure); codegen needs them expanded.
    """
    facts = verify(s, args)
    arg_stages = facts.arg_stages
    buffers, temps = make_buffers(s, facts.args, arg_stages)
    size_local_buffers(s, buffers, facts.bounds)
    last = None
    stmt = NestBuilder(s, facts.bodies, facts.bounds, buffers).build()
    last = _debug("schedule_ops", stmt, last)
    if expand_unroll:
        stmt = unroll_loops(stmt)
        last = _debug("unroll_loops", stmt, last)
    stmt = simplify_stmt(stmt)
    last = _debug("simplify", stmt, last)
    stmt = partition_loops(stmt)
    last = _debug("partition_loops", stmt, last)
    if expand_unroll:       # decided on codegen's loop nest (the tuner's analysis keeps kinds)
        stmt = vectorize_loops(stmt, s)
        last = _debug("vectorize_loops", stmt, last)
    stmt = unique_names(stmt)
    _debug("unique_names", stmt, last)
    if expand_unroll:
        mark_decided(stmt)      # renaming changes no decision: codegen need not re-run the pass
    arg_bufs = tuple(buffers[id(st.origin_op)] for st in arg_stages)
    outputs = tuple(b.name for b, st in zip(arg_bufs, arg_stages) if st.is_compute)
    used_temps = tuple(t for t in temps if t.scope is Scope.TEMP)
    return LoweredFunc(name, arg_bufs, used_temps, stmt, {"outputs": outputs})

