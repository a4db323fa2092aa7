"""The tensorize rule: tensorized sketches of int8 and bf16 reductions, next to the tiled ones.

Where the target has tensor intrinsics (:attr:`~.analysis.MachineModel.intrinsics`: einloop's
u8 x s8 -> s32 dot products, AVX2 ``vpmaddwd`` or VNNI ``vpdpbusd``, and bf16 x bf16 -> f32
ones, AVX512-BF16 ``vdpbf16ps``), every tiled stage whose
weight can be packed into an intrinsic's tiles (:func:`~.tensor_apply.weight_read`) is tried
with each intrinsic by the space generator's probe (:mod:`.tensor_probe`): the sketch applied to
a fresh schedule, :func:`~einloop.schedule.tensorize.mismatch` judging the tile (the casts, the
reducer, the dtypes, the layout once packed).  An intrinsic that matches is a value of the
stage's ``tensorize`` knob, beside "none" (the multi-level tiled sketch, the default, so that a
space judged on its default config is the one it was before); one that does not is skipped,
its reason listed in ``SketchSpace.tensorize_skipped``, never raised.  The register tile's
rows and intrinsic tiles, the order of the tile loops and the column panel (an outer tile) are
searched around the intrinsic's shape (MetaSchedule's multi-level tiling with an intrinsic);
the seeds (:func:`tensor_wishes`) try the tensorized sketch first.  On a target without any
intrinsic the rule adds nothing.
"""
from __future__ import annotations

import math

from ....te.tensor_intrin import lookup
from .analysis import Role
from .knob_names import KnobKind, knob_name
from .tensor_amx import seed_intrinsic
from .tensor_apply import TensorPlan, TileOrder

#: the tensorize knob's value for the stage's other sketches (tiled, rows, split-k)
NO_TENSORIZE = "none"
#: register tile rows searched: each row is one broadcast of A per group and *tiles*
#: accumulators; 6 x 2 is the AVX2 micro-kernel of gemm_int8.py (12 of 16 registers)
TENSOR_ROWS = (1, 2, 4, 6, 8)
#: intrinsic tiles (of its lanes) per register tile row
TENSOR_TILES = (1, 2, 3, 4)
#: register tiles of columns per panel searched (an outer tile; 1: none)
TENSOR_PANELS = (1, 4, 16)
#: the seeds' (rows, tiles, order, panel), most promising first: the register tiles that keep 8 to
#: 12 accumulators in flight (the chains a core needs, within 16 registers), both loop orders
TENSOR_SEEDS = ((6, 2, TileOrder.COLS, 1), (4, 2, TileOrder.COLS, 1), (6, 2, TileOrder.COLS, 4),
                (4, 3, TileOrder.COLS, 1), (6, 2, TileOrder.ROWS, 1), (8, 1, TileOrder.COLS, 1),
                (2, 4, TileOrder.COLS, 1))


def offered(an) -> dict:
    """Stage name -> the intrinsics offered on it, best first (what the space generator's probe
    found: :func:`~.tensor_probe.tensor_candidates`; none on an analysis it did not probe)."""
    got = getattr(an, "tensor_candidates", None)
    return {} if got is None else got.offered


def _tiled(an):
    return [f for f in an.stages() if f.role is Role.TILED]


def fires_tensorize(an):
    """The tiled stages with at least one intrinsic offered."""
    names = offered(an)
    return [f for f in _tiled(an) if f.name in names]


def define_tensorize(space, an, rfactor_ok):
    """The stage's intrinsic ("none" first: the default), register tile, tile order and
    column panel."""
    offers = offered(an)
    for f in fires_tensorize(an):
        names = offers[f.name]
        space.define_knob(knob_name(KnobKind.TENSORIZE, f), [NO_TENSORIZE, *names],
                          default=NO_TENSORIZE)
        row, col = f.spatial[-2], f.spatial[-1]
        rows = [r for r in TENSOR_ROWS if r <= row.extent] or [1]
        lanes = min(lookup(n).shape[0] for n in names)
        tiles = [t for t in TENSOR_TILES if t == 1 or t * lanes <= col.extent]
        for kind, values in ((KnobKind.TENSOR_ROWS, rows), (KnobKind.TENSOR_TILES, tiles)):
            if len(values) > 1:
                space.define_knob(knob_name(kind, f), values, default=values[0])
        space.define_knob(knob_name(KnobKind.TILE_ORDER, f), [o.value for o in TileOrder],
                          default=TileOrder.COLS.value)
        panels = [n for n in TENSOR_PANELS if n == 1 or n * lanes < col.extent]
        if len(panels) > 1:
            space.define_knob(knob_name(KnobKind.TENSOR_PANEL, f), panels, default=1)


def decide_tensorize(plan, an, values, rfactor_ok):
    """A tiled stage whose tensorize knob names an intrinsic is tensorized (not tiled, not
    taken as rows or split-k)."""
    for f in _tiled(an):
        name = values.get(knob_name(KnobKind.TENSORIZE, f), NO_TENSORIZE)
        if name == NO_TENSORIZE:
            continue
        p = plan[f.op]
        p.cache_level, p.packs, p.vector_pos = None, (), None
        p.as_rows, p.split_parts = False, 0
        p.tensor = TensorPlan(lookup(name), values.get(knob_name(KnobKind.TENSOR_ROWS, f), 1),
                              values.get(knob_name(KnobKind.TENSOR_TILES, f), 1),
                              TileOrder(values.get(knob_name(KnobKind.TILE_ORDER, f),
                                                   TileOrder.COLS.value)),
                              values.get(knob_name(KnobKind.TENSOR_PANEL, f), 1))


def tensor_wishes(an, extra) -> list:
    """Seed wishes (knob -> value): every stage the rule fires on tensorized with its best
    intrinsic, one wish per :data:`TENSOR_SEEDS` entry that fits its extents, *extra* (the
    other stages' wishes) added."""
    stages = fires_tensorize(an)
    out = []
    for rows, tiles, order, panel in TENSOR_SEEDS if stages else ():
        w = dict(extra)
        for f in stages:
            name = seed_intrinsic(offered(an)[f.name])
            lanes = lookup(name).shape[0]
            w[knob_name(KnobKind.TENSORIZE, f)] = name
            w[knob_name(KnobKind.TENSOR_ROWS, f)] = min(rows, _largest(TENSOR_ROWS,
                                                                       f.spatial[-2].extent))
            w[knob_name(KnobKind.TENSOR_TILES, f)] = max(1, min(
                tiles, _largest(TENSOR_TILES, math.ceil(f.spatial[-1].extent / lanes))))
            w[knob_name(KnobKind.TILE_ORDER, f)] = order.value
            w[knob_name(KnobKind.TENSOR_PANEL, f)] = panel
        out.append(w)
    return out


def _largest(choices, most):
    return max([c for c in choices if c <= most] or [1])
