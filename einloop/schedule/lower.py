"""``lower``: a schedule and its argument tensors to a loop-IR function, as a short list of passes.

Set ``EINLOOP_DEBUG=1`` to print the IR after each pass that changed it.
"""
from __future__ import annotations

import os
import sys

from ..errors import BuildError
from ..te.tensor import Tensor, PlaceholderOp
from ..ir.stmt import LoweredFunc, Scope
from .passes.inline import inline_bodies
from .passes.partition import partition_loops
from .passes.simplify_stmt import simplify_stmt
from .passes.unroll import unroll_loops
from .passes.unique_names import unique_names
from .bound import infer_bounds
from .nest import NestBuilder, make_buffers, size_local_buffers
from .stage import AttachKind


def _debug(name, stmt, last):
    if os.environ.get("EINLOOP_DEBUG") and str(stmt) != last:
        print(f"--- after {name} ---\n{stmt}", file=sys.stderr)
    return str(stmt) if os.environ.get("EINLOOP_DEBUG") else None


def _check_args(s, args):
    if isinstance(args, Tensor):
        args = [args]
    if not isinstance(args, (list, tuple)):
        raise BuildError(f"args must be a list of the kernel's tensors (inputs and outputs, in "
                         f"call order), got {args!r}")
    args = list(args)
    for a in args:
        if not isinstance(a, Tensor):
            raise BuildError(f"args must be the tensors of the kernel's signature, got {a!r}")
    for n, a in enumerate(args):
        if any(b.op is a.op for b in args[:n]):
            raise BuildError(f"args list {a.name} twice; each tensor is one argument")
    arg_stages = [s[a] for a in args]
    for st in arg_stages:
        if st.attach == AttachKind.INLINE:
            raise BuildError(f"{st.name} is in args but was compute_inline'd, so it has no "
                             f"buffer; call s[{st.name}].compute_root() or drop it from args")
    for st in s.stages:
        if st.is_output and st not in arg_stages:
            raise BuildError(f"the output {st.name} is not in args; add it so the kernel can "
                             "return it")
    return args, arg_stages


def lower(s, args, name="main", expand_unroll=True) -> LoweredFunc:
    """Lower schedule *s* to a loop-IR function whose parameters are *args*, in that order.

    ``str()`` of the result is readable pseudo-code with parallel/vectorized/unrolled loops
    marked.  ``expand_unroll=False`` keeps unrolled loops as loops (for analysis such as the
    tuner's features: much faster, same loop structure); codegen needs them expanded.
    """
    args, arg_stages = _check_args(s, args)
    bodies = inline_bodies(s)
    for st in s.stages:
        if isinstance(st.op, PlaceholderOp) and st not in arg_stages and _is_read(s, st, bodies):
            raise BuildError(f"the input {st.name} is read by the computation but is not in "
                             f"args; add it to the argument list")
    buffers, temps = make_buffers(s, args, arg_stages)
    bounds = infer_bounds(s, bodies)
    size_local_buffers(s, buffers, bounds)
    last = None
    stmt = NestBuilder(s, bodies, bounds, buffers).build()
    last = _debug("schedule_ops", stmt, last)
    if expand_unroll:
        stmt = unroll_loops(stmt)
        last = _debug("unroll_loops", stmt, last)
    stmt = simplify_stmt(stmt)
    last = _debug("simplify", stmt, last)
    stmt = partition_loops(stmt)
    last = _debug("partition_loops", stmt, last)
    stmt = unique_names(stmt)
    _debug("unique_names", stmt, last)
    arg_bufs = tuple(buffers[id(st.origin_op)] for st in arg_stages)
    outputs = tuple(b.name for b, st in zip(arg_bufs, arg_stages) if st.is_compute)
    used_temps = tuple(t for t in temps if t.scope is Scope.TEMP)
    return LoweredFunc(name, arg_bufs, used_temps, stmt, {"outputs": outputs})


def _is_read(s, stage, bodies):
    from ..arith import reads_of
    for st, body in bodies.items():
        if st.attach != AttachKind.INLINE and any(r.tensor.op is stage.origin_op
                                                   for r in reads_of(body)):
            return True
    return False
