"""``lower``: a schedule and its argument tensors to a loop-IR function, as a short list of passes.

It starts with :func:`~einloop.schedule.verify.verify` (every legality check that needs the
whole schedule); the steps after it assume a legal schedule.

Set ``EINLOOP_DEBUG=1`` to print the IR after each pass that changed it.
"""
from __future__ import annotations

import os
import re
import sys

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.stmt import Allocate, For, LoweredFunc, Scope
from ..ir.visit import stmt_exprs, walk, walk_stmt
from ..te.tensor import PlaceholderOp
from .passes.partition import partition_loops
from .passes.simplify_stmt import simplify_stmt
from .passes.tail_split import split_tails
from .passes.unroll import unroll_loops
from .passes.unique_names import unique_names
from .passes.vectorize import mark_decided, vectorize_loops
from .narrow_index import narrow_index_accumulators
from .nest import NestBuilder, buffer_key, make_buffers, size_local_buffers
from .verify import verify


def _debug(name, stmt, last):
    if os.environ.get("EINLOOP_DEBUG") and str(stmt) != last:
        print(f"--- after {name} ---\n{stmt}", file=sys.stderr)
    return str(stmt) if os.environ.get("EINLOOP_DEBUG") else None


def kernel_name(args) -> str:
    """The name of a kernel given none: its first output's (the first computed tensor among
    *args*), made a C identifier (``T.add`` -> ``T_add``); ``main`` when no argument is one."""
    out = next((t.name for t in args if getattr(t, "op", None) is not None
                and not isinstance(t.op, PlaceholderOp)), "")
    out = re.sub(r"[^A-Za-z0-9_]", "_", out)
    return ("_" + out if out[:1].isdigit() else out) or "main"


def lower(s, args, name=None, expand_unroll=True) -> LoweredFunc:
    """Lower schedule *s* to a loop-IR function whose parameters are *args*, in that order.
    The function is called *name*, by default after the first output (:func:`kernel_name`).

    ``str()`` of the result is readable pseudo-code with parallel/vectorized/unrolled loops
    marked.  ``expand_unroll=False`` keeps unrolled loops as loops (for analysis such as the
    tuner's features: much faster, same loop structure); codegen needs them expanded.
    """
    facts = verify(s, args)            # first: it says what is wrong with *args*
    name = name or kernel_name(args)
    arg_stages = facts.arg_stages
    buffers, temps = make_buffers(s, facts.args, arg_stages)
    size_local_buffers(s, buffers, facts.bounds)
    bodies, buffers, temps, narrowed = narrow_index_accumulators(s, facts.bodies, buffers,
                                                                 temps)
    last = None
    stmt = NestBuilder(s, bodies, facts.bounds, buffers, narrowed).build()
    last = _debug("schedule_ops", stmt, last)
    if expand_unroll:
        stmt = unroll_loops(stmt)
        last = _debug("unroll_loops", stmt, last)
    stmt = simplify_stmt(stmt)
    last = _debug("simplify", stmt, last)
    stmt = partition_loops(stmt)
    last = _debug("partition_loops", stmt, last)
    stmt = split_tails(stmt)
    last = _debug("split_tails", stmt, last)
    if expand_unroll:       # decided on codegen's loop nest (the tuner's analysis keeps kinds)
        stmt = vectorize_loops(stmt, s)
        last = _debug("vectorize_loops", stmt, last)
    stmt = unique_names(stmt)
    _debug("unique_names", stmt, last)
    if expand_unroll:
        mark_decided(stmt)      # renaming changes no decision: codegen need not re-run the pass
    arg_bufs = tuple(buffers[buffer_key(t.op, t.value_index)] for t in facts.args)
    outputs = tuple(b.name for b, st in zip(arg_bufs, arg_stages)
                    if not isinstance(st.op, PlaceholderOp))
    used_temps = tuple(t for t in temps if t.scope is Scope.TEMP)
    # a temp whose shape has a derived symbolic extent ((n + 5) // 6 rows of a packed copy) is
    # allocated by the kernel, which can compute its size; the runtime allocates the others
    derived = tuple(t for t in used_temps if any(
        not isinstance(d, (int, E.ShapeVar)) for d in t.shape))
    for t in derived:
        stmt = Allocate(t, stmt)
    used_temps = tuple(t for t in used_temps if t not in derived)
    return LoweredFunc(name, arg_bufs, used_temps, stmt, {"outputs": outputs},
                       shape_vars(arg_bufs, used_temps + derived, stmt))


def shape_vars(args, temps, body) -> tuple:
    """The symbolic extents of a kernel, in the order it takes them: by first appearance in the
    arguments' shapes.  Each must appear there, since a call reads its value off an argument."""
    found = {}
    for b in args:
        for d in b.shape:
            if isinstance(d, E.ShapeVar):
                found.setdefault(id(d), d)
    used = {}
    for st in walk_stmt(body):
        exprs = stmt_exprs(st) + ((st.extent,) if isinstance(st, For)
                                  and not isinstance(st.extent, int) else ())
        for e in exprs:
            used.update((id(x), x) for x in walk(e) if isinstance(x, E.ShapeVar))
    for t in temps:
        used.update((id(d), d) for d in t.shape if isinstance(d, E.ShapeVar))
    missing = [v.name for k, v in used.items() if k not in found]
    if missing:
        raise ScheduleError(
            f"the kernel uses the symbolic extent(s) {', '.join(missing)}, which no argument's "
            "shape has, so a call could not know their values; pass a tensor whose shape has "
            "them as an argument")
    return tuple(found.values())

