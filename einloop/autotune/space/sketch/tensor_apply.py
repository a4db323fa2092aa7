"""The tensorized sketch applied: a reduction computed by a tensor intrinsic, tile by tile.

A stage ``C[..., i, j] = sum(..., k) A[..., i, k] * B[..., k, j]`` (int8 operands and an int32
sum, or bf16 operands and a float32 sum; a convolution's other reduction axes outside ``k``)
whose operand B varies along its last data axis ``j`` is scheduled as ``examples/gemm_int8.py``
is by hand:

- B is read through a copy laid out in the intrinsic's dense ``lanes x group`` tiles, column
  panel by column panel: packed along ``j`` by the lanes, then along ``k`` by the group, then
  its panel axis moved to the front (``s.pack`` three times, the last by 1; each copy but the
  last inlined, so B is read once), computed at the root, its outer loop parallel.  A panel's
  tiles are then contiguous along ``k``, as BLAS packs B: with ``k`` groups outermost, the
  reduction loop would step by a whole row of tiles (4 KiB at N = 1024: every step in the same
  L1 set);
- where the intrinsic has a variant reading A widened (:data:`~einloop.codegen.intrinsics.
  WIDENED_A`: AVX2's ``vpmaddwd`` takes int16 pairs), A is read through a copy widened once
  (``s.cache_read(A, "wide", [C], dtype=...)``, at the root, parallel) and the variant is used:
  the pair of A is then one broadcast load per row instead of a load, a widening and a
  broadcast;
- an accumulator of ``rows x tiles * lanes`` int32 or float32 (a ``cache_write`` stage, or the
  stage itself when an elementwise consumer is fused over it) is computed at the loop over
  register tiles; inside it, per ``group`` of ``k``, its rows and tiles are unrolled and each
  ``lanes x group`` tile loop pair is one call of the intrinsic (``s[T].tensorize``);
- the outer loops (column panels and row tiles, in :class:`TileOrder`) are fused into the
  parallel loop until every core has work, the copy-out's lanes vectorized.

The tensorize step goes through :func:`~einloop.schedule.tensorize.mismatch` first: a tile that
does not match is not tensorized (its loops stay ordinary code, still exact) and the plan
records why (:attr:`~.plan.StagePlan.tensor_skipped`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from ....codegen.intrinsics import WIDENED_A
from ....errors import ScheduleError
from ....ir.visit import free_vars, reads_of
from ....schedule.tensorize import mismatch
from .loops import parallel_outer


class TileOrder(enum.Enum):
    """The order of a tensorized stage's two tile loops outside the accumulator."""
    #: column panels outside, row tiles inside: a panel of the packed weight stays in cache
    #: while every row tile passes over it (oneDNN's and gemm_int8.py's order)
    COLS = "cols"
    #: row tiles outside, column panels inside: a block of rows of A stays in cache instead
    ROWS = "rows"


@dataclass(frozen=True)
class TensorPlan:
    """A config's tensorized sketch of one stage: the intrinsic, the register tile (*rows* of
    the row axis by *tiles* intrinsic tiles of the lanes axis) and the tile loops' order."""
    intrin: object
    rows: int
    tiles: int
    order: TileOrder
    #: register tiles of columns per panel, the panel's loop inside the row tiles' (an outer
    #: tile: a panel of the packed weight stays in cache while a row tile of A is reused
    #: across it, as BLAS blocks its loops); 1: no panel loop
    panel: int = 1

    @property
    def lanes(self) -> int:
        return self.intrin.shape[0]

    @property
    def group(self) -> int:
        return self.intrin.op.reduce_axis[0].extent


def weight_read(op):
    """``(tensor, lanes dim, group dim)`` of the operand of reduction *op* that varies along
    its last data axis (in one dimension, indexed by that axis alone) and along its last
    reduction axis (likewise): what is packed into the intrinsic's tiles.  None when no read,
    or more than one, is such an operand."""
    if not op.axis or not op.reduce_axis:
        return None
    j, k = op.axis[-1].var, op.reduce_axis[-1].var
    found = []
    for r in reads_of(op.body):
        jd = [d for d, ix in enumerate(r.indices) if j in free_vars(ix)]
        kd = [d for d, ix in enumerate(r.indices) if k in free_vars(ix)]
        if not jd:
            continue
        if len(jd) != 1 or len(kd) != 1 or r.indices[jd[0]] is not j \
                or r.indices[kd[0]] is not k:
            return None
        found.append((r.tensor, jd[0], kd[0]))
    return found[0] if len(found) == 1 else None


def pack_weight(s, op, lanes, group, cores, min_points):
    """Read *op*'s weight (:func:`weight_read`) through a copy in ``lanes x group`` tiles, by
    column panel: ``[..., K, ..., N, ...]`` -> ``[N/lanes, K/group, ..., lanes, group, 1]``
    (zero-padded where they do not divide), the intermediate copies inlined.  Returns the
    copy's stage."""
    tensor, jd, kd = weight_read(op)
    by_lanes = s.pack(tensor, jd, lanes, readers=[s[op]])     # [N/lanes, ..., lanes]
    kd_now = 1 + (kd if kd < jd else kd - 1)
    tiles = s.pack(by_lanes, kd_now, group)                   # [K/group, N/lanes, ..., group]
    s[by_lanes].compute_inline()
    panels = s.pack(tiles, 1, 1)                  # [N/lanes, K/group, ..., lanes, group, 1]
    s[tiles].compute_inline()
    st = s[panels]
    parallel_outer(st, list(st.leaf_iter_vars), cores, min_points=min_points)
    return st


def widen_rows_operand(s, op, tp, cores, min_points):
    """Read *op*'s other operand (A: not the packed weight) through a copy widened to the dtype
    of :data:`WIDENED_A`'s variant of *tp*'s intrinsic, computed at the root with its outer
    loops parallel; returns *tp* with the variant (without a copy where A has its dtype
    already).  *tp* unchanged where *op* reads A otherwise than through a cast of each element
    (the variant would not match; the plain intrinsic does)."""
    variant = WIDENED_A[tp.intrin.name]
    weight = weight_read(op)[0]                  # (op: the declared stage, B not packed yet)
    others = [t for t in op.input_tensors if t.op is not weight.op]
    if len(others) != 1:
        return tp
    if others[0].dtype == variant.inputs[0].dtype:
        return replace(tp, intrin=variant)
    try:
        wide = s.cache_read(others[0], "wide", [s[op]], dtype=variant.inputs[0].dtype)
    except ScheduleError:
        return tp
    st = s[wide]
    parallel_outer(st, list(st.leaf_iter_vars), cores, min_points=min_points)
    return replace(tp, intrin=variant)


def apply_tensorized(s, an, p):
    """The tensorized sketch of plan *p* (its ``tensor`` a :class:`TensorPlan`) on schedule
    *s*: returns (the loops that may host other stages, [(stage, parent, loop)] to compute_at
    once every loop exists).  The register tile is an accumulator stage where the tile's
    columns divide the lanes axis (or a consumer is fused over the stage); otherwise the stage
    is tiled in place (:func:`_tile_in_place`), since an accumulator of a partial last column
    tile would start at a column the intrinsic's packed tiles do not (its region is clamped
    to the tensor)."""
    tp, f, cores = p.tensor, p.facts, an.machine.cores
    pack_weight(s, f.op, tp.lanes, tp.group, cores, an.machine.min_parallel_points)
    if tp.intrin.name in WIDENED_A:
        tp = p.tensor = widen_rows_operand(s, f.op, tp, cores, an.machine.min_parallel_points)
    if f.fused_into is None and f.spatial[-1].extent % (tp.lanes * tp.tiles):
        return _tile_in_place(s[f.op], an, p), []
    if f.fused_into is not None:
        out_st, in_st = s[f.fused_into], s[f.op]
        tp = p.tensor = _dividing(tp, f.spatial[-1].extent)
    else:
        out_st = s[f.op]
        in_st = s[s.cache_write(f.op.output(), "local")]
    *outer, row, col = out_st.op.axis
    jo, ji = out_st.split(col, factor=tp.lanes * tp.tiles)
    io, ii = out_st.split(row, factor=max(1, min(tp.rows, row.extent)))
    tile = _tile_loops(out_st, jo, io, tp, dividing=True)
    out_st.reorder(*outer, *tile, ii, ji)
    if ji.extent > 1:
        out_st.vectorize(ji)
    loops = parallel_outer(out_st, [*outer, *tile], cores, (in_st,),
                           an.machine.min_parallel_points)
    p.tensor_skipped = _tensorize_tile(in_st, tp)
    return loops[:1], [(in_st, out_st, loops[-1])]


def _tile_loops(st, jo, io, tp, dividing=False):
    """The loops over register tiles, outermost first: column tiles *jo* and row tiles *io*
    in *tp*'s order, *jo* split into panels of ``tp.panel`` tiles (its inner part innermost)
    where it has more.  *dividing* (an accumulator stage computed in these loops): panels of
    as many tiles, up to that, as divide *jo*, since a partial last panel would clamp the
    accumulator's columns to the tensor's, where the index of the packed weight's panel
    (``column // lanes``) is no longer affine in the tile's loops."""
    panel = tp.panel if not dividing else next(
        n for n in range(min(tp.panel, jo.extent), 0, -1) if jo.extent % n == 0)
    if panel > 1 and jo.extent > panel:
        jb, jp = st.split(jo, factor=panel)
        return [jb, io, jp] if tp.order is TileOrder.COLS else [io, jb, jp]
    return [jo, io] if tp.order is TileOrder.COLS else [io, jo]


def _dividing(tp, columns):
    """*tp* with the most intrinsic tiles, up to its own, whose columns divide *columns* (a
    fused consumer's accumulator must not be clamped; with none, one tile, which the rule's
    probe then finds does not fit)."""
    tiles = next((t for t in range(tp.tiles, 0, -1) if columns % (tp.lanes * t) == 0), 1)
    return TensorPlan(tp.intrin, tp.rows, tiles, tp.order, tp.panel)


def _tile_in_place(st, an, p):
    """The sketch without an accumulator stage: the stage's own loops tiled (outer tiles, the
    other reductions, ``k`` by groups, then the register tile's rows and tiles unrolled, the
    ``lanes x group`` tile innermost and tensorized); the last column tile's partial
    intrinsic tiles run as ordinary loops.  Returns the loops that may host other stages."""
    tp = p.tensor
    *outer, row, col = st.op.axis
    *red_others, k = st.op.reduce_axis
    jo, jr = st.split(col, factor=tp.lanes * tp.tiles)
    jt, jl = st.split(jr, factor=tp.lanes)
    io, ii = st.split(row, factor=max(1, min(tp.rows, row.extent)))
    ko, ki = st.split(k, factor=tp.group)
    tile = _tile_loops(st, jo, io, tp)
    st.reorder(*outer, *tile, *red_others, ko, ii, jt, jl, ki)
    loops = parallel_outer(st, [*outer, *tile], an.machine.cores,
                           min_points=an.machine.min_parallel_points)
    for iv in (ii, jt):
        if iv.extent > 1:
            st.unroll(iv)
    p.tensor_skipped = mismatch(st, jl, tp.intrin)
    if p.tensor_skipped is None:
        st.tensorize(jl, tp.intrin)
    return loops[:1]


def _tensorize_tile(st, tp):
    """The accumulator *st*'s loops: the other reductions, then ``k`` by groups outside the
    register tile (rows, tiles unrolled), the ``lanes x group`` tile innermost, tensorized if
    :func:`mismatch` finds nothing.  Returns the mismatch's reason, or None."""
    *others, row, col = st.op.axis
    *red_others, k = st.op.reduce_axis
    nco, nci = st.split(col, factor=tp.lanes)
    ko, ki = st.split(k, factor=tp.group)
    st.reorder(*others, *red_others, ko, row, nco, nci, ki)
    for iv in (row, nco):
        if iv.extent > 1:
            st.unroll(iv)
    why = mismatch(st, nci, tp.intrin)
    if why is None:
        st.tensorize(nci, tp.intrin)
    return why


def tensor_axes_ok(f) -> bool:
    """Whether stage facts *f* have the loop shape the sketch tiles: at least two data axes
    (rows and lanes) and a reduction, all of constant extent."""
    extents = [iv.extent for iv in f.spatial + f.reduce]
    return len(f.spatial) >= 2 and bool(f.reduce) and all(isinstance(e, int) for e in extents)
