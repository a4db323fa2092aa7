"""Loop-nest construction: turn each stage, with its bounds, into loop IR (TVM's MakeLoopNest).

A stage's leaf loops are emitted in order; guards of non-dividing splits sit in the innermost loop
that binds all their variables; a reduction gets its initialisation nest just outside its first
reduction loop; stages computed at a loop are emitted at the start of that loop's body, inside an
``Allocate`` of their (local) buffer and the ``let`` bindings of their region starts.  Such a
stage's own loops carry the stages computed at them in turn, so compute_at chains nest.

The schedule is verified first (:mod:`einloop.schedule.verify`: loop annotations, buffer sizes),
so building never fails on a user's mistake.
"""
from __future__ import annotations

from ..arith import transform, substitute, free_vars
from ..errors import ScheduleError
from ..ir import expr as E
from .bound import pass_up, split_guards, root_axes, is_reduce
from ..ir.stmt import (Buffer, Load, Store, For, ForKind, IfThenElse, Allocate, LetStmt, Scope,
                      seq)
from ..te.tuple_reduce import is_part
from .extern import extern_call
from .passes.prefetch import buffer_reads, prefetch_ahead
from ..te.scatter import is_scatter
from .scatter import scatter_nest
from .buffer_keys import buffer_key
from .stage import AttachKind
from .scan import is_partner, partner_stores
from .tensorize import resets, tensorized_nest


class NestBuilder:
    """Builds the loop IR of a whole schedule from its stages, bodies, bounds and buffers."""

    def __init__(self, schedule, bodies, bounds, buffers, narrowed=None):
        self.schedule = schedule
        self.bodies = bodies
        self.bounds = bounds
        self.buffers = buffers            # id(origin op) -> Buffer
        self.narrowed = narrowed or {}    # buffer key -> Narrowing (narrow_index)
        self.attached = {}                # id(IterVar) -> [stages computed at that loop]
        self.ordered = {id(st.origin_op): st for st in schedule.stages if st.storage_dims}
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

    def _flat(self, op, buf, indices, offsets):
        """The flat index into *op*'s buffer: row-major in its stage's storage order."""
        dims = self._storage_dims(op, buf)
        flat = None
        for d in range(len(indices)) if dims is None else dims:
            ix = indices[d]
            if offsets is not None:
                ix = ix - offsets[d]
            flat = ix if flat is None else flat * E.as_expr(buf.shape[d]) + ix
        return flat

    def _storage_dims(self, op, buf):
        """The storage order ``storage_order`` gave *op*'s stage, if any (never for a buffer
        the caller passes: its layout is theirs)."""
        stage = self.ordered.get(id(op))
        if stage is None:
            return None
        dims = stage.storage_dims
        if buf.scope is Scope.ARG:
            raise ScheduleError(f"storage_order on stage {stage.name}: {stage.name} is a kernel "
                                "argument, whose layout is the caller's; order a stage of the "
                                "kernel's own instead")
        return dims

    def _loads(self, expr):
        def fn(x):
            if isinstance(x, E.TensorRead):
                op = x.tensor.op
                key = buffer_key(op, x.tensor.value_index)
                buf = self.buffers[key]
                flat = self._flat(op, buf, x.indices, self._offsets(op))
                if key in self.narrowed and x.dtype != buf.dtype:     # a wide read of it
                    return self.narrowed[key].widen(Load(buf, flat, buf.dtype))
                return Load(buf, flat, x.dtype)
            return None
        return transform(expr, fn)

    # one stage --------------------------------------------------------------------------------
    def stage_stmt(self, stage):
        """The loop nest of *stage*, with the stages computed at its loops inside."""
        local = self.buffers[id(stage.origin_op)].scope is Scope.LOCAL
        loops = _StageLoops(stage, self.bounds[stage], pad_tails=local)
        if is_scatter(stage.op):
            return scatter_nest(self, stage, loops)
        update, init = self._statements(stage, loops)
        nest = self._main_nest(loops, update, init, 0) if loops.leaves else update
        return loops.guard(nest, -1)

    def _statements(self, stage, loops):
        """The stores of one element of *stage*, one per output (for a reduction: one update of
        the accumulators, and the stores of the reduction's identity that initialise them, else
        None)."""
        op = stage.origin_op
        bufs = [self.buffers[buffer_key(op, n)] for n in range(op.num_outputs)]
        index = self._output_indices(stage, loops)
        out_idx = [self._flat(op, buf, index, None) for buf in bufs]
        local = bufs[0].scope is Scope.LOCAL
        body = self.bodies[stage]
        parts = body if isinstance(body, tuple) else (body,)
        if stage.streaming and (local or isinstance(parts[0], E.Reduce)):
            where = "is computed at a loop of another stage, so its buffer lives in cache" \
                if local else "is a reduction"
            raise ScheduleError(f"nontemporal on stage {stage.name}: the stage {where}; stream "
                                "only a stage computed at the root whose elements are stored once")
        if not isinstance(parts[0], E.Reduce):
            stores = [Store(buf, ix, self._loads(substitute(p, loops.absolute)), stage.streaming)
                      for buf, ix, p in zip(bufs, out_idx, parts)]
            return seq(*stores, *partner_stores(self, stage, loops)), None
        srcs = [self._loads(substitute(p.source, loops.absolute)) for p in parts]
        accs = [Load(buf, ix, p.dtype) for buf, ix, p in zip(bufs, out_idx, parts)]
        update = _update(parts, bufs, out_idx, accs, srcs)
        cond = parts[0].condition
        if cond is not None:
            update = IfThenElse(self._loads(substitute(cond, loops.absolute)), update)
        init = seq(*(Store(buf, ix, p.reducer.identity(p.dtype))
                     for buf, ix, p in zip(bufs, out_idx, parts)))
        return update, init

    def _output_indices(self, stage, loops):
        """The indices of the element of *stage*'s buffer that the loops compute (relative to
        its region in a local buffer)."""
        local = self.buffers[buffer_key(stage.origin_op, 0)].scope is Scope.LOCAL
        return [loops.vals[iv] if local else loops.absolute[iv.var] for iv in stage.op.axis]

    def output_index(self, stage, loops):
        """The flat index into *stage*'s (first) buffer of the element the loops compute."""
        op = stage.origin_op
        buf = self.buffers[buffer_key(op, 0)]
        return self._flat(op, buf, self._output_indices(stage, loops), None)

    def _main_nest(self, loops, update, init, pos):
        """The loops from *pos* inwards around *update*; a reduction's *init* runs in its own
        nest of the data loops, just before the first reduction loop.  At a tensorized loop
        the loops from there inwards are one intrinsic call (the init, if it falls inside,
        stays ordinary loops before it; a partial tile runs the loops as they are)."""
        tz = loops.stage.tensorized
        if tz is not None and pos < len(loops.leaves) and loops.leaves[pos] is tz.axis:
            return self._tensorized(loops, update, init, pos)
        if pos == len(loops.leaves):
            return update
        if init is not None and pos == loops.first_reduce and not _init_in_reset(loops, init):
            return seq(_init_nest(loops, init, pos, vector=tz is not None),
                       self._main_loop(loops, update, init, pos))
        return self._main_loop(loops, update, init, pos)

    def _tensorized(self, loops, update, init, pos):
        """The tensorized loops from *pos* inwards: the intrinsic's call, with the reduction's
        *init* before it when the tile holds the whole reduction, or with the reset form
        where the tile's reduction starts (:func:`_init_in_reset`); the plain loops of a
        partial tile keep their initialisation."""
        stage = loops.stage

        def plain():
            return self._main_loop(loops, update, None, pos)

        init_here = init is not None and loops.first_reduce is not None \
            and loops.first_reduce >= pos
        if not _init_in_reset(loops, init):
            call = tensorized_nest(self, stage, loops, pos, plain)
            return seq(_init_nest(loops, init, pos, vector=True), call) if init_here else call
        first = tensorized_nest(self, stage, loops, pos, lambda: seq(
            _init_nest(loops, init, pos, vector=True), plain()), reset=True)
        started = [E.Compare(E.CmpOp.EQ, iv.var, E.const(0, iv.var.dtype))
                   for iv in loops.leaves[loops.first_reduce:pos]
                   if is_reduce(iv) and loops.ext[iv] != 1]
        if init_here or not started:
            return first
        cond = started[0]
        for c in started[1:]:
            cond = E.Logical(E.LogicOp.AND, cond, c)
        return IfThenElse(cond, first, tensorized_nest(self, stage, loops, pos, plain))

    def _main_loop(self, loops, update, init, pos):
        """Loop *pos*: its prefetches, the stages computed at it, then the loops inside it, under
        its guards."""
        inner = self._main_nest(loops, update, init, pos + 1)
        inner = self._with_attached(loops.leaves[pos], inner)
        inner = loops.guard(inner, pos)
        return loops.loop(pos, seq(*self._prefetches(loops, pos, inner), inner))

    def _prefetches(self, loops, pos, body):
        """The prefetch statements of loop *pos* of the stage, for a loop *body*."""
        iv = loops.leaves[pos]
        out = []
        for p in loops.stage.prefetches:
            if p.axis is not iv:
                continue
            buf = self.buffers.get(id(p.source.origin_op))
            if buf is not None and buf.scope is Scope.LOCAL:
                raise ScheduleError(
                    f"prefetch on stage {loops.stage.name}: {p.source.name} is computed at a "
                    f"loop of stage {p.source.attach_stage.name}, into a buffer that lives only "
                    "there; prefetch an input or a stage computed at the root")
            reads = [] if buf is None else buffer_reads(body, buf)
            if not reads:
                raise ScheduleError(
                    f"prefetch on stage {loops.stage.name}: no iteration of loop {iv.name} reads "
                    f"{p.source.name}"
                    + (" (it is inlined)" if p.source.attach == AttachKind.INLINE else "")
                    + "; prefetch a tensor that the loop's body reads")
            out.append(prefetch_ahead(reads, iv.var, loops.ext[iv], buf, p.offset))
        return out

    def _with_attached(self, iv, inner):
        """*inner* after the stages computed at loop *iv* (in stage order), in their scope."""
        for st in reversed(self.attached.get(id(iv), [])):
            inner = self._in_scope_of(st, seq(self.stage_stmt(st), inner))
        return inner

    def _in_scope_of(self, stage, body):
        """*body* inside the region lets and the local buffer of attached *stage*."""
        for var, value in reversed(self.bounds[stage].region_lets):
            body = LetStmt(var, value, body)
        for n in reversed(range(stage.origin_op.num_outputs)):
            buf = self.buffers[buffer_key(stage.origin_op, n)]
            body = Allocate(buf, body) if buf.scope is Scope.LOCAL else body
        return body

    # the whole schedule -----------------------------------------------------------------------
    def build(self):
        parts = []
        for stage in self.schedule.stages:
            if stage.is_compute and stage.attach == AttachKind.ROOT and not is_partner(stage):
                parts.append(self.stage_stmt(stage))
            elif stage.is_extern:                   # always at the root, in stage order
                parts.append(extern_call(stage, self.buffers))
        return seq(*parts)


def combine_parts(parts, accumulated, values):
    """The new accumulator values of reduction *parts* (the Reduce bodies of one stage): one
    tuple reducer's :class:`~einloop.te.tuple_reduce.TupleCombiner` combines them together,
    independent reducers each their own."""
    if is_part(parts[0]):
        return parts[0].reducer.combiner.combine(accumulated, values)
    return [p.reducer.combine(a, v) for p, a, v in zip(parts, accumulated, values)]


def _update(parts, bufs, indices, accumulated, values):
    """One step of the reduction *parts*: store into *bufs* the combine of the *accumulated*
    loads and the new *values*.  With several outputs every operand and every new value is
    bound by a ``let`` first: each combine reads the old accumulators (compute all, then
    store), and a combine that tests its operands (argmax's comparisons, under lazy ``and`` and
    ``or``) tests registers, not loads that a vector loop would have to mask."""
    if len(bufs) == 1:
        return Store(bufs[0], indices[0], combine_parts(parts, accumulated, values)[0])
    acc_vars = [E.Var(f"{buf.name}.acc", buf.dtype) for buf in bufs]
    in_vars = [E.Var(f"{buf.name}.in", buf.dtype) for buf in bufs]
    new = combine_parts(parts, acc_vars, in_vars)
    new_vars = [E.Var(f"{buf.name}.new", buf.dtype) for buf in bufs]
    stmt = seq(*(Store(buf, ix, var) for buf, ix, var in zip(bufs, indices, new_vars)))
    bound = list(zip(acc_vars, accumulated)) + list(zip(in_vars, values)) \
        + list(zip(new_vars, new))
    for var, value in reversed(bound):
        stmt = LetStmt(var, value, stmt)
    return stmt


def _init_in_reset(loops, init) -> bool:
    """Does a tensorized stage's intrinsic initialise its tiles itself (its reset form,
    called on the first iteration of the reduction loops outside the tile)?  When it has
    one: the initialisation nest covers the data loops inside the first reduction loop, and
    each of their tiles meets that first iteration exactly once (data loops between the first
    reduction loop and the tile enumerate the tiles)."""
    return init is not None and resets(loops.stage) and loops.first_reduce is not None


def _init_nest(loops, init, pos, vector=False):
    """The data loops from *pos* inwards around a reduction's *init* (its reduction loops left
    out, and the guards on reduction variables with them).  *vector*: the innermost one, when
    of constant extent and unguarded, vectorized (the init of a tensorized tile, whose loops
    the schedule cannot annotate: left to LLVM, a float tile's zeroing became scatters)."""
    if pos == len(loops.leaves):
        return init
    inner = _init_nest(loops, init, pos + 1, vector)
    if is_reduce(loops.leaves[pos]):
        return inner
    loop = loops.loop(pos, loops.guard(inner, pos, data_only=True))
    innermost = not any(not is_reduce(iv) for iv in loops.leaves[pos + 1:])
    if vector and innermost and loop.kind is ForKind.SERIAL and isinstance(loop.extent, int) \
            and loop.extent > 1 and loop.body is inner:
        loop = For(loop.var, loop.extent, ForKind.VECTORIZED, loop.body)
    return loop


class _StageLoops:
    """One stage's leaf loops: their extents and kinds, every axis's value in terms of them, and
    the guards of its non-dividing splits, each placed in the innermost loop that binds all its
    variables (level -1: outside every loop).

    A region that may run past a symbolic extent has its rows there guarded off.  In a local
    buffer (*pad_tails*: an accumulator computed at a loop of its consumer) those rows are
    computed instead, from the last row's inputs (the axis clamped into its extent), and never
    read: unguarded, the register tile of a tail block stays in registers, as in a whole one,
    where guards inside its reduction loop made each accumulator a conditional store."""

    def __init__(self, stage, bounds, pad_tails=False):
        self.stage = stage
        self.leaves = stage.leaf_iter_vars
        self.ext = bounds.extents
        self.vals = pass_up(stage, {iv: iv.var for iv in self.leaves}, self.ext)
        self.absolute = {iv.var: bounds.base[iv] + self.vals[iv] for iv in root_axes(stage)}
        level = {leaf.var: n for n, leaf in enumerate(self.leaves)}
        splits = split_guards(stage, self.vals, self.ext)
        tail_axes = [(iv, size) for iv, size in zip(stage.op.axis, stage.op.shape)
                     if any(iv is t for t in bounds.tails)]
        padded = self._paddable(tail_axes) if pad_tails and not splits else []
        for iv, size in padded:
            self.absolute[iv.var] = E.clamp_index(self.absolute[iv.var], size)
        tails = [E.Compare(E.CmpOp.LT, self.absolute[iv.var], E.as_expr(size))
                 for iv, size in tail_axes if not any(iv is p for p, _ in padded)]
        self.guards = [(g, max((level[v] for v in free_vars(g) if v in level), default=-1))
                       for g in splits + tails]
        self.reduce_vars = {iv.var for iv in stage.all_iter_vars if is_reduce(iv)}
        self.first_reduce = next((n for n, iv in enumerate(self.leaves) if is_reduce(iv)), None)

    def _paddable(self, tail_axes):
        """The tail axes whose rows may be computed past the extent: not along a vectorized
        loop, where the clamped index would be a gather.  (The caller checks that no split
        overhangs, so the local buffer holds every row the loops run.)"""
        vector = {leaf.var for leaf in self.leaves
                  if self.stage.annotations.get(leaf) is ForKind.VECTORIZED}
        return [(iv, size) for iv, size in tail_axes
                if vector.isdisjoint(free_vars(self.vals[iv]))]

    def loop(self, pos, body):
        iv = self.leaves[pos]
        return For(iv.var, self.ext[iv], self.stage.annotations.get(iv, ForKind.SERIAL), body)

    def guard(self, body, pos, data_only=False):
        """*body* inside the guards placed at loop *pos*; *data_only* leaves out those on
        reduction variables (for the initialisation nest, which has no reduction loops)."""
        for g, lv in self.guards:
            if lv == pos and not (data_only and self._on_reduction(g)):
                body = IfThenElse(g, body)
        return body

    def _on_reduction(self, cond):
        return not self.reduce_vars.isdisjoint(free_vars(cond))


def make_buffers(schedule, args, arg_stages):
    """One buffer per output of a stored stage: kernel arguments, whole-kernel temps, or local
    tiles (keyed by :func:`buffer_key`).  The outputs of one stage are indexed alike: if one
    is an argument, an attached stage's others are whole temps, not local tiles."""
    buffers, temps = {}, []
    arg_keys = {buffer_key(t.op, t.value_index) for t in args}
    for stage in schedule.stages:
        if stage.attach == AttachKind.INLINE:
            continue
        keys = [buffer_key(stage.origin_op, n) for n in range(stage.origin_op.num_outputs)]
        local = stage.attach == AttachKind.AT and not arg_keys.intersection(keys)
        for n, key in enumerate(keys):
            name, dtype = output_buffer_name(stage, n), stage.op.output_dtype(n)
            if key in arg_keys:
                buffers[key] = Buffer(name, dtype, stage.op.shape, Scope.ARG)
            elif local:
                buffers[key] = None            # sized after bound inference
            else:
                buf = Buffer(name, dtype, stage.op.shape, Scope.TEMP)
                buffers[key] = buf
                temps.append(buf)
    return buffers, temps


def output_buffer_name(stage, value_index):
    """The buffer name of output *value_index* of *stage*: the stage's name, with ``.v<n>``
    for the outputs of a multi-output stage."""
    return stage.name if stage.origin_op.num_outputs == 1 else f"{stage.name}.v{value_index}"


def size_local_buffers(schedule, buffers, bounds):
    """The local buffers of attached stages, their shape the region bound inference found."""
    for stage in schedule.stages:
        for n in range(stage.origin_op.num_outputs):
            key = buffer_key(stage.origin_op, n)
            if buffers.get(key, 0) is None:
                ext = bounds[stage].extents
                shape = tuple(ext[iv] for iv in stage.op.axis)
                buffers[key] = Buffer(output_buffer_name(stage, n), stage.op.output_dtype(n),
                                      shape, Scope.LOCAL)

