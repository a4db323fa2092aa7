"""The names of the auto-scheduler's knobs: :class:`KnobKind` and :func:`knob_name`, the one
spelling the rules, apply, seeds and the space share (a module of its own so that rules in
modules of their own, such as :mod:`.tensor_rules`, name knobs without importing
:mod:`.rules`), and :func:`stage_names`, the name of each stage its knobs start with.

A stage's knobs start with a name no other stage of the task has: a DAG lowered from PyTorch
holds many operations of one name (an attention kernel's ten ``reshape`` views, its two
``matmul`` products), and knobs named after the operation would make them all share one choice
(inline every view or none, one tile size for both products)."""
from __future__ import annotations

import enum

from ....errors import InternalError
from ....te.tensor import Operation


class KnobKind(enum.Enum):
    """A kind of knob the rules define; :func:`knob_name` spells the knob of a stage."""
    TILE = "tile"                # rules 2-3: one split per axis of extent > 1 (``C.tile.i``)
    CACHE = "cache"              # rules 2-3: the accumulator's level (:data:`CACHE_LEVELS`)
    UNROLL = "unroll"            # rule 6 on a tiled stage: the max-unroll step
    PACK = "pack"                # rule 4: one per packable operand (``C.pack.B``)
    RFACTOR = "rfactor"          # rule 5: the rfactor mode of a row stage
    SKETCH = "sketch"            # rule 5: a tiled stage tiled or taken as a row reduction
    AT = "at"                    # rule 5/1: where the stages anchored at a root stage go,
                                 # named after that anchor (``O.at``)
    INLINE = "inline"            # rule 5/1: a dear injective stage inlined after all
    VEC = "vec"                  # rule 6 on a plain stage: the vector loop in SIMD vectors
    ACCUMULATORS = "acc"         # rule 5: an rfactor's partial sums in SIMD vectors
    INTERLEAVE = "interleave"    # rule 5: rows of the rows sketch reduced side by side
    PREFETCH = "prefetch"        # rule 6 on a root stage: its next iteration's inputs
    NONTEMPORAL = "nontemporal"  # rule 6 on a root stage writing a tensor beyond the cache
    VECTOR_AXIS = "vaxis"        # rules 2-3: the tile's vector loop (:data:`VECTOR_AXES`)
    PARTS = "parts"              # rule 5: split-k parts per core (:data:`SPLIT_PARTS_PER_CORE`)
    K_UNROLL = "kunroll"         # rule 5: split-k weight rows per strip (:data:`SPLIT_K_UNROLLS`)
    DOT_TILE = "dot"             # rule 5: the dot sketch's register tile (:data:`DOT_TILES`)
    BLOCKS = "blocks"            # scan rule: parallel blocks per core (:data:`SCAN_BLOCKS`)
    PRIVATE = "private"          # scatter: private copies per core (:data:`PRIVATE_COPIES_PER_CORE`)
    TENSORIZE = "tensorize"      # tensorize rule: "none" or the tensor intrinsic's name
    TENSOR_ROWS = "trows"        # tensorize rule: register tile rows
    TENSOR_TILES = "ttiles"      # tensorize rule: intrinsic tiles per register tile row
    TILE_ORDER = "torder"        # tensorize rule: column panels or row tiles outside
    TENSOR_PANEL = "tpanel"      # tensorize rule: register tiles of columns per panel


#: the kinds with one knob per part of a stage (an axis, an operand), named after the part
PER_PART = frozenset({KnobKind.TILE, KnobKind.PACK})


def stage_names(ops) -> dict:
    """``id(op) -> name`` of compute operations *ops* (in DAG order, producers first): each
    op's own name, but for the second and later ops of a name, which get ``name_1``,
    ``name_2``, ... (the first suffix no op of *ops* is named, so a name that was unique never
    changes).  Deterministic for a DAG, and the space's knob names depend on nothing else, so
    a tuning log written before stages were told apart still names the knobs of every task
    whose operations had unique names.  In the usual case (no op already named like a
    suffixed one) these are the stage names ``create_schedule`` gives."""
    taken = {op.name for op in ops}
    seen, out = set(), {}
    for op in ops:
        name = op.name
        if name in seen:
            n = 1
            while f"{op.name}_{n}" in taken:
                n += 1
            name = f"{op.name}_{n}"
            taken.add(name)
        seen.add(name)
        out[id(op)] = name
    return out


def knob_name(kind, stage, part=None) -> str:
    """The name of the *kind* knob of *stage* (its facts, whose ``name`` is unique in its task
    (:func:`stage_names`), or that name): the stage's name, the kind, and for
    :data:`PER_PART` kinds the name of *part* (the tiled IterVar, the packed operand's op),
    dot-separated; the one spelling the rules, apply, seeds and the space share.  Not an
    operation: its own name may be another stage's too."""
    if (part is None) == (kind in PER_PART):
        raise InternalError(f"a {kind.name} knob is named "
                            f"{'for a part of a stage' if kind in PER_PART else 'per stage'}")
    if isinstance(stage, Operation):
        raise InternalError(f"the {kind.name} knob of operation {stage.name!r} is named after "
                            "its stage facts (DagAnalysis[op]), whose name is unique in the "
                            "task; the operation's own may not be")
    stage = stage if isinstance(stage, str) else stage.name
    return f"{stage}.{kind.value}" if part is None else f"{stage}.{kind.value}.{part.name}"
