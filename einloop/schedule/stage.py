"""A stage: one operation's loop nest under transformation (TVM's design).

A stage keeps the split/fuse relations between its iteration variables, the current order of its
leaf loops, per-loop annotations and where it is computed (its attach point).  The primitives
validate their arguments and record a :class:`~einloop.schedule.steps.Step` so that the schedule
can be printed, copied and replayed.
"""
from __future__ import annotations

from dataclasses import dataclass
import enum
import numbers

from ..errors import ScheduleError
from ..ir.expr import Var
from ..te.extern import ExternOp
from ..te.tensor import IterVar, IterKind, ComputeOp
from ..te.scatter import is_scatter
from ..te.tensor_intrin import TensorIntrin
from .scatter_checks import parallel_domain_error, refuse
from ..ir.stmt import ForKind
from .steps import StepKind, record
from .unsupported import STAGE_PRIMITIVES, missing_attribute


@dataclass(frozen=True, eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None      # inner extent, or None when split by nparts
    nparts: int | None


@dataclass(frozen=True, eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


class AttachKind(enum.StrEnum):
    """Where a stage is computed: at the root, inlined into its consumers, or at a loop of
    another stage."""
    ROOT = "root"
    INLINE = "inline"
    AT = "at"


@dataclass(frozen=True)
class PrefetchAt:
    """``s[stage].prefetch(source, axis, offset)``: what to prefetch at which loop, how far
    ahead."""
    source: "Stage"
    axis: IterVar
    offset: int


def _new_iv(name, extent, kind):
    return IterVar(Var(name), 0, extent, kind)


class Stage:
    """The schedule of one operation.  Obtain it as ``s[tensor]``."""

    def __init__(self, schedule, op, name):
        self._schedule = schedule
        self.op = op                      # the current op (cache_read/write may rewrite its body)
        self.origin_op = op               # the op user tensors point to
        self.name = name
        self.is_output = False
        axes = tuple(op.axis) + tuple(op.reduce_axis) if isinstance(op, ComputeOp) else ()
        self.all_iter_vars = list(axes)
        self.leaf_iter_vars = list(axes)
        self.relations = []
        self.annotations = {}             # IterVar -> ForKind
        self.prefetches = []              # Prefetch directives, in the order given
        self.streaming = False            # nontemporal(): stores stream around the caches
        self.storage_dims = None          # storage_order(): data dims, outermost first
        self.tensorized = None            # tensorize(): a Tensorized (loop, intrinsic)
        self.attach = AttachKind.ROOT
        self.attach_stage = None
        self.attach_ivar = None

    # helpers --------------------------------------------------------------------------------
    def __repr__(self):
        return f"stage({self.name})"

    def __getattr__(self, name):
        """Only called for a missing attribute: say so helpfully if it is a TVM/Halide primitive."""
        stage_name = self.__dict__.get("name", "?")
        missing_attribute(self, f"s[{stage_name}]", name, STAGE_PRIMITIVES)

    @property
    def is_compute(self):
        return isinstance(self.op, ComputeOp)

    @property
    def is_extern(self):
        """Computed by an external C function (``te.extern``): no loops to schedule."""
        return isinstance(self.op, ExternOp)

    def _extern_readers(self):
        """The external stages that read this stage's buffer whole."""
        return [st for st in self._schedule.stages if st.is_extern
                and any(t.op is self.origin_op for t in st.op.inputs)]

    def _not_read_by_extern(self, primitive, what):
        """A ScheduleError when an external stage reads this one: its buffer must be whole."""
        readers = self._extern_readers()
        if readers:
            r = readers[0]
            raise ScheduleError(f"{primitive}: stage {self.name} is read by the external stage "
                                f"{r.name} (the C function {r.op.symbol}), which reads its whole "
                                f"buffer, so it cannot be {what}; leave {self.name} at the root")

    def _record(self, kind, **args):
        record(self._schedule, kind, self.name, **args)

    def iter_var(self, name) -> IterVar:
        """This stage's iteration variable called *name* (for replaying steps)."""
        for iv in self.all_iter_vars:
            if iv.name == name:
                return iv
        raise ScheduleError(f"stage {self.name} has no axis named {name!r}; its axes are "
                            f"{', '.join(iv.name for iv in self.all_iter_vars) or 'none'}")

    def _leaf(self, iv, primitive) -> IterVar:
        if not isinstance(iv, IterVar):
            raise ScheduleError(f"{primitive} on stage {self.name}: expected an axis (IterVar), "
                                f"got {iv!r}")
        if any(iv is x for x in self.leaf_iter_vars):
            return iv
        if any(iv is x for x in self.all_iter_vars):
            raise ScheduleError(
                f"{primitive} on stage {self.name}: axis {iv.name} was already split or fused; "
                f"use its current loops: {', '.join(x.name for x in self.leaf_iter_vars)}")
        owner = self._schedule._owner_of(iv)
        where = f"belongs to stage {owner.name}" if owner else "is not an axis of this schedule"
        raise ScheduleError(f"{primitive} on stage {self.name}: axis {iv.name} {where}; use "
                            f"s[{self.name}].op.axis / .op.reduce_axis or the loops that "
                            f"split/fuse returned for this stage")

    def _not_annotated(self, iv, primitive):
        kind = self.annotations.get(iv)
        if kind is not None:
            raise ScheduleError(f"{primitive} on stage {self.name}: loop {iv.name} is already "
                                f"{kind.value}; {primitive} first, then annotate the loops that "
                                "result")
        if any(p.axis is iv for p in self.prefetches):
            raise ScheduleError(f"{primitive} on stage {self.name}: loop {iv.name} prefetches; "
                                f"{primitive} first, then prefetch at the loops that result")

    def _not_an_attach_point(self, iv, primitive):
        for other in self._schedule.stages:
            if other.attach_ivar is iv:
                raise ScheduleError(
                    f"{primitive} on stage {self.name}: stage {other.name} is computed at loop "
                    f"{iv.name}; {primitive} the loop before calling compute_at, or compute "
                    f"{other.name} at the loop that results")

    def _unique(self, name):
        taken = {iv.name for iv in self.all_iter_vars}
        out, n = name, 1
        while out in taken:
            out, n = f"{name}{n}", n + 1
        return out

    def _not_extern(self, primitive):
        """A ScheduleError for any *primitive* on an external stage, which has no loops."""
        if self.is_extern:
            raise ScheduleError(f"{primitive}: stage {self.name} is an external stage (the C "
                                f"function {self.op.symbol}), which has no loops to schedule; "
                                "schedule the stages that produce or read it instead")

    def _not_extern_reader(self, primitive, source):
        """A ScheduleError when external stage *self* is named a reader of a copy of
        *source*: its C function reads *source*'s own whole buffer."""
        if self.is_extern:
            raise ScheduleError(f"{primitive} of {source.name}: stage {self.name} is an "
                                f"external stage (the C function {self.op.symbol}), which reads "
                                f"the whole buffer of {source.name} itself, not a copy; leave "
                                f"it out of the readers")

    def _require_compute(self, primitive):
        self._not_extern(primitive)
        if not self.is_compute:
            raise ScheduleError(f"{primitive}: stage {self.name} is a placeholder (an input); "
                                "only compute stages have loops to schedule")
        if self.attach == AttachKind.INLINE:
            raise ScheduleError(f"{primitive}: stage {self.name} is inlined and has no loops of "
                                "its own; call compute_root() first to give it back its loops")

    # loop transformations -------------------------------------------------------------------
    def split(self, parent, factor=None, nparts=None):
        """Split *parent* into (outer, inner) loops, by inner extent *factor* or outer *nparts*.

        A factor that does not divide the extent is allowed: the tail is guarded.
        """
        self._require_compute("split")
        parent = self._leaf(parent, "split")
        self._not_tensorized_inside(parent, "split")
        self._not_an_attach_point(parent, "split")
        self._not_annotated(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"split on stage {self.name}, axis {parent.name}: give exactly one "
                                "of factor= or nparts=")
        value = factor if factor is not None else nparts
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ScheduleError(f"split on stage {self.name}, axis {parent.name}: "
                                f"{'factor' if factor is not None else 'nparts'} must be a positive "
                                f"integer, got {value!r}")
        value = int(value)
        ext = parent.extent
        if not isinstance(ext, int):            # symbolic: the factor stays, the tail is guarded
            ceil = (ext + (value - 1)) // value
            inner_ext, outer_ext = (value, ceil) if factor is not None else (ceil, value)
        elif factor is not None:
            inner_ext = min(value, ext)
            outer_ext = -(-ext // inner_ext)
        else:
            outer_ext = min(value, ext)
            inner_ext = -(-ext // outer_ext)
        outer = _new_iv(self._unique(parent.name + ".outer"), outer_ext, parent.kind)
        inner = _new_iv(self._unique(parent.name + ".inner"), inner_ext, parent.kind)
        rel = Split(parent, outer, inner, int(factor) if factor is not None else None,
                    int(nparts) if nparts is not None else None)
        self.relations.append(rel)
        self.all_iter_vars += [outer, inner]
        k = next(n for n, x in enumerate(self.leaf_iter_vars) if x is parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._record(StepKind.SPLIT, axis=parent.name, factor=factor, nparts=nparts)
        return outer, inner

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two axes and order them (x.outer, y.outer, x.inner, y.inner)."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *ivars):
        """Fuse adjacent loops (outermost first) into one."""
        self._require_compute("fuse")
        if len(ivars) < 2:
            if len(ivars) == 1:
                return self._leaf(ivars[0], "fuse")
            raise ScheduleError(f"fuse on stage {self.name}: give at least one axis")
        fused = self._leaf(ivars[0], "fuse")
        for iv in ivars[1:]:
            fused = self._fuse2(fused, self._leaf(iv, "fuse"))
        return fused

    def _fuse2(self, outer, inner):
        if outer is inner:
            raise ScheduleError(f"fuse on stage {self.name}: {outer.name} is listed twice")
        for iv in (outer, inner):
            self._not_tensorized_inside(iv, "fuse")
            self._not_an_attach_point(iv, "fuse")
            self._not_annotated(iv, "fuse")
        pos = {id(x): n for n, x in enumerate(self.leaf_iter_vars)}
        if pos[id(inner)] != pos[id(outer)] + 1:
            raise ScheduleError(
                f"fuse on stage {self.name}: {outer.name} and {inner.name} are not adjacent loops "
                f"(outer first); the loop order is "
                f"{', '.join(x.name for x in self.leaf_iter_vars)}; reorder them first")
        if outer.kind is not inner.kind:
            raise ScheduleError(f"fuse on stage {self.name}: cannot fuse the data axis and the "
                                f"reduction axis ({outer.name}, {inner.name})")
        fused = _new_iv(self._unique(f"{outer.name}.{inner.name}.fused"),
                        outer.extent * inner.extent, outer.kind)
        self.relations.append(Fuse(outer, inner, fused))
        self.all_iter_vars.append(fused)
        k = pos[id(outer)]
        self.leaf_iter_vars[k:k + 2] = [fused]
        self._record(StepKind.FUSE, outer=outer.name, inner=inner.name)
        return fused

    def reorder(self, *ivars):
        """Put the given loops in this order, in the positions they occupy now."""
        self._require_compute("reorder")
        ivars = [self._leaf(iv, "reorder") for iv in ivars]
        for iv in ivars:
            self._not_tensorized_inside(iv, "reorder")
        if len({id(x) for x in ivars}) != len(ivars):
            raise ScheduleError(f"reorder on stage {self.name}: an axis is listed twice in "
                                f"({', '.join(x.name for x in ivars)})")
        slots = sorted(n for n, x in enumerate(self.leaf_iter_vars) if any(x is y for y in ivars))
        for n, iv in zip(slots, ivars):
            self.leaf_iter_vars[n] = iv
        self._record(StepKind.REORDER, axes=[x.name for x in ivars])

    def _annotate(self, iv, kind, primitive):
        self._require_compute(primitive)
        iv = self._leaf(iv, primitive)
        self._not_tensorized_inside(iv, primitive)
        if kind in (ForKind.VECTORIZED, ForKind.PARALLEL) and iv.kind is IterKind.REDUCE:
            if is_scatter(self.op):
                raise parallel_domain_error(self, iv, primitive)
            raise ScheduleError(
                f"{primitive} on stage {self.name}: {iv.name} is a reduction axis; running its "
                f"iterations at once would race on the accumulator. {primitive} a data axis, or "
                f"split the reduction and reorder it outward")
        old = self.annotations.get(iv)
        if old is not None and old is not kind:
            raise ScheduleError(f"{primitive} on stage {self.name}: {iv.name} is already "
                                f"{old.value}; a loop has one kind")
        self.annotations[iv] = kind
        self._record(StepKind(primitive), axis=iv.name)

    def vectorize(self, iv):
        """Run the (constant-extent) loop *iv* as SIMD lanes; loops inside it stay loops whose
        bodies run on all lanes at once (a vector accumulator over a serial reduction)."""
        self._annotate(iv, ForKind.VECTORIZED, "vectorize")

    def parallel(self, iv):
        """Run the iterations of data loop *iv* on all cores."""
        self._annotate(iv, ForKind.PARALLEL, "parallel")

    def unroll(self, iv):
        """Replicate the body of loop *iv* once per iteration."""
        self._annotate(iv, ForKind.UNROLLED, "unroll")

    def prefetch(self, tensor, iv, offset=1):
        """At the start of each iteration of loop *iv*, bring into the cache the part of *tensor*
        that the iteration *offset* iterations later reads (Halide's ``Func::prefetch``, TVM's
        ``s[B].prefetch``): the memory latency of a block streamed per iteration (a row, a
        tile) overlaps the work in between.  A hint, so the results are the same: where the
        part read is not one range of the buffer or exceeds
        :data:`~einloop.schedule.passes.prefetch.PREFETCH_MAX_BYTES`, nothing is prefetched.
        Reads by stages computed inside *iv* count.  See :mod:`einloop.schedule.passes.prefetch`.
        """
        self._require_compute("prefetch")
        iv = self._leaf(iv, "prefetch")
        if isinstance(offset, bool) or not isinstance(offset, numbers.Integral) or offset < 1:
            raise ScheduleError(f"prefetch on stage {self.name}: offset must be a positive "
                                f"number of iterations, got {offset!r}")
        if self.annotations.get(iv) is ForKind.VECTORIZED:
            raise ScheduleError(f"prefetch on stage {self.name}: loop {iv.name} is vectorized; "
                                "prefetch at a loop outside the vector loop")
        source = self._schedule[tensor]          # a ScheduleError for a foreign tensor
        if source is self:
            raise ScheduleError(f"prefetch on stage {self.name}: a stage prefetches what it "
                                f"reads, not what it writes; name an input of {self.name}")
        self.prefetches = [p for p in self.prefetches
                           if not (p.axis is iv and p.source is source)]
        self.prefetches.append(PrefetchAt(source, iv, int(offset)))
        self._record(StepKind.PREFETCH, tensor=source.name, axis=iv.name, offset=int(offset))

    def nontemporal(self):
        """Write this stage's buffer with streaming (non-temporal) stores: each cache line
        goes to memory without first being read in, and without evicting what the caches
        hold.  A large output written once (a softmax's, a big elementwise result) then costs
        one pass of memory traffic instead of two (the read for ownership, the write-back), and
        leaves the caches to its inputs.  Only for a stage whose every element is stored once:
        not a reduction (give it a ``cache_write`` accumulator first; the stage then only
        copies it out), and not one computed at another stage's loop (its buffer lives in
        cache).  A hint: the results are the same.  Vector stores under a tail mask and
        scatters stay plain.
        """
        self._require_compute("nontemporal")
        if self.op.reduce_axis:
            raise ScheduleError(f"nontemporal on stage {self.name}: it is a reduction, which "
                                "stores each element once per reduction step; call "
                                f"s.cache_write({self.name}) first and stream the stage that "
                                "copies the accumulator out")
        self.streaming = True
        self._record(StepKind.NONTEMPORAL)

    def storage_order(self, *axes):
        """Lay this stage's buffer out with its dimensions in the order *axes* (its data axes,
        ``s[T].op.axis``, each once), outermost first as in :meth:`reorder`; the innermost
        is contiguous.  Halide's ``reorder_storage``, outermost first.

        Loops and buffers then agree: a tile of ``C[f, y, x]`` computed at a consumer's loop
        and vectorized along ``f`` (a convolution's output channels, when its rows are 7, 14
        or 56 wide and no multiple of the vector) gets ``storage_order(y, x, f)``, so its
        vector loads and stores are contiguous instead of gathers and scatters.  Only for a
        buffer that is the kernel's own (a stage computed at a loop or at the root): an
        output's or an argument's layout is the caller's.  The results are the same.
        """
        self._require_compute("storage_order")
        refuse(self, "storage_order", "whose output is stored whole as the caller lays it "
                                     "out")
        where = f"storage_order on stage {self.name}"
        if self.is_output:
            raise ScheduleError(f"{where}: it is an output of the schedule, whose layout is the "
                                "caller's; order the storage of a stage it reads (cache_write "
                                "gives it one)")
        data = list(self.op.axis)
        dims = []
        for iv in axes:
            if not isinstance(iv, IterVar):
                raise ScheduleError(f"{where}: expected data axes (IterVars), got {iv!r}")
            at = next((d for d, a in enumerate(data) if a is iv), None)
            if at is None:
                raise ScheduleError(f"{where}: {iv.name} is not a data axis of {self.name}; "
                                    "its data axes are "
                                    f"{', '.join(a.name for a in data)} (loops made by split "
                                    "or fuse do not lay out storage)")
            if at in dims:
                raise ScheduleError(f"{where}: axis {iv.name} is given twice")
            dims.append(at)
        if len(dims) != len(data):
            raise ScheduleError(f"{where}: give every data axis once, outermost first: "
                                f"{', '.join(a.name for a in data)}; got "
                                f"{', '.join(data[d].name for d in dims) or 'none'}")
        self.storage_dims = None if dims == sorted(dims) else tuple(dims)
        self._record(StepKind.STORAGE_ORDER, axes=[data[d].name for d in dims])

    def tensorize(self, axis, intrin):
        """Compute the loops from *axis* inwards with one call of tensor intrinsic *intrin* (a
        :class:`~einloop.te.tensor_intrin.TensorIntrin`) per iteration of the loops outside.

        The loops must compute exactly the intrinsic's reduction on operands laid out as its
        tiles (see :mod:`einloop.schedule.tensorize`); a ScheduleError says what differs.  Call
        it last on the stage: loops inside *axis* then cannot be split or annotated.  Building
        checks that the target has the intrinsic's features.
        """
        self._require_compute("tensorize")
        axis = self._leaf(axis, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"tensorize on stage {self.name}: expected a te.TensorIntrin, "
                                f"got {intrin!r}")
        if self.tensorized is not None:
            raise ScheduleError(f"tensorize on stage {self.name}: it is tensorized already (at "
                                f"loop {self.tensorized.axis.name} with "
                                f"{self.tensorized.intrin.name}); a stage has one tensorized "
                                "loop nest")
        self.tensorized = self._schedule._tensorized(self, axis, intrin)
        self._record(StepKind.TENSORIZE, axis=axis.name, intrin=intrin.name)

    def _not_tensorized_inside(self, iv, primitive):
        """A ScheduleError when loop *iv* is one of the loops tensorize replaces."""
        tz = self.tensorized
        if tz is None:
            return
        pos = next(n for n, x in enumerate(self.leaf_iter_vars) if x is tz.axis)
        if any(iv is x for x in self.leaf_iter_vars[pos:]):
            raise ScheduleError(f"{primitive} on stage {self.name}: loop {iv.name} is one of the "
                                f"loops that tensorize replaces (from {tz.axis.name} inwards, "
                                f"by {tz.intrin.name}); schedule the loops before tensorize")

    # placement ------------------------------------------------------------------------------
    def compute_at(self, parent, ivar):
        """Compute this stage inside loop *ivar* of stage *parent*, just the region it needs.

        *parent* must use this stage, directly or through stages that are themselves computed
        at a loop of *parent*; *parent* may itself be computed at a loop of another stage, and
        every other consumer of this stage must run inside *ivar*, computed at a loop of
        *parent* inside it or nested there through such a chain (checked when lowering).
        """
        self._require_compute("compute_at")
        refuse(self, "compute_at", "which updates its whole output at indices read from "
                                  "data; compute it at the root")
        self._not_read_by_extern("compute_at", "computed at a loop of another stage")
        if not isinstance(parent, Stage):
            raise ScheduleError(f"compute_at on stage {self.name}: the first argument must be a "
                                f"stage (s[T]), got {parent!r}")
        if self.is_output:
            raise ScheduleError(f"compute_at: stage {self.name} is an output of the schedule; an "
                                "output must be computed at the root")
        if not self._schedule._depends_on(parent, self):
            consumers = self._schedule._consumers(self)
            raise ScheduleError(
                f"compute_at: stage {parent.name} does not use {self.name}; compute a stage at "
                f"a loop of a stage that reads it ({', '.join(c.name for c in consumers) or 'none'})")
        if parent.attach == AttachKind.INLINE:
            raise ScheduleError(f"compute_at: stage {parent.name} is inlined and has no loops")
        ivar = parent._leaf(ivar, "compute_at")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.AT, parent, ivar
        self._record(StepKind.COMPUTE_AT, parent=parent.name, axis=ivar.name)

    def compute_inline(self):
        """Substitute this stage's expression into its consumers (no loops or buffer of its own)."""
        self._require_compute("compute_inline")
        self._not_read_by_extern("compute_inline", "inlined")
        if self.op.reduce_axis:
            raise ScheduleError(f"compute_inline: stage {self.name} is a reduction; inlining it "
                                "would recompute the whole reduction per use. Use compute_at "
                                "instead")
        if self.is_output:
            raise ScheduleError(f"compute_inline: stage {self.name} is an output of the schedule "
                                "and must be stored")
        if self.relations or self.annotations:
            raise ScheduleError(f"compute_inline: stage {self.name} already has loop "
                                "transformations; an inlined stage has no loops")
        for other in self._schedule.stages:
            if other.attach_stage is self:
                raise ScheduleError(f"compute_inline: stage {other.name} is computed at a loop of "
                                    f"{self.name}; move it first")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.INLINE, None, None
        self._record(StepKind.COMPUTE_INLINE)

    def compute_root(self):
        """Compute this stage on its own, at the outermost level, into a full buffer (where an
        external stage always is)."""
        if not self.is_compute and not self.is_extern:
            raise ScheduleError(f"compute_root: stage {self.name} is a placeholder")
        self.attach, self.attach_stage, self.attach_ivar = AttachKind.ROOT, None, None
        self._record(StepKind.COMPUTE_ROOT)
