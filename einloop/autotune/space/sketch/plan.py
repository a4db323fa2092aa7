"""A config of a sketch space read as one :class:`StagePlan` per compute stage.

Each rule reads its own knobs into the plans (``decide`` in :data:`~.rules.RULES`, next to the
knobs it defines); a knob the space lacks (an axis of extent 1, a rule that did not fire on
the stage) reads as the rule not firing there.  :mod:`.apply` then schedules from the plans
alone, and records on them what it made (an rfactor stage, the loops that may host others).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .analysis import StageFacts
from .rules import RULES, UNROLL_DEFAULT


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
    #: the rfactor's partial sums in SIMD vectors (:data:`~.rules.RFACTOR_ACCUMULATORS`)
    accumulators: int = 1
    #: rows of the rows sketch reduced side by side (:data:`~.rules.ROWS_INTERLEAVED`)
    interleave: int = 1
    #: a tiled stage with few rows split-k instead: its reduction's parts (0: not split), and
    #: the weight rows each part adds into a strip of partial sums at a time
    split_parts: int = 0
    split_k_unroll: int = 1
    #: a tiled stage computed as dot products instead (the "dot" sketch): its register tile
    #: (rows, columns), or None
    dot_tile: tuple | None = None
    #: a multi-level tiled stage's accumulator level (:data:`~.rules.CACHE_LEVELS`); None for
    #: a stage that is not tiled
    cache_level: int | None = None
    #: a tiled stage's loop extents per data axis (4 levels) and per reduce axis (2), outermost
    #: first and derived from the extent
    spatial_tiles: tuple = ()
    reduce_tiles: tuple = ()
    #: a tiled stage's max-unroll step
    unroll: int = UNROLL_DEFAULT
    #: the data axis (position) a tiled stage's tile vectorizes when not its last
    #: (:data:`~.rules.VECTOR_AXES`); its accumulator is stored with that axis innermost
    vector_pos: int | None = None
    #: a tiled stage's pack mode (PACK_*) per packable operand, in ``facts.packable`` order
    packs: tuple = ()
    #: SIMD vectors per iteration of a plain stage's vector loop
    vec_mult: int = 1
    #: a scan's parallel blocks per core (:data:`~.scan_loops.SCAN_BLOCKS`)
    scan_blocks: int = 1
    #: a root stage's prefetch distance in iterations of its parallel loop; 0: none
    #: (:data:`~.rules.PREFETCH_DISTANCES`)
    prefetch: int = 0
    #: a root stage's stores stream around the caches (:data:`~.rules.NONTEMPORAL_CHOICES`)
    nontemporal: bool = False
    #: a scatter's private copies of its output (0: its domain runs serially)
    private_copies: int = 0
    #: a member of a compute-location group (scheduled with its group, at its anchor's loops
    #: or at the root)
    located: bool = False
    #: an anchor of a group: where its members go ("root" or the n-th loop that may host them)
    at: object = "root"
    #: a tiled stage's tensorized sketch (:class:`~.tensor_apply.TensorPlan`), or None
    tensor: object = None
    # made while applying -------------------------------------------------------------------
    #: the stage that rfactor made for it (its lanes, or its chunks and lanes)
    rf_stage: object = None
    #: its loops that may host other stages, outermost first; None until it is scheduled at
    #: the root (a FUSED stage gets those of the tiled stage computed inside it)
    hosts: list | None = None
    #: why its tensorized sketch's tile was not tensorized (it runs as ordinary loops), or None
    tensor_skipped: str | None = None
    #: the operands its sketch reads through copies of its own, made at the root (AMX's packs):
    #: a stage computing one is inlined into the copy or computed at the root, never at a loop
    #: of another stage
    packed: tuple = ()

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
    generated with or without the rfactor rule (*rfactor_ok*): each rule reads its own knobs
    (:attr:`~.rules.Rule.decide`), in :data:`~.rules.RULES` order."""
    plan = Plan([StagePlan(f) for f in an.stages()])
    for rule in RULES:
        if rule.decide is not None:
            rule.decide(plan, an, values, rfactor_ok)
    return plan
