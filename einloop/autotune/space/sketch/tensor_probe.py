"""The tensorize rule's probe: which intrinsics each tiled stage is offered.

Run by the space generator before the rules define their knobs (a module of its own: it applies
whole plans, which the rules cannot import).  For every tiled stage and every intrinsic of the
target, the tensorized sketch is applied to a fresh schedule at two register tiles
(:data:`PROBE_TILES`), its tile judged by :func:`~einloop.schedule.tensorize.mismatch` and the
schedule lowered; an intrinsic that passes is offered, one that does not is skipped with its
reason (:class:`TensorCandidates`), never raised.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ....errors import Error
from ....schedule.lower import lower
from ....schedule.schedule import create_schedule
from ....ir import expr as E
from ....ir.visit import reads_of
from ....te.tensor import PlaceholderOp
from ....te.tensor_intrin import lookup
from .analysis import Role
from .apply import apply_plan
from .knob_names import KnobKind, knob_name
from .plan import plan_of
from .tensor_amx import is_amx, shape_reason as amx_shape_reason
from .tensor_apply import tensor_axes_ok, weight_read


@dataclass
class TensorCandidates:
    """The intrinsics the rule offers per tiled stage (by name, best first), the
    ``(stage, intrinsic, reason)`` of every one it tried and skipped, and of those the
    ``(stage, intrinsic)`` pairs skipped because the intrinsic takes other types (operands
    or accumulator): no schedule would change that."""
    offered: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    computes_other: set = field(default_factory=set)


def tensor_candidates(an) -> TensorCandidates:
    """The rule's candidates on *an*, computed once and kept as ``an.tensor_candidates``
    (where :mod:`.tensor_rules` reads them)."""
    got = an.tensor_candidates
    if got is None:
        got = TensorCandidates()
        tiled = [f for f in an.stages() if f.role is Role.TILED]
        for f in tiled if an.machine.intrinsics else ():
            why, reads_views = _shape_reason(f), _inlinable_operand(an, f)
            for name in an.machine.intrinsics:
                intrin = lookup(name)
                # the AMX sketch packs both operands, so a view it reads is inlined into the
                # copy; the register-tile sketches read A in place, from memory
                reason = why or (None if is_amx(intrin) else reads_views) or _probe(an, f,
                                                                                  intrin)
                if reason is None:
                    got.offered.setdefault(f.name, []).append(name)
                    continue
                got.skipped.append((f.name, name, reason))
                if _computes_other(f, intrin):
                    got.computes_other.add((f.name, name))
        an.tensor_candidates = got
    return got


def _computes_other(f, intrin) -> bool:
    """Does *intrin* compute other types than stage *f* whatever the schedule: another
    accumulator type, or none of the stage's operand types (a sketch may widen an operand, so
    one shared type is not a mismatch)?"""
    body = f.op.body
    if type(body) is not E.Reduce or body.dtype != intrin.reduce.dtype:
        return True
    theirs = {t.dtype for t in intrin.inputs}
    return not theirs & {r.tensor.dtype for r in reads_of(body)}


def _shape_reason(f):
    """Why stage *f* cannot have a tensorized sketch's loop shape, or None."""
    if not tensor_axes_ok(f):
        return "it needs a row and a lanes data axis and a reduction, of constant extents"
    if weight_read(f.op) is None:
        return (f"no operand of {f.name} is indexed by its last data axis and its last "
                "reduction axis alone (the weight packed into the intrinsic's tiles)")
    return None


def _inlinable_operand(an, f):
    """Why a sketch reading its operands in place cannot take stage *f*: an operand that
    may be inlined into it (no memory to read), or None."""
    for t in f.op.input_tensors:
        if not isinstance(t.op, PlaceholderOp) and an[t.op].role in (Role.INLINE,
                                                                      Role.FLEXIBLE):
            return (f"it reads {t.op.name}, which may be inlined into it; the intrinsic reads "
                    "its operands from memory")
    return None


#: the register tiles (rows, intrinsic tiles) the rule tries before offering an intrinsic:
#: one intrinsic tile (an accumulator stage wherever the lanes divide the columns), and three
#: (the stage tiled in place wherever three tiles do not divide them)
PROBE_TILES = ((1, 1), (2, 3))


def _probe(an, f, intrin):
    """Why the sketch of stage *f* with *intrin* does not tensorize, or None: the sketch of each
    :data:`PROBE_TILES` applied to a fresh schedule, the tile judged by
    :func:`~einloop.schedule.tensorize.mismatch`, then lowered."""
    if is_amx(intrin):                   # one block shape: the register tile knobs unused
        why = amx_shape_reason(f, intrin)
        return why if why is not None else _probe_tile(an, f, intrin, 1, 1)
    for rows, tiles in PROBE_TILES:
        why = _probe_tile(an, f, intrin, rows, tiles)
        if why is not None:
            return why
    return None


def _probe_tile(an, f, intrin, rows, tiles):
    """Why the sketch of *f* with *intrin* at a register tile of *rows* x *tiles* does not
    tensorize (the mismatch, or the einloop error applying or lowering it), or None."""
    plan = plan_of(an, {knob_name(KnobKind.TENSORIZE, f): intrin.name,
                        knob_name(KnobKind.TENSOR_ROWS, f): rows,
                        knob_name(KnobKind.TENSOR_TILES, f): tiles})
    outputs = list(an.dag.outputs)
    try:
        s = apply_plan(create_schedule(outputs), an, plan)
        if plan[f.op].tensor_skipped is None:
            lower(s, list(an.dag.inputs) + outputs)      # checks the tile on the real buffers
    except Error as exc:
        return f"{type(exc).__name__}: {exc}"
    return plan[f.op].tensor_skipped
