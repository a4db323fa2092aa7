"""A config of a sketch space read as one :class:`StagePlan` per compute stage.

The knobs (named by :func:`~.rules.knob_name`) are read here and nowhere else: a knob the
space lacks (an axis of extent 1, a rule that did not fire on the stage) reads as the value
that leaves the stage as the rule's absence would.  :mod:`.apply` then schedules from the plans
alone, and records on them what it made (an rfactor stage, the loops that may host others).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .analysis import Role, StageFacts
from .rules import (CACHE_DEFAULT, PACK_NONE, UNROLL_DEFAULT, KnobKind, fires_rfactor,
                    fires_row_sketch, knob_name, location_groups)


@dataclass
class StagePlan:
    """What a config decided for one compute stage, and what applying it made."""
    facts: StageFacts
    #: computed inline into its consumers (an INLINE stage, or a FLEXIBLE one whose knob says so)
    inline: bool = False
    #: a row stage's rfactor mode (:data:`~.rules.RFACTOR_MODES`)
    rfactor: str = "none"
    #: a tiled stage taken as a row reduction instead (the "rows" sketch): rfactored by lanes
    as_rows: bool = False
    #: a multi-level tiled stage's accumulator level (:data:`~.rules.CACHE_LEVELS`); None for
    #: a stage that is not tiled
    cache_level: int | None = None
    #: a tiled stage's loop extents per data axis (4 levels) and per reduce axis (2), outermost
    #: first and derived from the extent
    spatial_tiles: tuple = ()
    reduce_tiles: tuple = ()
    #: a tiled stage's max-unroll step
    unroll: int = UNROLL_DEFAULT
    #: a tiled stage's pack mode (PACK_*) per packable operand, in ``facts.packable`` order
    packs: tuple = ()
    #: SIMD vectors per iteration of a plain stage's vector loop
    vec_mult: int = 1
    #: a member of a compute-location group (scheduled with its group, at its anchor's loops
    #: or at the root)
    located: bool = False
    #: an anchor of a group: where its members go ("root" or the n-th loop that may host them)
    at: object = "root"
    # made while applying -------------------------------------------------------------------
    #: the stage that rfactor made for it (its lanes, or its chunks and lanes)
    rf_stage: object = None
    #: its loops that may host other stages, outermost first; None until it is scheduled at
    #: the root (a FUSED stage gets those of the tiled stage computed inside it)
    hosts: list | None = None

    @property
    def op(self):
        return self.facts.op

    @property
    def tiled(self) -> bool:
        """Whether the multi-level tiling rule schedules it (a TILED stage, not as rows)."""
        return self.cache_level is not None


@dataclass
class Plan:
    """The plans of every compute stage of a DAG, producers first; ``plan[op]`` looks one up."""
    stages: list
    _by_op: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._by_op = {id(p.op): p for p in self.stages}

    def __iter__(self):
        return iter(self.stages)

    def __getitem__(self, op) -> StagePlan:
        return self._by_op[id(op)]


def knob_values(config) -> dict:
    """Knob name -> the value *config* (a ConfigEntity) gives it: split sizes as a tuple."""
    return {name: tuple(e.size) if hasattr(e, "size") else e.val
            for name, e in config.entities.items()}


def plan_of(an, values, rfactor_ok=True) -> Plan:
    """The plan of every stage of *an* under the knob *values* (:func:`knob_values`) of a space
    generated with or without the rfactor rule (*rfactor_ok*)."""
    plan = Plan([StagePlan(f) for f in an.stages()])
    for p in plan:
        f = p.facts
        p.inline = f.role is Role.INLINE or (
            f.role is Role.FLEXIBLE and values.get(knob_name(KnobKind.INLINE, f), 0) == 1)
        p.vec_mult = values.get(knob_name(KnobKind.VEC, f), 1)
    for f in fires_rfactor(an, rfactor_ok):
        plan[f.op].rfactor = values.get(knob_name(KnobKind.RFACTOR, f), "none")
    for f in fires_row_sketch(an, rfactor_ok):
        plan[f.op].as_rows = values.get(knob_name(KnobKind.SKETCH, f), "tile") == "rows"
    for p in plan:
        if p.facts.role is Role.TILED and not p.as_rows:
            _plan_tiling(p, values)
    for anchor, members in location_groups(an):
        plan[anchor].at = values.get(knob_name(KnobKind.AT, anchor), "root")
        for m in members:
            plan[m.op].located = True
    return plan


def _plan_tiling(p, values):
    f = p.facts
    p.cache_level = values.get(knob_name(KnobKind.CACHE, f), CACHE_DEFAULT)
    p.spatial_tiles = tuple(_sizes(f, iv, values, 4) for iv in f.spatial)
    p.reduce_tiles = tuple(_sizes(f, iv, values, 2) for iv in f.reduce)
    p.unroll = values.get(knob_name(KnobKind.UNROLL, f), UNROLL_DEFAULT)
    p.packs = tuple(values.get(knob_name(KnobKind.PACK, f, src), PACK_NONE)
                    for src, _, _ in f.packable)


def _sizes(f, iv, values, parts):
    """Extents of *iv*'s split into *parts* levels (outermost derived), all 1 inside for an
    axis without a knob (extent 1)."""
    got = values.get(knob_name(KnobKind.TILE, f, iv))
    if got is None or iv.extent == 1:
        inner = (1,) * (parts - 1)
    else:
        inner = tuple(got[1:])
    return (-(-iv.extent // math.prod(inner)),) + inner
