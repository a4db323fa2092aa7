"""External stages (``te.extern``) in a schedule: their call statement and their legality check.

An external stage has no loops: lowering emits one :class:`~einloop.ir.stmt.ExternCall` at the
root, in stage order (after its producers' nests, before its consumers'), passing the whole
buffers of its inputs and output and every dimension of each.  Its producers must therefore
have whole buffers when it runs: stored at the root (not inlined, not computed at a loop of
another stage), in the row-major layout the C function expects, and an input placeholder must be
a kernel argument.
"""
from __future__ import annotations

from ..errors import BuildError, ScheduleError
from ..ir import expr as E
from ..ir.stmt import ExternCall
from ..te.tensor import PlaceholderOp
from .buffer_keys import buffer_key
from .stage import AttachKind


def extern_call(stage, buffers) -> ExternCall:
    """The call of external *stage*, with *buffers* (:func:`.buffer_keys.buffer_key` ->
    Buffer) of a verified schedule: each input the output of its op that it names."""
    op = stage.op
    inputs = tuple(buffers[buffer_key(t.op, t.value_index)] for t in op.inputs)
    extents = tuple(E.as_expr(d) for t in op.inputs + (op.output(),) for d in t.shape)
    return ExternCall(op.symbol, op.library, inputs, buffers[id(stage.origin_op)], extents)


def extern_inputs_are_stored(f):
    """Every input of an external stage has a whole row-major buffer when the stage runs (see
    the module); a placeholder it reads is an argument."""
    for st in f.schedule.stages:
        if not st.is_extern:
            continue
        for t in st.op.inputs:
            src = f.schedule[t]
            _check_input(f, st, src)


def _check_input(f, stage, src):
    call = f"the external stage {stage.name} (the C function {stage.op.symbol})"
    if isinstance(src.op, PlaceholderOp):
        if src not in f.arg_stages:
            raise BuildError(f"the input {src.name} is read by {call} but is not in args; add "
                             "it to the argument list")
        return
    if src.attach == AttachKind.INLINE:
        raise ScheduleError(f"stage {src.name} is read by {call}, which reads its whole buffer, "
                            f"but it is compute_inline'd; call s[{src.name}].compute_root()")
    if src.attach == AttachKind.AT:
        raise ScheduleError(f"stage {src.name} is read by {call}, which reads its whole buffer, "
                            f"but it is computed at {src.attach_stage.name}."
                            f"{src.attach_ivar.name}; call s[{src.name}].compute_root()")
    if src.storage_dims is not None:
        raise ScheduleError(f"stage {src.name} is read by {call}, which expects a row-major "
                            f"buffer, but storage_order reorders its layout; drop the "
                            "storage_order")
