"""A schedule: the stages of an operator's dataflow graph and the steps applied to them.

Every primitive records a :class:`~.steps.Step` (plain names and numbers) through the step
registry, so a schedule can be printed as code, copied, and replayed on freshly declared tensors:
the auto-tuner stores steps, never Python objects.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..arith import transform
from ..ir import expr as E
from ..te.tensor import ComputeOp, IterVar, IterKind, Operation, Tensor
from ..te.dag import ComputeDAG
from ..te.residues import deinterleave_op, reread_deinterleaved, residue_ops
from .stage import Stage, AttachKind
from .scan import refuse_scan, refuse_self_copy, stage_for
from .pack import pack as pack_tensor
from .rfactor import rfactor as rfactor_stage
from .tensorize import Tensorized, check_tensorize
from ..te.scatter import is_scatter
from .scatter import privatize as privatize_scatter
from .scatter_checks import refuse, refuse_reader
from .steps import Step, StepKind, apply_step, as_steps, record, steps_to_text
from .unsupported import SCHEDULE_PRIMITIVES, missing_attribute
from .widen import check_widening, redirect_cast_reads, widened_dtype, widened_op


class Schedule:
    """Stages in producer-before-consumer order; ``s[tensor]`` returns a tensor's stage."""

    def __init__(self, outputs):
        orig = outputs
        if isinstance(outputs, (Tensor, Operation)):
            outputs = [outputs]
        try:
            outputs = list(outputs)
        except TypeError:
            outputs = []
        # an operation stands for its outputs, as in TVM's ``te.create_schedule(C.op)``
        outputs = [x for t in outputs for x in (
            [t.output(n) for n in range(t.num_outputs)] if isinstance(t, Operation) else [t])]
        if not outputs or not all(isinstance(t, Tensor) for t in outputs):
            raise ScheduleError(f"create_schedule: expected a tensor, an operation (C.op) or a "
                                f"list of them, got {outputs or orig!r}")
        self.outputs = tuple(outputs)
        self.steps = []
        self.stages = []
        self._by_op = {}
        names = set()
        for op in ComputeDAG(outputs).ops:
            name, n = op.name, 1
            while name in names:
                name, n = f"{op.name}_{n}", n + 1
            names.add(name)
            stage = stage_for(self, op, name)
            self.stages.append(stage)
            self._by_op[id(op)] = stage
        for t in outputs:
            self._by_op[id(t.op)].is_output = True

    # lookup ---------------------------------------------------------------------------------
    def __getattr__(self, name):
        """Only called for a missing attribute: say so helpfully if it is a TVM primitive."""
        missing_attribute(self, "s", name, SCHEDULE_PRIMITIVES)

    def __getitem__(self, tensor) -> Stage:
        """The stage of *tensor*: a tensor, an operation, or the tuple of the tensors of one
        multi-output operation (what ``rfactor`` and ``cache_write`` return for one)."""
        if isinstance(tensor, str):
            raise ScheduleError(f"s[...] takes a tensor, got the string {tensor!r}; use "
                                f"s.stage_named({tensor!r}) to look a stage up by name")
        if isinstance(tensor, (tuple, list)) and tensor:
            if not all(isinstance(t, Tensor) and t.op is tensor[0].op for t in tensor):
                raise ScheduleError(f"s[...] takes one tensor, or the tensors of one "
                                    f"multi-output operation, got {tensor!r}")
            tensor = tensor[0]
        op = tensor.op if isinstance(tensor, Tensor) else tensor
        stage = self._by_op.get(id(op))
        if stage is None:
            name = getattr(tensor, "name", tensor)
            raise ScheduleError(f"{name} is not part of this schedule (its stages are "
                                f"{', '.join(s.name for s in self.stages)})")
        return stage

    def stage_named(self, name) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ScheduleError(f"this schedule has no stage named {name!r}; stages: "
                            f"{', '.join(s.name for s in self.stages)}")

    def _owner_of(self, iv):
        for s in self.stages:
            if any(iv is x for x in s.all_iter_vars):
                return s
        return None

    def _consumers(self, stage):
        return [s for s in self.stages if s.is_compute
                and any(t.op is stage.origin_op for t in s.op.input_tensors)]

    def _depends_on(self, consumer, producer):
        """Whether *consumer* reads *producer*, directly or through other stages."""
        todo, seen = [consumer], set()
        while todo:
            st = todo.pop()
            if not st.is_compute or id(st) in seen:
                continue
            seen.add(id(st))
            for t in st.op.input_tensors:
                dep = self._by_op[id(t.op)]
                if dep is producer:
                    return True
                todo.append(dep)
        return False

    # stage-graph primitives -----------------------------------------------------------------
    def cache_write(self, tensor, scope="local") -> Tensor:
        """Compute *tensor* into a new stage ``<name>.<scope>``; the old stage copies it out.

        Lets a reduction accumulate in a small buffer (computed at a loop of the original stage)
        and write the result back once.  Must come before other primitives on that stage.  A
        multi-output stage is cached whole: the result is then the tuple of its caches.
        """
        stage = self[tensor]
        _check_scope("cache_write", stage, scope)
        refuse_scan(stage, "cache_write")
        refuse(stage, "cache_write", "which updates its output in place; it has no separate "
                                     "accumulator to cache")
        stage._not_extern("cache_write")
        if not stage.is_compute:
            raise ScheduleError(f"cache_write: {stage.name} is a placeholder; only computes "
                                "can be cached")
        if stage.relations or stage.annotations or stage.attach != AttachKind.ROOT:
            raise ScheduleError(f"cache_write on {stage.name} must come before its other "
                                "primitives (split, reorder, compute_at, ...)")
        op = stage.op
        mapping, new_axis = {}, []
        for iv in op.axis:
            nv = IterVar(E.Var(iv.name), iv.start, iv.extent, IterKind.DATA)
            mapping[iv.var] = nv.var
            new_axis.append(nv)
        new_reduce = []
        for iv in op.reduce_axis:
            nv = IterVar(E.Var(iv.name), iv.start, iv.extent, IterKind.REDUCE)
            mapping[iv.var] = nv.var
            new_reduce.append(nv)
        body = _substitute_body(op.body, mapping, dict(zip(map(id, op.reduce_axis), new_reduce)))
        cache_op = ComputeOp(f"{stage.name}.{scope}", new_axis, body, new_reduce)
        caches = tuple(cache_op.output(n) for n in range(cache_op.num_outputs))
        at = tuple(iv.var for iv in op.axis)
        copies = tuple(c[at] for c in caches)
        stage.op = ComputeOp(op.name, op.axis, copies if len(copies) > 1 else copies[0], ())
        stage.all_iter_vars = list(op.axis)
        stage.leaf_iter_vars = list(op.axis)
        self._insert_stage(cache_op, before=stage)
        record(self, StepKind.CACHE_WRITE, stage.name, scope=scope)
        return caches if len(caches) > 1 else caches[0]

    def cache_read(self, tensor, scope, readers, dtype=None) -> Tensor:
        """Copy *tensor* into a new stage ``<name>.<scope>`` that *readers* read instead.

        Computed at a loop of its reader, the copy packs just the tile that loop needs.  With
        *dtype*, the copy is *tensor* widened to it (``astype``), for readers that cast every
        element they read: each ``tensor[...].astype(d)`` reads the copy and casts that (see
        :mod:`einloop.schedule.widen` for when that keeps their values, else a ScheduleError).
        """
        stage = self[tensor]
        _check_scope("cache_read", stage, scope)
        if dtype is not None:
            dtype = widened_dtype(stage, dtype)
        _single_output("cache_read", stage)
        readers = [readers] if isinstance(readers, (Tensor, Stage)) else list(readers)
        reader_stages = [r if isinstance(r, Stage) else self[r] for r in readers]
        if not reader_stages:
            raise ScheduleError(f"cache_read of {stage.name}: give the reader stages")
        refuse_self_copy(stage, reader_stages, "cache_read")
        refuse_reader(reader_stages, "cache_read")
        for r in reader_stages:
            r._not_extern_reader("cache_read", stage)
            if not r.is_compute or not any(t.op is stage.origin_op for t in r.op.input_tensors):
                raise ScheduleError(f"cache_read: stage {r.name} does not read {stage.name}")
        src = stage.origin_op.output()
        axis = [IterVar(E.Var(n), 0, ext, IterKind.DATA)
                for n, ext in zip(_axis_names(len(src.shape)), src.shape)]
        if dtype is None:
            copy_op = ComputeOp(f"{stage.name}.{scope}", axis, src[tuple(iv.var for iv in axis)],
                                ())
        else:
            check_widening(stage, src, dtype, reader_stages)
            copy_op = widened_op(f"{stage.name}.{scope}", axis, src, dtype)
        copy = copy_op.output()
        for r in reader_stages:
            r.op = _redirect_reads(r.op, stage.origin_op, copy) if dtype is None else \
                redirect_cast_reads(r.op, stage.origin_op, copy)
        self._insert_stage(copy_op, before=min(reader_stages, key=self.stages.index))
        record(self, StepKind.CACHE_READ, stage.name, scope=scope,
               readers=[r.name for r in reader_stages], dtype=dtype)
        return copy

    def pack(self, tensor, axis, factor, readers=None) -> Tensor:
        """Read *tensor* through a copy ``<name>.pack`` with dimension *axis* split by *factor*
        (outer part first, inner part last): ``B[K, N]``, axis 1, 32 -> ``[ceil(N/32), K, 32]``.

        The stages of *readers* (default: every stage reading *tensor*) read the copy instead,
        so a tile along *axis* is contiguous; two reductions that read one input (``X @ W1``
        and ``X @ W3``) can each have their own copy, computed in their own loops.  See
        :mod:`einloop.schedule.pack` for the rules.
        """
        reader_stages = None if readers is None else [
            r if isinstance(r, Stage) else self[r] for r in
            ([readers] if isinstance(readers, (Tensor, Stage)) else readers)]
        _single_output("pack", self[tensor])
        refuse_reader(reader_stages or self._consumers(self[tensor]), "pack")
        copy = pack_tensor(self, tensor, axis, factor, reader_stages)
        record(self, StepKind.PACK, self[tensor].name, axis=axis, factor=factor,
               readers=None if reader_stages is None else [r.name for r in reader_stages])
        return copy

    def rfactor(self, tensor, axis, factor_axis=0) -> Tensor:
        """Factor reduction loop *axis* of *tensor* into a new stage ``<name>.rf`` whose data axis
        (at position *factor_axis*) it becomes; *tensor* then reduces that stage over it.

        Lets a long reduction run vectorized or in parallel: ``ko, ki = s[C].split(k, 16)``,
        ``CF = s.rfactor(C, ki)``, then vectorize ``ki`` in ``s[CF]``.  Only split, fuse and
        reorder of *tensor*'s reduction loops may come before it; see
        :mod:`einloop.schedule.rfactor`.  A multi-output reduction (argmax) is factored whole:
        the result is then the tuple of the partial stage's tensors (``s[...]`` takes it).
        """
        stage = self[tensor]
        name = getattr(axis, "name", None)
        if is_scatter(stage.op):
            rf = privatize_scatter(self, tensor, axis, factor_axis)
        else:
            rf = rfactor_stage(self, tensor, axis, factor_axis)
        record(self, StepKind.RFACTOR, stage.name, axis=name, factor_axis=int(factor_axis))
        return rf

    def split_residues(self, tensor, axes, factors) -> Tensor:
        """Compute *tensor* per residue class of its data *axes* modulo *factors* into a new
        stage ``<name>.res``, whose axes are the residues, then *tensor*'s axes with each split
        one ``v`` replaced by ``v.quot`` (``v = factor * v.quot + v.res``); *tensor*'s stage
        copies it back.

        For indices with a period, such as a transposed convolution's ``A[(y + 1) // 2 - t]``
        and ``W[(y + 1) % 2 + 2 * t]``: within a class they are affine in ``y.quot``, which then
        vectorizes.  Must come before other primitives on that stage; each axis's constant
        extent must be a multiple of its factor.  See :mod:`einloop.te.residues`.
        """
        stage = self[tensor]
        where = f"split_residues of {stage.name}"
        axes = [axes] if isinstance(axes, IterVar) else list(axes)
        factors = [factors] if isinstance(factors, int) else list(factors)
        refuse_scan(stage, "split_residues")
        stage._not_extern("split_residues")
        if not stage.is_compute:
            raise ScheduleError(f"{where}: {stage.name} is a placeholder; only a compute stage "
                                "can be split into residue classes")
        _single_output("split_residues", stage)
        refuse(stage, "split_residues", "whose target indices are not its loops")
        if stage.relations or stage.annotations or stage.attach != AttachKind.ROOT \
                or stage.op is not stage.origin_op:
            raise ScheduleError(f"{where}: it must come before the stage's other primitives "
                                "(split, reorder, compute_at, cache_write, ...)")
        if any(other.attach_stage is stage for other in self.stages):
            raise ScheduleError(f"{where}: a stage is computed at one of its loops; call "
                                "split_residues first")
        if not axes or len(axes) != len(factors):
            raise ScheduleError(f"{where}: give one factor per axis (got {len(axes)} axes and "
                                f"{len(factors)} factors)")
        splits = []
        for axis, factor in zip(axes, factors):
            iv = stage._leaf(axis, "split_residues")
            if iv.kind is not IterKind.DATA or not any(iv is a for a in stage.op.axis):
                raise ScheduleError(f"{where}: {iv.name} is not a data axis of {stage.name} "
                                    f"({', '.join(a.name for a in stage.op.axis)})")
            if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
                raise ScheduleError(f"{where}: the factor of {iv.name} must be an integer >= 2, "
                                    f"got {factor!r}")
            if not isinstance(iv.extent, int) or iv.start != 0 or iv.extent % factor:
                raise ScheduleError(f"{where}: {iv.name} (extent {iv.extent}) must have a "
                                    f"constant extent that is a multiple of its factor {factor}")
            if any(iv is other for other, _ in splits):
                raise ScheduleError(f"{where}: axis {iv.name} is given twice")
            splits.append((iv, factor))
        res_op, copy_op = residue_ops(stage.op, splits)
        stage.op = copy_op
        stage.all_iter_vars = list(copy_op.axis)
        stage.leaf_iter_vars = list(copy_op.axis)
        self._insert_stage(res_op, before=stage)
        record(self, StepKind.SPLIT_RESIDUES, stage.name, axes=[iv.name for iv, _ in splits],
               factors=[c for _, c in splits])
        return res_op.output()

    def deinterleave(self, tensor, stride, readers) -> Tensor:
        """Read *tensor* through a copy ``<name>.deint`` whose last dimension is split into its
        residue classes modulo *stride* (``copy[..., r, q] = tensor[..., stride * q + r]``).

        The stages of *readers* read the copy instead (``tensor[..., i]`` as ``copy[..., i %
        stride, i // stride]``), so a strided convolution's ``Pad[..., 2 * x + s]`` becomes
        ``copy[..., s % 2, x + s // 2]``, contiguous in ``x``.  See
        :mod:`einloop.te.residues`.
        """
        stage = self[tensor]
        where = f"deinterleave of {stage.name}"
        readers = [readers] if isinstance(readers, (Tensor, Stage)) else list(readers)
        reader_stages = [r if isinstance(r, Stage) else self[r] for r in readers]
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 2:
            raise ScheduleError(f"{where}: the stride must be an integer >= 2, got {stride!r}")
        _single_output("deinterleave", stage)
        src = stage.origin_op.output()
        if not src.shape or not isinstance(src.shape[-1], int):
            raise ScheduleError(f"{where}: its last dimension must have a constant extent")
        if not reader_stages:
            raise ScheduleError(f"{where}: give the reader stages")
        refuse_self_copy(stage, reader_stages, "deinterleave")
        refuse_reader(reader_stages, "deinterleave")
        for r in reader_stages:
            r._not_extern_reader("deinterleave", stage)
            if not r.is_compute or not any(t.op is stage.origin_op for t in r.op.input_tensors):
                raise ScheduleError(f"{where}: stage {r.name} does not read {stage.name}")
            if r.relations or r.annotations:
                raise ScheduleError(f"{where}: it must come before the other primitives of "
                                    f"its reader {r.name}")
        dop = deinterleave_op(src, stride)
        for r in reader_stages:
            r.op = reread_deinterleaved(r.op, src, dop, stride)
        self._insert_stage(dop, before=min(reader_stages, key=self.stages.index))
        record(self, StepKind.DEINTERLEAVE, stage.name, stride=stride,
               readers=[r.name for r in reader_stages])
        return dop.output()

    @staticmethod
    def _tensorized(stage, axis, intrin) -> Tensorized:
        """*stage*'s tensorize directive, once the loops from *axis* in are checked to compute
        *intrin* (here rather than in stage.py: the check needs bound inference's helpers,
        which import the stage module)."""
        check_tensorize(stage, axis, intrin)
        return Tensorized(axis, intrin)

    def _insert_stage(self, op, before):
        name, n = op.name, 1
        while any(s.name == name for s in self.stages):
            name, n = f"{op.name}_{n}", n + 1
        stage = Stage(self, op, name)
        self.stages.insert(self.stages.index(before), stage)
        self._by_op[id(op)] = stage
        return stage

    # steps ----------------------------------------------------------------------------------
    def apply_steps(self, steps):
        """Replay *steps* (Step objects or their JSON dicts, all validated first) on this
        schedule."""
        for st in as_steps(steps):
            apply_step(self, st)
        return self

    def copy(self) -> Schedule:
        """A new schedule of the same outputs with the same steps applied."""
        return Schedule(self.outputs).apply_steps(self.steps)

    def __str__(self):
        return steps_to_text(self)

    __repr__ = __str__


def _check_scope(primitive, stage, scope):
    if not isinstance(scope, str) or not scope:
        raise ScheduleError(f"{primitive} of {stage.name}: the scope must be a name such as "
                            f"'local', got {scope!r}")


def _single_output(primitive, stage):
    """A ScheduleError for a primitive that copies or rewrites one output of *stage* when it
    has several (it would leave the others behind)."""
    n = stage.origin_op.num_outputs
    if n > 1:
        raise ScheduleError(f"{primitive} of {stage.name}: it is a multi-output stage ({n} "
                            f"outputs computed in one loop nest), which {primitive} does not "
                            f"support; copy the output you need with a compute of its own "
                            f"(te.compute(shape, lambda ...: {stage.name}.v0[...])) and "
                            f"{primitive} that")


def _axis_names(n):
    return ["ax%d" % d for d in range(n)]


def _substitute_body(body, mapping, reduce_map):
    def fn(x):
        if isinstance(x, E.Var):
            return mapping.get(x)
        if isinstance(x, E.Reduce):
            return E.Reduce(x.reducer, x.source, tuple(reduce_map.get(id(a), a) for a in x.axes),
                            x.condition, x.dtype)
        return None
    return transform(body, fn)


def _redirect_reads(op, src_op, new_tensor):
    def fn(x):
        if isinstance(x, E.TensorRead) and x.tensor.op is src_op:
            return E.TensorRead(new_tensor, x.indices, x.dtype)
        return None
    return ComputeOp(op.name, op.axis, transform(op.body, fn), op.reduce_axis, op.attrs)


def create_schedule(outputs) -> Schedule:
    """A default schedule (one stage per operation, each computed at the root) of *outputs*."""
    return Schedule(outputs)

