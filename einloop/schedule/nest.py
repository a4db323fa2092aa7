"""Loop-nest construction: turn each stage, with its bounds, into loop IR (TVM's MakeLoopNest).

A stage's leaf loops are emitted in order; guards of non-dividing splits sit in the innermost loop
that binds all their variables; a reduction gets its initialisation nest just outside its first
reduction loop; stages computed at a loop are emitted at the start of that loop's body, inside an
``Allocate`` of their (local) buffer and the ``let`` bindings of their region starts.
"""
from __future__ import annotations

import functools
import os

from ..arith import transform, substitute, free_vars
from ..errors import ScheduleError, BuildError
from ..ir import expr as E
from ..ir.dtypes import bits
from .bound import pass_up, split_guards, root_axes, is_reduce
from ..ir.stmt import (Buffer, Load, Store, For, ForKind, IfThenElse, Allocate, LetStmt, Scope,
                      seq)
from .passes.unroll import MAX_UNROLL
from .stage import AttachKind


class NestBuilder:
    """Builds the loop IR of a whole schedule from its stages, bodies, bounds and buffers."""

    def __init__(self, schedule, bodies, bounds, buffers):
        self.schedule = schedule
        self.bodies = bodies
        self.bounds = bounds
        self.buffers = buffers            # id(origin op) -> Buffer
        self.attached = {}                # id(IterVar) -> [stages computed at that loop]
        for st in schedule.stages:
            if st.attach == AttachKind.AT:
                self.attached.setdefault(id(st.attach_ivar), []).append(st)

    # buffers and indices --------------------------------------------------------------------
    def _offsets(self, op):
        """Region starts to subtract from indices into *op*'s buffer (local buffers only)."""
        stage = self.schedule[op]
        buf = self.buffers[id(op)]
        if buf.scope is not Scope.LOCAL or stage not in self.bounds:
            return None
        base = self.bounds[stage].base
        return [base[iv] for iv in stage.op.axis]

    def _flat(self, buf, indices, offsets):
        flat = None
        for d, ix in enumerate(indices):
            if offsets is not None:
                ix = ix - offsets[d]
            flat = ix if flat is None else flat * E.const(buf.shape[d]) + ix
        return flat

    def _loads(self, expr):
        def fn(x):
            if isinstance(x, E.TensorRead):
                op = x.tensor.op
                buf = self.buffers[id(op)]
                return Load(buf, self._flat(buf, x.indices, self._offsets(op)), x.dtype)
            return None
        return transform(expr, fn)

    # one stage --------------------------------------------------------------------------------
    def stage_stmt(self, stage):
        """The loop nest of *stage*, with its region lets (for attached stages)."""
        self._check_annotations(stage)
        b = self.bounds[stage]
        ext = b.extents
        leaves = stage.leaf_iter_vars
        vals = pass_up(stage, {iv: iv.var for iv in leaves}, ext)
        absolute = {iv.var: b.base[iv] + vals[iv] for iv in root_axes(stage)}
        buf = self.buffers[id(stage.origin_op)]
        local = buf.scope is Scope.LOCAL
        out_idx = self._flat(buf, [vals[iv] if local else absolute[iv.var] for iv in stage.op.axis],
                             None)
        body = self.bodies[stage]
        level = {leaf.var: n for n, leaf in enumerate(leaves)}
        guards = [(g, max((level[v] for v in free_vars(g) if v in level), default=-1))
                  for g in split_guards(stage, vals, ext)]

        if isinstance(body, E.Reduce):
            src = self._loads(substitute(body.source, absolute))
            acc = Load(buf, out_idx, body.dtype)
            update = Store(buf, out_idx, body.reducer.combine(acc, src))
            if body.condition is not None:
                update = IfThenElse(self._loads(substitute(body.condition, absolute)), update)
            init = Store(buf, out_idx, body.reducer.identity(body.dtype))
            first_red = next(n for n, iv in enumerate(leaves) if is_reduce(iv))
        else:
            update = Store(buf, out_idx, self._loads(substitute(body, absolute)))
            init, first_red = None, None

        def loops(pos, only_data):
            if pos == len(leaves):
                return init if only_data else update
            if not only_data and pos == first_red:
                return seq(loops(pos, True), loops_main(pos))
            return loop(pos, only_data)

        def loops_main(pos):
            return loop(pos, False)

        def loop(pos, only_data):
            iv = leaves[pos]
            if only_data and is_reduce(iv):
                return loops(pos + 1, True)
            inner = loops(pos + 1, only_data)
            if not only_data:
                inner = self._with_attached(iv, inner)
            for g, lv in guards:
                if lv == pos and not (only_data and self._has_reduce_var(stage, g)):
                    inner = IfThenElse(g, inner)
            kind = stage.annotations.get(iv, ForKind.SERIAL)
            return For(iv.var, ext[iv], kind, inner)

        nest = loops(0, False) if leaves else update
        for g, lv in guards:
            if lv < 0:
                nest = IfThenElse(g, nest)
        return nest

    def _has_reduce_var(self, stage, cond):
        red = {iv.var for iv in stage.all_iter_vars if is_reduce(iv)}
        return any(v in red for v in free_vars(cond))

    def _with_attached(self, iv, inner):
        for st in reversed(self.attached.get(id(iv), [])):
            inner = seq(self.stage_stmt(st), inner)
            for var, value in reversed(self.bounds[st].region_lets):
                inner = LetStmt(var, value, inner)
            buf = self.buffers[id(st.origin_op)]
            if buf.scope is Scope.LOCAL:
                inner = Allocate(buf, inner)
        return inner

    def _check_annotations(self, stage):
        leaves = stage.leaf_iter_vars
        ext = self.bounds[stage].extents
        for iv, kind in stage.annotations.items():
            if kind is ForKind.UNROLLED and ext.get(iv, 0) > MAX_UNROLL:
                raise ScheduleError(
                    f"stage {stage.name}: unrolling loop {iv.name} of extent {ext[iv]} would copy "
                    f"its body {ext[iv]} times (limit {MAX_UNROLL}); split it and unroll the "
                    "inner loop")
            if kind is not ForKind.VECTORIZED or not any(iv is x for x in leaves):
                continue
            if iv is not leaves[-1]:
                inside = leaves[[id(x) for x in leaves].index(id(iv)) + 1:]
                raise ScheduleError(
                    f"stage {stage.name}: the vectorized loop {iv.name} must be the innermost "
                    f"loop, but {', '.join(x.name for x in inside)} run(s) inside it; reorder so "
                    f"that {iv.name} comes last")
            if self.attached.get(id(iv)):
                names = ", ".join(s.name for s in self.attached[id(iv)])
                raise ScheduleError(f"stage {stage.name}: {names} is computed at the vectorized "
                                    f"loop {iv.name}; compute it at an outer loop")

    # the whole schedule -----------------------------------------------------------------------
    def build(self):
        parts = []
        for stage in self.schedule.stages:
            if stage.is_compute and stage.attach == AttachKind.ROOT:
                parts.append(self.stage_stmt(stage))
        return seq(*parts)


def make_buffers(schedule, args, arg_stages):
    """One buffer per stored stage: kernel arguments, whole-kernel temps, or local tiles."""
    buffers, temps = {}, []
    for stage in schedule.stages:
        if stage.attach == AttachKind.INLINE:
            continue
        key = id(stage.origin_op)
        if stage in arg_stages:
            buffers[key] = Buffer(stage.name, stage.op.dtype, stage.op.shape, Scope.ARG)
        elif stage.attach == AttachKind.AT:
            buffers[key] = None            # sized after bound inference
        else:
            buf = _checked(stage, Buffer(stage.name, stage.op.dtype, stage.op.shape, Scope.TEMP))
            buffers[key] = buf
            temps.append(buf)
    return buffers, temps


def size_local_buffers(schedule, buffers, bounds):
    for stage in schedule.stages:
        if buffers.get(id(stage.origin_op), 0) is None:
            ext = bounds[stage].extents
            shape = tuple(ext[iv] for iv in stage.op.axis)
            buffers[id(stage.origin_op)] = _checked(
                stage, Buffer(stage.name, stage.op.dtype, shape, Scope.LOCAL))


#: the largest buffer when the machine's memory size is unknown (1 TiB)
DEFAULT_MEMORY_LIMIT = 2 ** 40


@functools.lru_cache(maxsize=None)
def memory_limit():
    """Bytes of physical memory: a buffer the kernel allocates and fills must fit in it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return DEFAULT_MEMORY_LIMIT


def _checked(stage, buf):
    """*buf*, if its size can be allocated at all; a BuildError naming the stage otherwise.

    A local buffer is allocated (per thread) in every iteration of the loop it is computed at,
    a temp buffer once per call; both are written whole, so one larger than physical memory
    could only fail (malloc returning NULL) or swap the machine to a halt.
    """
    nbytes = buf.size * max(1, bits(buf.dtype) // 8)
    limit = memory_limit()
    if nbytes <= limit:
        return buf
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
