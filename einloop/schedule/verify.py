"""Legality checks that need the whole schedule: one ordered list, run at the start of ``lower()``.

Some misuses only show once the whole schedule and the kernel's arguments are known: a loop
made longer by a later compute_at region, a stage computed at a loop that a later primitive
took away, an input missing from ``args``.  Each is a small function in :data:`CHECKS`, run in
that order by :func:`verify` (the order lowering met them in before they were gathered here, so
a schedule with several problems reports the same one).  Everything after ``verify`` (bound
inference, loop-nest construction, the passes) assumes a verified schedule and raises
:class:`~einloop.errors.InternalError` where that assumption breaks.

Where the other checks live, and why:

* ``Stage``/``Schedule`` primitives (stage.py, schedule.py): the arguments of one call (an axis
  of this stage and still a loop, a positive split factor, no annotation of a reduction axis as
  parallel or vector, compute_at a stage that reads this one, no inlining of a reduction or an
  output, ...).  They stay eager so that the error points at the offending call.
* unsupported.py: TVM/Halide primitives einloop lacks, when the attribute is looked up.
* te/: declaration errors (shapes, dtypes, reductions), when the tensor is declared.
* codegen (``emit._check_func`` and ``_allocate``, ``arith``, ``mathlib``, ``irtypes``): facts
  of the ``LoweredFunc`` it is given, which need not come from ``lower()`` (buffer scopes and
  dtypes, duplicate buffer names, a buffer beyond the address space, an operator a dtype
  lacks).  They check IR, not a schedule.
* passes/vectorize.py: whether a vectorized loop can be SIMD lanes is decided on the IR and is
  not an error (the loop runs serially with a warning).
"""
from __future__ import annotations

import functools
import os

from ..errors import BuildError, ScheduleError
from ..ir.dtypes import bits
from ..ir.stmt import Buffer, ForKind, Scope
from ..ir.visit import reads_of
from ..te.tensor import PlaceholderOp, Tensor
from .bound import attach_chain, infer_bounds
from .extern import extern_inputs_are_stored
from .passes.inline import inline_bodies
from .passes.unroll import MAX_UNROLL
from .stage import AttachKind
from .scan import scan_stages_are_placed, scans_keep_their_order


class Facts:
    """A schedule, the kernel's arguments, and what lowering derives from them: each derived
    fact is computed once, on first use, by a check or by lowering after it."""

    def __init__(self, schedule, args):
        self.schedule = schedule
        self.args = [args] if isinstance(args, Tensor) else args  # a list once checked

    @functools.cached_property
    def arg_stages(self):
        return [self.schedule[a] for a in self.args]

    @functools.cached_property
    def bodies(self):
        """Stage -> its body with compute_inline'd stages substituted."""
        return inline_bodies(self.schedule)

    @functools.cached_property
    def bounds(self):
        """Stage -> :class:`~einloop.schedule.bound.StageBounds` (may warn: region fallback)."""
        return infer_bounds(self.schedule, self.bodies)


def verify(schedule, args) -> Facts:
    """Raise the first problem :data:`CHECKS` finds in *schedule* lowered with *args*; return
    the facts the checks computed, for lowering to reuse."""
    facts = Facts(schedule, args)
    for check in CHECKS:
        check(facts)
    return facts


# the kernel's arguments --------------------------------------------------------------------------

def args_are_tensors(f):
    if not isinstance(f.args, (list, tuple)):
        raise BuildError(f"args must be a list of the kernel's tensors (inputs and outputs, in "
                         f"call order), got {f.args!r}")
    f.args = list(f.args)
    for a in f.args:
        if not isinstance(a, Tensor):
            raise BuildError(f"args must be the tensors of the kernel's signature, got {a!r}")


def args_are_distinct(f):
    for n, a in enumerate(f.args):
        if any(b.op is a.op and b.value_index == a.value_index for b in f.args[:n]):
            raise BuildError(f"args list {a.name} twice; each tensor is one argument")


def args_are_stored(f):
    """Every argument is a schedule stage (else ScheduleError) with a buffer (not inlined)."""
    for st in f.arg_stages:
        if st.attach == AttachKind.INLINE:
            raise BuildError(f"{st.name} is in args but was compute_inline'd, so it has no "
                             f"buffer; call s[{st.name}].compute_root() or drop it from args")


def outputs_are_args(f):
    for st in f.schedule.stages:
        if st.is_output and st not in f.arg_stages:
            raise BuildError(f"the output {st.name} is not in args; add it so the kernel can "
                             "return it")
    for t in f.schedule.outputs:        # each output of a multi-output stage
        if not any(a.op is t.op and a.value_index == t.value_index for a in f.args):
            raise BuildError(f"the output {t.name} is not in args; add it so the kernel can "
                             "return it")


def read_inputs_are_args(f):
    for st in f.schedule.stages:
        if isinstance(st.op, PlaceholderOp) and st not in f.arg_stages and _is_read(f, st):
            raise BuildError(f"the input {st.name} is read by the computation but is not in "
                             f"args; add it to the argument list")


def _is_read(f, stage):
    return any(st.attach != AttachKind.INLINE
               and any(r.tensor.op is stage.origin_op for r in reads_of(body))
               for st, body in f.bodies.items())


# buffers -----------------------------------------------------------------------------------------

#: the largest buffer when the machine's memory size is unknown (1 TiB)
DEFAULT_MEMORY_LIMIT = 2 ** 40


@functools.lru_cache(maxsize=None)
def memory_limit():
    """Bytes of physical memory: a buffer the kernel allocates and fills must fit in it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return DEFAULT_MEMORY_LIMIT


def temp_buffers_fit_memory(f):
    """A stage stored at the root (and not an argument) gets a whole-kernel buffer."""
    for st in f.schedule.stages:
        if st.attach not in (AttachKind.INLINE, AttachKind.AT) and st not in f.arg_stages:
            for n in range(st.op.num_outputs):         # each output of a multi-output stage
                _fits_memory(st, Buffer(st.name, st.op.output_dtype(n), st.op.shape, Scope.TEMP))


def local_buffers_fit_memory(f):
    """A stage computed at a loop (and not an argument) gets a buffer of its region there."""
    for st in f.schedule.stages:
        if st.attach == AttachKind.AT and st not in f.arg_stages:
            ext = f.bounds[st].extents
            shape = tuple(ext[iv] for iv in st.op.axis)
            for n in range(st.op.num_outputs):
                _fits_memory(st, Buffer(st.name, st.op.output_dtype(n), shape, Scope.LOCAL))


def _fits_memory(stage, buf):
    """A BuildError naming the stage unless *buf* can be allocated at all.

    A local buffer is allocated (per thread) in every iteration of the loop it is computed at,
    a temp buffer once per call; both are written whole, so one larger than physical memory
    could only fail (malloc returning NULL) or swap the machine to a halt.
    """
    if not all(isinstance(d, int) for d in buf.shape):
        if buf.scope is Scope.LOCAL:
            raise BuildError(
                f"stage {stage.name}, computed at {stage.attach_stage.name}."
                f"{stage.attach_ivar.name}, needs a local buffer of symbolic shape {buf.shape}; "
                "a local buffer has a constant size: compute it at a loop inside the one over "
                "the symbolic extent (split that loop by a constant factor first), or at the "
                "root")
        return              # a temp sized per call: the runtime reports a failed allocation
    nbytes = buf.size * max(1, bits(buf.dtype) // 8)
    limit = memory_limit()
    if nbytes <= limit:
        return
    if buf.scope is Scope.LOCAL:
        where = (f"computed at {stage.attach_stage.name}.{stage.attach_ivar.name}, needs a local "
                 "buffer")
        advice = (f"compute it at an inner loop of {stage.attach_stage.name}, or split that loop "
                  "into smaller tiles, so that each iteration needs a smaller region of it")
    else:
        where = "computed at the root, needs a whole-kernel buffer"
        advice = (f"compute it at a loop of its consumer (s[{stage.name}].compute_at(...)) so that "
                  "only the tile in use is stored, or inline it")
    raise BuildError(f"stage {stage.name}, {where} of shape {buf.shape} {buf.dtype} "
                     f"({nbytes} bytes, {_size_str(nbytes)}), more than this machine's memory "
                     f"({limit} bytes, {_size_str(limit)}); {advice}")


def _size_str(nbytes):
    size, unit = float(nbytes), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


# compute_at --------------------------------------------------------------------------------------

def attach_loops_enclose_consumers(f):
    """A stage computed at ``T.v`` needs ``v`` to be a loop of T still, and every other consumer
    of it inside ``v``: computed at a loop of T inside ``v``, or at a loop of a stage that is
    itself (through a chain of compute_at) inside ``v`` (consumers before producers, as bound
    inference visits them)."""
    for st in reversed(f.schedule.stages):
        if not st.is_compute or st.attach != AttachKind.AT:
            continue
        target = st.attach_stage
        pos = _loop_position(target, st.attach_ivar)
        for consumer, body in f.bodies.items():
            if consumer is target or consumer.attach == AttachKind.INLINE \
                    or not any(r.tensor.op is st.origin_op for r in reads_of(body)):
                continue
            _check_inside(st, consumer, target, pos)


def _loop_position(stage, ivar):
    for n, iv in enumerate(stage.leaf_iter_vars):
        if iv is ivar:
            return n
    raise ScheduleError(f"loop {ivar.name} of stage {stage.name}, where another stage is "
                        f"computed, is no longer one of its loops "
                        f"({', '.join(iv.name for iv in stage.leaf_iter_vars)})")


def _check_inside(stage, consumer, target, pos):
    """A consumer other than the attach target must run inside the producer's loop scope: its
    chain of compute_at reaches the target at that loop or one inside it."""
    chain = attach_chain(consumer)
    for inner, outer in zip(chain, chain[1:]):
        if outer is target and _loop_position(target, inner.attach_ivar) >= pos:
            return
    raise ScheduleError(
        f"stage {stage.name} is computed at {target.name}.{stage.attach_ivar.name}, but its "
        f"consumer {consumer.name} is computed {_where(chain)}, outside that loop; compute "
        f"{consumer.name} at {target.name}.{stage.attach_ivar.name} (or a loop inside it), or "
        f"compute {stage.name} at {consumer.name}")


def _where(chain):
    """Where ``chain[0]`` runs: ``at the root``, ``at S.k`` or ``at S.k (S at Out.j)``."""
    links = [f"at {st.attach_stage.name}.{st.attach_ivar.name}" for st in chain[:-1]]
    if not links:
        return "at the root"
    outer = ", ".join(f"{st.name} {link}" for st, link in zip(chain[1:], links[1:]))
    return f"{links[0]} ({outer})" if outer else links[0]


# loop annotations --------------------------------------------------------------------------------

def loop_annotations_hold(f):
    """Unrolled loops are short (their extent is known once bounds are: a compute_at region
    shrinks them); no stage is computed inside a vectorized loop (its buffer would be one per
    lane).  Loops inside a vectorized loop run their bodies on all lanes at once where the
    vectorize pass finds that safe (:mod:`~einloop.schedule.passes.vectorize`)."""
    attached = _attached_at(f.schedule)
    for st in _emission_order(f.schedule, attached):
        ext = f.bounds[st].extents
        for iv, kind in st.annotations.items():
            if kind is ForKind.UNROLLED:
                _unroll_is_short(st, iv, ext)
            elif kind is ForKind.VECTORIZED and any(iv is x for x in st.leaf_iter_vars):
                _nothing_computed_at(st, iv, attached.get(id(iv), ()))


def _unroll_is_short(stage, iv, ext):
    if not isinstance(ext.get(iv, 0), int):
        raise ScheduleError(
            f"stage {stage.name}: loop {iv.name} has the symbolic extent {ext[iv]}, which cannot "
            "be unrolled (unrolling copies the body a constant number of times); split it by a "
            "constant factor and unroll the inner loop")
    if ext.get(iv, 0) > MAX_UNROLL:
        raise ScheduleError(
            f"stage {stage.name}: unrolling loop {iv.name} of extent {ext[iv]} would copy "
            f"its body {ext[iv]} times (limit {MAX_UNROLL}); split it and unroll the "
            "inner loop")


def _nothing_computed_at(stage, iv, stages):
    if stages:
        names = ", ".join(s.name for s in stages)
        raise ScheduleError(f"stage {stage.name}: {names} is computed at the vectorized "
                            f"loop {iv.name}; compute it at an outer loop")


def _attached_at(schedule):
    """id(loop IterVar) -> the stages computed at that loop, in stage order."""
    attached = {}
    for st in schedule.stages:
        if st.attach == AttachKind.AT:
            attached.setdefault(id(st.attach_ivar), []).append(st)
    return attached


def _emission_order(schedule, attached):
    """The stored compute stages in the order the loop-nest builder emits them: each root
    stage, then (depth first) the stages computed at its loops, innermost loop first."""
    def visit(st):
        yield st
        for iv in reversed(st.leaf_iter_vars):
            for inner in reversed(attached.get(id(iv), ())):
                yield from visit(inner)
    for st in schedule.stages:
        if st.is_compute and st.attach == AttachKind.ROOT:
            yield from visit(st)


#: every check, in the order :func:`verify` runs them
CHECKS = (
    args_are_tensors,
    args_are_distinct,
    args_are_stored,
    outputs_are_args,
    read_inputs_are_args,
    scan_stages_are_placed,
    extern_inputs_are_stored,
    temp_buffers_fit_memory,
    attach_loops_enclose_consumers,
    scans_keep_their_order,
    local_buffers_fit_memory,
    loop_annotations_hold,
)
