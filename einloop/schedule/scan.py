"""Scheduling and lowering of scans (:mod:`einloop.te.scan`).

A scan's stage is a compute stage whose body reads its own buffer at earlier steps, so it
lowers like any compute (``csum[t, i] = select(t < 1, init[t, i], csum[t - 1, i] + X[t, i])``)
as long as every point of the other axes sees its steps in increasing order.  What keeps that
order, and what is refused with a :class:`~einloop.errors.ScheduleError`:

* the scan axis (``s[csum].scan_axis``) stays one serial loop: no split, fuse, vectorize or
  parallel (unroll keeps the order and is allowed); it may be reordered among the spatial
  axes (``s[csum].spatial_axes``), which split, fuse, vectorize and parallelize freely: for a
  fixed spatial point the steps still run in order.  A cumulative sum down the rows (axis 0)
  then runs ``parallel i.outer, t, vectorized i.inner``; along each row (the contiguous axis)
  ``parallel i, t``.
* a step that reads another spatial point of an earlier step (a stencil recurrence) needs that
  step finished everywhere: the scan loop must be the outermost (checked when lowering).
* a scan is never inlined; computed at a loop of a consumer it must compute every step there
  (the region along its scan axis is the whole axis), and it must not read other points.
* what would move its steps away from the buffer they read is refused: ``cache_write``,
  ``split_residues``, a copy of the scan (``cache_read``, ``pack``, ``deinterleave``) read by
  the scan itself, and ``nontemporal`` stores (each step reads the last one back).
* the states of a multi-state scan share the first state's loops: the first (the leader) is
  scheduled, the others (partners) have no primitives, and the leader stores them all at each
  point (:func:`partner_stores`); such a scan is computed at the root.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir.stmt import ForKind, Store
from ..ir.visit import reads_of, substitute
from ..te.scan import ScanOp
from .stage import AttachKind, Stage


def stage_for(schedule, op, name) -> Stage:
    """The stage of *op*: a :class:`ScanStage` for a scan, else a plain one."""
    return (ScanStage if isinstance(op, ScanOp) else Stage)(schedule, op, name)


def is_partner(stage) -> bool:
    """Is *stage* a scan state whose stores the leader's loop nest makes (it has no loops)?"""
    op = stage.origin_op
    return isinstance(op, ScanOp) and op is not op.leader


class ScanStage(Stage):
    """The stage of a scan state.  ``scan_axis`` is the serial axis, ``spatial_axes`` the others
    (TVM's ``scan_axis`` and spatial axes)."""

    @property
    def scan_axis(self):
        return self.origin_op.scan_axis

    @property
    def spatial_axes(self) -> tuple:
        return self.origin_op.spatial_axes

    def _require_compute(self, primitive):
        if is_partner(self):
            leader = self._schedule[self.origin_op.leader]
            k = self.origin_op.group.index(self.origin_op)
            raise ScheduleError(
                f"{primitive}: {self.name} is state {k} "
                f"of the scan {leader.name}, whose states share one loop nest; schedule it "
                f"through the first state, s[{leader.name}]")
        super()._require_compute(primitive)

    def _refuse_scan_axis(self, ivars, primitive, why):
        if any(iv is self.scan_axis for iv in ivars):
            raise ScheduleError(
                f"{primitive} on stage {self.name}: {self.scan_axis.name} is the scan axis, whose "
                f"steps must run one after another in one serial loop ({why}); "
                f"{primitive} its spatial axes ({', '.join(iv.name for iv in self.spatial_axes)})")

    def split(self, parent, factor=None, nparts=None):
        self._require_compute("split")
        self._refuse_scan_axis([parent], "split", "a split loop could not be reordered")
        return super().split(parent, factor, nparts)

    def fuse(self, *ivars):
        self._require_compute("fuse")
        self._refuse_scan_axis(ivars, "fuse", "a fused loop could not be reordered")
        return super().fuse(*ivars)

    def _annotate(self, iv, kind, primitive):
        self._require_compute(primitive)
        if kind in (ForKind.VECTORIZED, ForKind.PARALLEL):
            self._refuse_scan_axis([iv], primitive, "each step reads the step before")
        super()._annotate(iv, kind, primitive)

    def compute_inline(self):
        self._require_compute("compute_inline")
        raise ScheduleError(f"compute_inline: stage {self.name} is a scan, whose steps read its "
                            "earlier steps from its buffer; it must be stored (compute it at the "
                            "root, or at a loop of a consumer outside its scan axis)")

    def compute_at(self, parent, ivar):
        self._require_compute("compute_at")
        if parent is self:
            raise ScheduleError(f"compute_at: stage {self.name} cannot be computed at a loop of "
                                "its own (a scan reads its earlier steps, but it does not "
                                "consume itself)")
        if len(self.origin_op.group) > 1:
            raise ScheduleError(f"compute_at: stage {self.name} is a scan of "
                                f"{len(self.origin_op.group)} states, which is computed at the "
                                "root (its states are stored in one loop nest)")
        super().compute_at(parent, ivar)

    def nontemporal(self):
        self._require_compute("nontemporal")
        raise ScheduleError(f"nontemporal on stage {self.name}: it is a scan, whose next step "
                            "reads back what this one stores; streaming stores would send each "
                            "step to memory and read it again")


def refuse_scan(stage, primitive):
    """A ScheduleError for a schedule-level primitive that rewrites a stage's body as a whole
    (cache_write, split_residues): a scan's body reads its own buffer, which would then be
    another stage's."""
    if isinstance(stage.origin_op, ScanOp):
        raise ScheduleError(f"{primitive} of {stage.name}: it is a scan, whose steps read its "
                            f"own buffer; {primitive} would move the steps away from the buffer "
                            "they read. Schedule the scan's loops directly")


def refuse_self_copy(stage, readers, primitive):
    """A ScheduleError if *readers* (stages) would read scan *stage* through a copy that
    *primitive* (cache_read, pack, deinterleave) makes of it, the scan among them: its steps
    would read the copy, made before any step ran."""
    if isinstance(stage.origin_op, ScanOp) and any(r is stage for r in readers):
        raise ScheduleError(f"{primitive} of {stage.name}: {stage.name} is a scan, whose steps "
                            f"read its earlier steps from its own buffer; a copy of it can be "
                            f"read by its consumers, not by the scan itself")


# lowering ----------------------------------------------------------------------------------------

def partner_stores(builder, stage, loops) -> tuple:
    """The stores of the partner states of scan leader *stage* at the point of *loops* (the
    leader's loops, at the root), for :class:`~einloop.schedule.nest.NestBuilder`."""
    op = stage.origin_op
    if not isinstance(op, ScanOp) or len(op.group) == 1:
        return ()
    at = [loops.absolute[iv.var] for iv in op.axis]
    stores = []
    for partner in op.group[1:]:
        buf = builder.buffers[id(partner)]
        body = builder.bodies[builder.schedule[partner]]
        value = builder._loads(substitute(body, {iv.var: x for iv, x in zip(partner.axis, at)}))
        stores.append(Store(buf, builder._flat(partner, buf, at, None), value))
    return tuple(stores)


def scan_stages_are_placed(f):
    """Nothing is computed at a partner state's loops (it has none), and what partners read is
    computed before the leader's loops (run by ``verify`` before bound inference)."""
    for st in f.schedule.stages:
        if st.attach == AttachKind.AT and is_partner(st.attach_stage):
            raise ScheduleError(
                f"stage {st.name} is computed at a loop of {st.attach_stage.name}, a state of the "
                f"scan {f.schedule[st.attach_stage.origin_op.leader].name} that has no loops of "
                "its own; compute it at a loop of the scan's first state")
        if isinstance(st.origin_op, ScanOp) and not is_partner(st):
            _partners_read_earlier_stages(f.schedule, st)
        if st.attach == AttachKind.AT and isinstance(st.attach_stage.origin_op, ScanOp):
            _not_read_by_partners(f, st)


def scans_keep_their_order(f):
    """Every spatial point of a scan sees its steps in order, all of them (run by ``verify``,
    after the attach points are known to exist)."""
    for st in f.schedule.stages:
        if not isinstance(st.origin_op, ScanOp) or is_partner(st):
            continue
        if reads_other_points(st.origin_op):
            _scan_loop_outermost(st)
        if st.attach == AttachKind.AT:
            _attached_scan_runs_every_step(f, st)


def reads_other_points(op) -> bool:
    """Does a step of scan *op* read a state at another spatial point than its own?"""
    for member in op.group:
        own = [iv.var for iv in member.axis]
        for r in reads_of(member.body):
            if isinstance(r.tensor.op, ScanOp) and r.tensor.op.leader is op:
                if any(d != op.scan_dim and ix is not own[d] for d, ix in enumerate(r.indices)):
                    return True
    return False


def _scan_loop_outermost(stage):
    if stage.leaf_iter_vars[0] is not stage.scan_axis or stage.attach != AttachKind.ROOT:
        where = "computed at a loop of another stage" if stage.attach != AttachKind.ROOT else \
            f"inside the loop {stage.leaf_iter_vars[0].name}"
        raise ScheduleError(
            f"stage {stage.name}: its scan reads other spatial points of the step before, so each "
            f"step must finish everywhere before the next starts; the scan loop "
            f"{stage.scan_axis.name} is {where}. Keep {stage.scan_axis.name} the outermost loop "
            "(reorder it first) and the scan at the root")


def _attached_scan_runs_every_step(f, stage):
    ext = f.bounds[stage].extents[stage.scan_axis]
    if ext != stage.scan_axis.extent:
        raise ScheduleError(
            f"stage {stage.name} is a scan computed at {stage.attach_stage.name}."
            f"{stage.attach_ivar.name}, where its consumers read {ext} of its "
            f"{stage.scan_axis.extent} steps; each step needs the ones before it, so compute "
            f"the scan at a loop outside every loop over its steps, or at the root")


def _not_read_by_partners(f, stage):
    """A stage computed at a loop of a scan's first state is read by that state only: the
    bounds of its region there are the first state's reads."""
    leader = stage.attach_stage
    for partner in leader.origin_op.group[1:]:
        pst = f.schedule[partner]
        if any(r.tensor.op is stage.origin_op for r in reads_of(f.bodies[pst])):
            raise ScheduleError(
                f"stage {stage.name} is computed at {leader.name}.{stage.attach_ivar.name}, a "
                f"loop of the scan {leader.name}, but the scan's state {pst.name} reads it too; "
                f"a stage computed at a scan's loops may be read by its first state only: "
                f"compute {stage.name} at the root")


def _partners_read_earlier_stages(schedule, leader):
    """Every stage a partner state reads is computed before the leader's loops."""
    before = set(map(id, schedule.stages[:schedule.stages.index(leader)]))
    for partner in leader.origin_op.group[1:]:
        pst = schedule[partner]
        for r in reads_of(pst.op.body):
            dep = r.tensor.op
            if isinstance(dep, ScanOp) and dep.leader is leader.origin_op:
                continue
            if id(schedule[dep]) not in before:
                raise ScheduleError(
                    f"stage {pst.name}, a state of the scan {leader.name}, reads {dep.name}, "
                    f"which is computed after the scan's loops; a copy (cache_read, pack) that "
                    f"the scan's states read must be made for its first state, s[{leader.name}]")


__all__ = ["ScanStage", "stage_for", "is_partner", "refuse_scan", "refuse_self_copy",
           "partner_stores",
           "scan_stages_are_placed", "scans_keep_their_order", "reads_other_points"]
