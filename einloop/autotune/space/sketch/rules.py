"""The auto-scheduler's rules: which fire on which stage, and the knobs each one searches.

Each rule is a small function of the :class:`~.analysis.DagAnalysis` (``fires_*``: the stages it
applies to) plus, where it has choices, the knobs it adds to the space (``knobs_*``, named by
:func:`knob_name` from a :class:`KnobKind`) and how it reads a config's values of them into the
stages' plans (``_decide_*``, :mod:`.plan`); :data:`RULES` lists them in order.  How the plans
become schedule steps lives in :mod:`.apply`.  Order and meaning follow Ansor's CPU sketch rules
and MetaSchedule's DefaultLLVM rules (``reference/autoschedule.md`` sections 1, 6):

0. RESIDUE_CLASSES      before the others: a reduction whose indices divide a data axis by a
                        constant (a transposed convolution's ``(y + 1) // 2``) is computed per
                        residue class (``split_residues``), where they are affine again, and an
                        input read with a stride along the last data axis (a strided conv's
                        ``2 * x + s``) is read through a copy split into its residue classes
                        (``deinterleave``) (:mod:`einloop.te.residues`); the rules below plan
                        the rewritten DAG;
1. INLINE               cheap injective stages are inlined into their consumers;
2. MULTI_LEVEL_TILING   reductions with data reuse: spatial loops in 4 levels, reductions in 2
                        (S0 S1 R0 S2 R1 S3), a cache_write accumulator at level 1 or 2; the
                        vector loop on the last data axis or, where that axis is no multiple
                        of the lanes, on another that is (a convolution's channels), the
                        accumulator stored with it innermost;
3. FUSE_CONSUMER        an elementwise consumer is tiled with the outer levels instead;
4. PACK                 a reused input read with a strided inner tile gets a blocked copy,
                        made once at the root or per block of the parallel outer loop;
5. RFACTOR              long reductions without reuse are factored by the vector width (and
                        into parallel chunks when too few rows feed the cores); a tiled stage
                        that cannot vectorize its reuse (y = A @ x) may be such a row reduction,
                        and one with few rows (x @ W at batch 1) may split its reduction into
                        per-core parts, each streaming its own block of the weight (split-k);
                        and one with a few rows whose operands are both read along the
                        reduction (x @ W.T, W as PyTorch stores it) may be dot products, W read
                        in place instead of copied transposed on every call (dot);
   TENSORIZE            an int8 x int8 -> int32 reduction on a target with a tensor intrinsic
                        (AVX2 vpmaddwd, VNNI vpdpbusd) may instead be tensorized: its weight
                        packed into the intrinsic's tiles, the register tile searched around
                        the intrinsic's shape, the tile loops one call each; only intrinsics
                        that ``tensorize.mismatch`` accepts on the sketch are offered
                        (:mod:`.tensor_rules`);
   COMPUTE_LOCATION     dear injective stages and row reductions are computed at a loop of the
                        root stage they feed (one pass over memory), at the root, or inlined;
   SCAN                 a scan's stage: its spatial axes in a few wide parallel blocks, the
                        scan loop serial inside a block, the contiguous axis vectorized (the
                        blocks per core and the vector length searched; :mod:`.scan_loops`);
   SCATTER              a scatter (te.scatter_reduce) is computed at the root: its free axes
                        parallel (outer) and vectorized (the output's last dimension), its
                        domain serial, or split into private copies of the output, one block
                        of the domain per copy in parallel, then the copies added up (the only
                        parallel schedule of a histogram's domain; see schedule/scatter.py).
6. PARALLEL_VECTORIZE_UNROLL  every stage: outer loops parallel, innermost contiguous loop
                        vectorized, MetaSchedule's max-unroll steps on tiled stages; a root
                        stage that is not tiled may prefetch the next parallel iteration's
                        inputs, and one that writes a tensor beyond the last-level cache may
                        stream its stores;
7. FALLBACK             what no rule above matched still gets rule 6.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from ....ir import dtypes
from .analysis import Role, var_ids
from .knob_names import PER_PART, KnobKind, knob_name  # noqa: F401 -- re-exported
from .scan_loops import SCAN_BLOCKS
from .scatter_rules import PRIVATE_COPIES_PER_CORE, fires_scatter, privatizable, scatter_vector_ok
from .tensor_rules import decide_tensorize, define_tensorize, fires_tensorize
from .tiles import split_sizes

#: MetaSchedule's ``unroll_max_steps`` for CPUs: innermost loops are unrolled while the product
#: of their extents stays within the step
UNROLL_STEPS = (0, 16, 64, 512)
#: the unroll step of a tiled stage's default config
UNROLL_DEFAULT = 64
#: rfactor variants: none; the reduction split by the vector width, the lanes made a data axis;
#: or (a reduction with too few rows to feed the cores, as a sum over all axes) also split into
#: parallel chunks, each reduced to a vector by one core, then the chunks and lanes combined
RFACTOR_MODES = ("none", "vec", "par")
#: chunks per core of a "par" rfactor
RFACTOR_CHUNKS_PER_CORE = 4
#: cache_write / consumer-fusion levels: the accumulator is computed at the end of spatial level 2
#: or 1 of the outer stage; 0: no accumulator, the stage itself is tiled
CACHE_LEVELS = (2, 1, 0)
#: the accumulator level of a tiled stage's default config
CACHE_DEFAULT = 2
#: attach choices of a compute-location group: the root, or the n-th eligible loop of the anchor
AT_CHOICES = ("root", 0, 1, 2)
#: a tiled stage's vector loop: its last data axis, or the other axis the analysis found
#: (``vector_alt``: a convolution's output channels where its rows are no multiple of the
#: lanes), with the accumulator stored that axis innermost
VECTOR_AXES = ("last", "alt")
#: vector loop of a plain stage: this many SIMD vectors per iteration
VECTOR_MULTIPLES = (1, 2, 4)
#: reductions at least this many vectors long are worth an rfactor
RFACTOR_MIN_VECTORS = 2
#: an rfactor's partial sums, in SIMD vectors: each vector is its own chain of dependent adds,
#: so a reduction streaming from cache runs at one vector per add latency (3-4 cycles on every
#: x86 core) with one, and is limited by the loads with several; searched
RFACTOR_ACCUMULATORS = (1, 2, 4)
#: rows of a tiled stage taken as rows (y = A @ x) reduced side by side in one pass over the
#: reduction: each load of x serves them all, each row is its own chain of adds and its own
#: stream for the prefetchers; searched
ROWS_INTERLEAVED = (1, 2, 4, 8)
#: the split-k sketch: a tiled stage with at most this many rows outside its vector axis (a
#: dense layer x @ W at a small batch) does a few multiply-adds per weight element, so it is bound
#: by streaming the weight; its reduction may be split into parts, one core streaming each part's
#: rows of the weight as one contiguous block into partial sums of its own, which a short stage
#: adds up.  Why it holds on other machines: the partial sums of a part are rows x columns
#: values updated once per weight row, which stay in the L1/L2 caches of any core only for a few
#: rows; with more rows each weight vector feeds enough multiply-adds that the tiled sketch's
#: register tile wins (the tuner chooses between the two where the rule fires)
SPLIT_MAX_ROWS = 4
#: parts of a split-k reduction per core: one contiguous block per core, or several smaller
#: blocks claimed one after another (a core slowed by other work claims fewer); searched
SPLIT_PARTS_PER_CORE = (1, 2, 4)
#: the split-k sketch fires only if every part streams at least this many weight rows (its
#: reduction unroll, below, times 2): shorter parts are all combine and no stream
SPLIT_MIN_PART_ROWS = 32
#: weight rows a split-k part adds into one strip of partial sums at a time (unrolled): each
#: strip's partial sums are loaded and stored once per that many rows; searched
SPLIT_K_UNROLLS = (8, 4, 16)
#: the dot sketch: a tiled stage with at most this many rows whose operands are all read
#: along the reduction (x @ W.T with W as PyTorch stores a linear layer's weight, [out, in]) may
#: reduce each output as a dot product, the reduction vectorized and both operands read in
#: place, instead of tiling the columns, which needs W copied transposed (packed) on every
#: call.  A register tile of rows x columns partial-sum vectors shares each loaded vector of x
#: between the tile's columns and each of W between its rows; the lanes are summed once per
#: output.  Why the bound holds on other machines: the copy is a pass over W (read, written,
#: read again) per call, repaid only when many rows reuse W, the ratio PACK_MIN_ROWS of the
#: seeds states; at twice that many rows the copy adds at most 1/32 to W's traffic, while the
#: dot sketch still sums every output's lanes, so the tiled sketch is left alone past it (the
#: tuner chooses between the two where the rule fires)
DOT_MAX_ROWS = 64
#: the dot sketch's register tiles, (rows, columns) of partial-sum vectors: those whose
#: accumulators, a loaded vector per row and one of W fit the machine's vector registers
#: (:func:`dot_tiles`) are searched
DOT_TILES = ((4, 6), (4, 4), (2, 8), (4, 3), (2, 4), (3, 4), (8, 2), (1, 8), (2, 2), (1, 4))
#: a root stage's software prefetch (``s[T].prefetch``): none, or at the top of each iteration
#: of its parallel loop what the next iteration reads of each input (a softmax's next row).
#: Overlaps memory latency with the iteration's work where the hardware prefetchers stop (at a
#: page boundary); a region too large to keep in cache is not prefetched (see
#: :mod:`einloop.schedule.passes.prefetch`).  On by default because a tuner that times calls
#: back to back sees the data in cache, where the prefetch costs little, while the same call
#: after other work (a matmul, any model's previous layer) meets it in memory; searched
PREFETCH_DISTANCES = (1, 0)
#: a stage has a prefetch knob only if it reads a tensor of at least this many bytes.  Why it
#: holds on other machines: 256 KiB is the smallest private L2 of x86-64 and AArch64 cores of
#: the last decade; a smaller input most likely is still in cache from whoever wrote it
PREFETCH_MIN_BYTES = 256 * 1024
#: a stage computed at the root that writes a tensor at least as large as the last-level cache
#: (``MachineModel.cache_bytes``) may write it with streaming stores (``s[T].nontemporal()``):
#: such a tensor cannot stay in cache for its reader anyway, and a streaming store skips the
#: read for ownership of every line (two passes of memory traffic become one) and leaves the
#: caches to the inputs.  Below the cache's size a plain store keeps the result cached for
#: whoever reads it next, which the tuner, timing one kernel, would not see; searched, on by
#: default
NONTEMPORAL_CHOICES = (1, 0)


class RuleKind(enum.Enum):
    """A rule of the auto-scheduler; ``SketchSpace.fired`` lists them per stage."""
    RESIDUE_CLASSES = "residue classes"
    INLINE = "inline"
    MULTI_LEVEL_TILING = "multi-level tiling"
    FUSE_CONSUMER = "fuse consumer"
    PACK = "pack"
    RFACTOR = "rfactor"
    TENSORIZE = "tensorize"
    COMPUTE_LOCATION = "compute location"
    SCAN = "scan"
    SCATTER = "scatter"
    PARALLEL_VECTORIZE_UNROLL = "parallel/vectorize/unroll"
    FALLBACK = "fallback"


#: rules that rewrite the DAG before the others plan it (``generate.residue_prelude``); they
#: add steps, not knobs, so :data:`RULES` does not list them
PRELUDE_RULES = (RuleKind.RESIDUE_CLASSES,)


# which stages each rule fires on ---------------------------------------------------------------

def fires_inline(an):
    """Rule 1: the strictly inlinable stages (elementwise, broadcast, no dear call, no branch)."""
    return [f for f in an.stages() if f.role is Role.INLINE]


def fires_tiling(an):
    """Rule 2: reductions with data reuse."""
    return [f for f in an.stages() if f.role is Role.TILED]


def fires_fusion(an):
    """Rule 3: tiled stages with an elementwise consumer, as (tiled facts, consumer facts)."""
    return [(f, an[f.fused_into]) for f in fires_tiling(an) if f.fused_into is not None]


def fires_pack(an):
    """Rule 4: (tiled facts, input op, dimension) for every packable operand."""
    return [(f, src, dim) for f in fires_tiling(an) for src, dim, _ in f.packable]


def fires_rfactor(an, available=True):
    """Rule 5: reductions without reuse whose reduction is at least two vectors long and runs
    along the last dimension of a read (so the factored lanes load contiguously)."""
    if not available:
        return []
    out = []
    for f in an.stages():
        if f.role is Role.ROW and an.cum(f.reduce) >= RFACTOR_MIN_VECTORS * an.lanes(f.op) \
                and _reduces_along_rows(an, f):
            out.append(f)
    return out


def fires_row_sketch(an, rfactor_ok=True):
    """Rule 5 on a tiled stage: a reduction whose reuse cannot be vectorized (no contiguous data
    axis, as y = A @ x) but whose reduction runs along rows may instead be a row reduction
    (rfactor); a searched choice (Ansor keeps several sketches per stage the same way)."""
    if not rfactor_ok:
        return []
    return [f for f in fires_tiling(an) if not f.vector_ok and f.reduce
            and f.reduce[-1].extent >= RFACTOR_MIN_VECTORS * an.lanes(f.op)
            and _reduces_along_rows(an, f)]


def fires_split_sketch(an, rfactor_ok=True):
    """Rule 5 on a tiled stage with few rows (:data:`SPLIT_MAX_ROWS`, a dense layer at a small
    batch): its reduction may be split into per-core parts (split-k), a searched choice beside
    the tiled sketch.  It needs a vector axis (the weight's contiguous one), a first reduction
    axis long enough for every part (:data:`SPLIT_MIN_PART_ROWS`), static extents, and no row
    reductions computed at its loops."""
    if not rfactor_ok:
        return []
    hosts = {id(anchor) for anchor, members in location_groups(an)}
    out = []
    for f in fires_tiling(an):
        extents = [iv.extent for iv in f.spatial + f.reduce]
        if not f.vector_ok or not f.reduce or not all(isinstance(e, int) for e in extents):
            continue
        host = f.fused_into if f.fused_into is not None else f.op
        if id(host) in hosts or id(f.op) in hosts:
            continue
        rows = math.prod(iv.extent for iv in f.spatial[:-1])
        if rows <= SPLIT_MAX_ROWS and f.spatial[-1].extent >= an.lanes(f.op) \
                and f.reduce[0].extent >= SPLIT_MIN_PART_ROWS * an.machine.cores:
            out.append(f)
    return out


def fires_dot_sketch(an, rfactor_ok=True):
    """Rule 5 on a tiled stage ``C[i, j] = sum_k A[i, k] * B[j, k]`` (two data axes, one
    reduction, static extents) with at most :data:`DOT_MAX_ROWS` rows, whose every read of the
    reduction has it as its last index alone (both operands contiguous along it) and whose
    reduction is whole vectors, at least RFACTOR_MIN_VECTORS of them: it may be computed as dot
    products, a searched choice beside the tiled sketch.  Not a stage
    hosting row reductions, nor one whose tile a consumer is fused into at a loop."""
    if not rfactor_ok:
        return []
    hosts = {id(anchor) for anchor, members in location_groups(an)}
    out = []
    for f in fires_tiling(an):
        if len(f.spatial) != 2 or len(f.reduce) != 1:
            continue
        extents = [iv.extent for iv in f.spatial + f.reduce]
        if not all(isinstance(e, int) for e in extents):
            continue
        host = f.fused_into if f.fused_into is not None else f.op
        if id(host) in hosts or id(f.op) in hosts:
            continue
        lanes, k = an.lanes(f.op), f.reduce[0]
        if f.spatial[0].extent > DOT_MAX_ROWS or k.extent % lanes or \
                k.extent < RFACTOR_MIN_VECTORS * lanes:
            continue
        reads = [r for r in an.dag.reads(f.op) if id(k.var) in var_ids(r.indices)]
        if len(reads) >= 2 and all(r.indices[-1] is k.var and
                                   id(k.var) not in var_ids(r.indices[:-1]) for r in reads):
            out.append(f)
    return out


def dot_tiles(an, f) -> list:
    """The dot sketch's register tiles for stage *f*: :data:`DOT_TILES` whose rows and columns
    fit its extents and whose partial sums, one loaded vector per row and one of the other
    operand fit the machine's vector registers."""
    rows, cols = (iv.extent for iv in f.spatial)
    return [(r, c) for r, c in DOT_TILES
            if r <= rows and c <= cols and r * c + r + 1 <= an.machine.registers]


def _reduces_along_rows(an, f) -> bool:
    last = f.reduce[-1].var
    return any(r.indices and id(last) in var_ids([r.indices[-1]]) for r in an.dag.reads(f.op))


def location_groups(an):
    """Rule 5/1: anchor op -> the facts of the stages that may be computed at its loops
    (dear injective stages and reductions without reuse that all feed that one root stage)."""
    groups = {}
    for f in an.stages():
        if f.role in (Role.FLEXIBLE, Role.ROW) and f.anchor is not None \
                and not an.dag.is_output(f.op):
            groups.setdefault(id(f.anchor), (f.anchor, []))[1].append(f)
    return list(groups.values())


# knobs (named in :mod:`.knob_names`) -----------------------------------------------------------

def tile_axes(f):
    """(spatial axes split in 4, reduce axes split in 2): the axes of extent > 1."""
    return ([iv for iv in f.spatial if iv.extent > 1], [iv for iv in f.reduce if iv.extent > 1])


def knobs_tiling(space, an, f):
    """Rule 2 (+3): tile sizes per axis, the accumulator level, the unroll step, and where a
    data axis other than the last may be the vector loop (:attr:`~.analysis.StageFacts.
    vector_alt`), which one is."""
    spatial, reduce = tile_axes(f)
    last = f.spatial[-1] if f.spatial else None
    for iv in spatial:
        lanes = an.lanes(f.op) if iv is last and f.vector_ok else 0
        sizes = split_sizes(iv.extent, 4, lanes, register_rows=not lanes)
        if lanes and f.vector_alt is not None:
            # the last axis may be a register tile's other side instead (7 columns)
            sizes += [c for c in split_sizes(iv.extent, 4, register_rows=True)
                      if c not in sizes]
        space.define_split(knob_name(KnobKind.TILE, f, iv), iv.extent, num_outputs=4,
                           candidate=sizes)
    if f.vector_alt is not None:
        space.define_knob(knob_name(KnobKind.VECTOR_AXIS, f), list(VECTOR_AXES),
                          default=VECTOR_AXES[0])
    for iv in reduce:
        space.define_split(knob_name(KnobKind.TILE, f, iv), iv.extent, num_outputs=2,
                           candidate=split_sizes(iv.extent, 2))
    space.define_knob(knob_name(KnobKind.CACHE, f), list(CACHE_LEVELS), default=CACHE_DEFAULT)
    space.define_knob(knob_name(KnobKind.UNROLL, f), list(UNROLL_STEPS),
                      default=UNROLL_DEFAULT)


#: where a packable operand is packed: not at all; once per call at the root (a pass over the
#: whole operand, then every block reads it contiguously); or per block, inside the stage's
#: parallel outer loop, as BLAS packs a panel of B: only the block's part, copied into a buffer
#: that stays in cache while the block's rows use it (no extra pass over memory)
PACK_NONE, PACK_ROOT, PACK_BLOCK = 0, 1, 2


def knobs_pack(space, an, f):
    """Rule 4: pack each packable operand (at the root or per block), or not.  A constant
    operand (a weight) is packed at the root or not at all: its root pack is work on
    constants alone, done once ahead of the calls (Ansor's layout rewrite), so a copy per
    block could only cost more."""
    for src, _, _ in f.packable:
        modes = [PACK_NONE, PACK_ROOT] if src.constant else [PACK_NONE, PACK_ROOT, PACK_BLOCK]
        space.define_knob(knob_name(KnobKind.PACK, f, src), modes, default=PACK_NONE)


def rfactor_modes(an, f):
    """The rfactor modes of row stage *f*: "par" only where the rows cannot feed the cores and
    the stage is computed at the root (a parallel stage inside another's loop would not be)."""
    chunks = RFACTOR_CHUNKS_PER_CORE * an.machine.cores
    small = an.cum(f.spatial) < chunks and an.cum(f.reduce) >= chunks * 4 * an.lanes(f.op)
    grouped = any(m is f for _, ms in location_groups(an) for m in ms)
    return RFACTOR_MODES if small and not grouped else RFACTOR_MODES[:2]


#: sketches of a tiled stage that may also be a row reduction
SKETCHES = ("tile", "rows")
#: sketches of a tiled stage with few rows
SPLIT_SKETCHES = ("tile", "split")


def knobs_sketch(space, an, f, dot=False):
    """The rows sketch's choice (and the dot sketch's where that fires too), its partial sums
    and the rows it reduces side by side."""
    space.define_knob(knob_name(KnobKind.SKETCH, f),
                      list(SKETCHES) + (["dot"] if dot else []), default="tile")
    knobs_accumulators(space, an, f, f.reduce[-1].extent)
    rows = [m for m in ROWS_INTERLEAVED if f.spatial and m <= f.spatial[-1].extent]
    if len(rows) > 1:
        space.define_knob(knob_name(KnobKind.INTERLEAVE, f), rows, default=1)


def knobs_split(space, an, f, dot=False):
    """The split-k sketch's choice (and the dot sketch's where that fires too), its parts per
    core, weight rows per strip, and strip width in SIMD vectors (:data:`VECTOR_MULTIPLES`, no
    wider than the vector axis)."""
    space.define_knob(knob_name(KnobKind.SKETCH, f),
                      list(SPLIT_SKETCHES) + (["dot"] if dot else []), default="tile")
    part_rows = f.reduce[0].extent // an.machine.cores
    parts = [m for m in SPLIT_PARTS_PER_CORE if part_rows // m >= SPLIT_MIN_PART_ROWS] or [1]
    if len(parts) > 1:
        space.define_knob(knob_name(KnobKind.PARTS, f), parts, default=parts[0])
    space.define_knob(knob_name(KnobKind.K_UNROLL, f), list(SPLIT_K_UNROLLS),
                      default=SPLIT_K_UNROLLS[0])
    vecs = [m for m in VECTOR_MULTIPLES if m * an.lanes(f.op) <= f.spatial[-1].extent]
    if len(vecs) > 1:
        space.define_knob(knob_name(KnobKind.VEC, f), vecs, default=vecs[0])


def knobs_rfactor(space, an, f):
    modes = rfactor_modes(an, f)
    space.define_knob(knob_name(KnobKind.RFACTOR, f), list(modes), default=modes[-1])
    knobs_accumulators(space, an, f, an.cum(f.reduce))


def knobs_accumulators(space, an, f, length):
    """The rfactor's vectors of partial sums: as many as leave the reduction at least
    RFACTOR_MIN_VECTORS of them long."""
    counts = [m for m in RFACTOR_ACCUMULATORS
              if m == 1 or m * an.lanes(f.op) * RFACTOR_MIN_VECTORS <= length]
    if len(counts) > 1:
        space.define_knob(knob_name(KnobKind.ACCUMULATORS, f), counts, default=1)


def knobs_location(space, an, anchor, members):
    """One attach choice per group (legal by construction: every member's uses are inside)."""
    has_reduction = any(m.role is Role.ROW for m in members)
    space.define_knob(knob_name(KnobKind.AT, an[anchor]), list(AT_CHOICES),
                      default=0 if has_reduction else "root")
    for m in members:
        if inline_choice(an, m):
            space.define_knob(knob_name(KnobKind.INLINE, m), [0, 1], default=0)


def inline_choice(an, f) -> bool:
    """May the dear injective stage *f* be inlined after all?  Not one with an expensive call
    that a consumer would compute again inside one of its loops
    (:meth:`~.analysis.DagAnalysis.repeats_when_inlined`): an exponential inlined into a
    reduction that repeats it costs its work that many times over, and a candidate like that
    once ran past the 10 s timeout.  A cheap one (padding's select) may be: recomputing a
    select is cheaper than a padded copy in memory."""
    return f.role is Role.FLEXIBLE and not (an.dag.has_expensive_call(f.op)
                                            and an.repeats_when_inlined(f.op))


def knobs_plain(space, an, f):
    """Rule 6 on a stage that is not tiled: the vector loop's length in SIMD vectors, and for
    a stage that may run at the root, its prefetch distance."""
    if f.vector_ok and f.spatial and f.spatial[-1].extent > an.lanes(f.op):
        space.define_knob(knob_name(KnobKind.VEC, f), list(VECTOR_MULTIPLES), default=2)
    if f.role in (Role.ROOT, Role.ROW) and _reads_large(an, f):
        space.define_knob(knob_name(KnobKind.PREFETCH, f), list(PREFETCH_DISTANCES),
                          default=PREFETCH_DISTANCES[0])
    if f.role in (Role.ROOT, Role.FUSED) and not f.reduce and _writes_beyond_cache(an, f):
        space.define_knob(knob_name(KnobKind.NONTEMPORAL, f), list(NONTEMPORAL_CHOICES),
                          default=NONTEMPORAL_CHOICES[0])


def _writes_beyond_cache(an, f):
    """Is the tensor stage *f* writes at least as large as the last-level cache?  (Not a
    symbolic one: at a small size its result would stay cached for its reader.)"""
    t = f.op.output()
    return all(isinstance(d, int) for d in t.shape) and \
        math.prod(t.shape) * dtypes.bits(t.dtype) // 8 >= an.machine.cache_bytes


def _reads_large(an, f):
    """Does stage *f* read a tensor of PREFETCH_MIN_BYTES or more (a symbolic shape counts as
    large)?"""
    for r in an.dag.reads(f.op):
        shape = r.tensor.shape
        if not all(isinstance(d, int) for d in shape) or \
                math.prod(shape) * dtypes.bits(r.tensor.dtype) // 8 >= PREFETCH_MIN_BYTES:
            return True
    return False


# rule 6 / 7: which stages get the annotations as a rule of their own ---------------------------

def fires_fallback(an):
    """Rule 7: root stages that host no compute-location group (no rule above fires on a ROOT
    stage, so they get rule 6 only as a fallback)."""
    hosts = {id(anchor) for anchor, _ in location_groups(an)}
    return [f for f in an.stages() if f.role is Role.ROOT and id(f.op) not in hosts]


def fires_annotate(an):
    """Rule 6: every stage that is not inlined and not a fallback."""
    fallback = {id(f.op) for f in fires_fallback(an)}
    return [f for f in an.stages() if f.role not in (Role.INLINE, Role.SCAN)
            and id(f.op) not in fallback]


def fires_scan(an):
    """The scan rule: every state of a scan (a partner's stores are in its leader's loops)."""
    return [f for f in an.stages() if f.role is Role.SCAN]


def _define_scan(space, an, rfactor_ok):
    """The scan rule's knobs, on each scan's first state: the vector length (where the
    contiguous axis is not the scan axis) and the parallel blocks per core."""
    for f in fires_scan(an):
        if f.op is not f.op.leader:
            continue
        last = f.op.axis[-1]
        if f.vector_ok and isinstance(last.extent, int) and last.extent > an.lanes(f.op):
            space.define_knob(knob_name(KnobKind.VEC, f), list(VECTOR_MULTIPLES), default=1)
        spatial = [iv.extent for iv in f.op.spatial_axes]
        if all(isinstance(e, int) for e in spatial) and \
                math.prod(spatial) >= 2 * an.machine.cores * an.lanes(f.op):
            space.define_knob(knob_name(KnobKind.BLOCKS, f), list(SCAN_BLOCKS), default=1)


def _decide_scan(plan, an, values, rfactor_ok):
    for f in fires_scan(an):
        plan[f.op].scan_blocks = values.get(knob_name(KnobKind.BLOCKS, f), 1)


# scatters --------------------------------------------------------------------------------------

def knobs_scatter(space, an, f):
    """Private copies (where :func:`privatizable`; by default one per core where the free axes
    cannot feed the cores), and the vector loop's length in SIMD vectors."""
    if privatizable(an, f):
        few = math.prod(iv.extent for iv in f.spatial) < 4 * an.machine.cores
        space.define_knob(knob_name(KnobKind.PRIVATE, f), list(PRIVATE_COPIES_PER_CORE),
                          default=1 if few else 0)
    if scatter_vector_ok(f) and f.spatial[-1].extent > an.lanes(f.op):
        space.define_knob(knob_name(KnobKind.VEC, f), list(VECTOR_MULTIPLES), default=1)


def _define_scatter(space, an, rfactor_ok):
    for f in fires_scatter(an):
        knobs_scatter(space, an, f)


def _decide_scatter(plan, an, values, rfactor_ok):
    for f in fires_scatter(an):
        per_core = values.get(knob_name(KnobKind.PRIVATE, f), 0)
        plan[f.op].private_copies = per_core * an.machine.cores


# the knobs each rule defines, per rule ---------------------------------------------------------

def _define_tiling(space, an, rfactor_ok):
    for f in fires_tiling(an):                  # a stage's pack knobs follow its tiles
        knobs_tiling(space, an, f)
        knobs_pack(space, an, f)


def _define_rfactor(space, an, rfactor_ok):
    for f in fires_rfactor(an, rfactor_ok):
        knobs_rfactor(space, an, f)
    dots = {id(f.op): f for f in fires_dot_sketch(an, rfactor_ok) if dot_tiles(an, f)}
    chosen = set()              # stages whose sketch knob is defined (with "dot" where it fires)
    for f in fires_row_sketch(an, rfactor_ok):
        knobs_sketch(space, an, f, dot=id(f.op) in dots)
        chosen.add(id(f.op))
    for f in fires_split_sketch(an, rfactor_ok):
        knobs_split(space, an, f, dot=id(f.op) in dots)
        chosen.add(id(f.op))
    for f in dots.values():
        if id(f.op) not in chosen:
            space.define_knob(knob_name(KnobKind.SKETCH, f), ["tile", "dot"], default="tile")
        tiles = dot_tiles(an, f)
        space.define_knob(knob_name(KnobKind.DOT_TILE, f), tiles, default=tiles[0])


def _define_location(space, an, rfactor_ok):
    for anchor, members in location_groups(an):
        knobs_location(space, an, anchor, members)


def _define_plain(space, an, rfactor_ok):
    for f in an.stages():
        if f.role in (Role.ROOT, Role.ROW, Role.FLEXIBLE, Role.FUSED):
            knobs_plain(space, an, f)


# what a config decided: each rule reads its knobs into the stages' plans (see plan.py); a knob
# the space lacks reads as the rule not firing on that stage -----------------------------------

def tile_extents(f, iv, values, parts):
    """Extents of *iv*'s split into *parts* levels under the knob *values* (outermost derived
    from the extent), all 1 inside for an axis without a knob (extent 1)."""
    got = values.get(knob_name(KnobKind.TILE, f, iv))
    if got is None or iv.extent == 1:
        inner = (1,) * (parts - 1)
    else:
        inner = tuple(got[1:])
    return (-(-iv.extent // math.prod(inner)),) + inner


def _decide_inline(plan, an, values, rfactor_ok):
    for f in fires_inline(an):
        plan[f.op].inline = True


def _decide_tiling(plan, an, values, rfactor_ok):
    for f in fires_tiling(an):
        p = plan[f.op]
        p.cache_level = values.get(knob_name(KnobKind.CACHE, f), CACHE_DEFAULT)
        p.spatial_tiles = tuple(tile_extents(f, iv, values, 4) for iv in f.spatial)
        p.reduce_tiles = tuple(tile_extents(f, iv, values, 2) for iv in f.reduce)
        p.unroll = values.get(knob_name(KnobKind.UNROLL, f), UNROLL_DEFAULT)
        # the other axis needs an accumulator of the kernel's own to store channels innermost
        if values.get(knob_name(KnobKind.VECTOR_AXIS, f)) == "alt" and p.cache_level:
            p.vector_pos = f.vector_alt


def _decide_pack(plan, an, values, rfactor_ok):
    for f in fires_tiling(an):
        plan[f.op].packs = tuple(values.get(knob_name(KnobKind.PACK, f, src), PACK_NONE)
                                 for src, _, _ in f.packable)


def _decide_rfactor(plan, an, values, rfactor_ok):
    for f in fires_rfactor(an, rfactor_ok):
        plan[f.op].rfactor = values.get(knob_name(KnobKind.RFACTOR, f), "none")
        plan[f.op].accumulators = values.get(knob_name(KnobKind.ACCUMULATORS, f), 1)
    for f in fires_row_sketch(an, rfactor_ok):
        if values.get(knob_name(KnobKind.SKETCH, f), "tile") == "rows":
            p = plan[f.op]
            p.as_rows, p.cache_level = True, None       # rfactored by lanes, not tiled
            p.accumulators = values.get(knob_name(KnobKind.ACCUMULATORS, f), 1)
            p.interleave = values.get(knob_name(KnobKind.INTERLEAVE, f), 1)
    for f in fires_dot_sketch(an, rfactor_ok):
        if values.get(knob_name(KnobKind.SKETCH, f), "tile") == "dot":
            p = plan[f.op]
            p.cache_level = None                         # dot products, not tiled
            p.dot_tile = values[knob_name(KnobKind.DOT_TILE, f)]
    for f in fires_split_sketch(an, rfactor_ok):
        if values.get(knob_name(KnobKind.SKETCH, f), "tile") == "split":
            p = plan[f.op]
            p.cache_level = None                         # split-k, not tiled
            p.split_parts = values.get(knob_name(KnobKind.PARTS, f), 1) * an.machine.cores
            p.split_k_unroll = values.get(knob_name(KnobKind.K_UNROLL, f), SPLIT_K_UNROLLS[0])


def _decide_location(plan, an, values, rfactor_ok):
    for anchor, members in location_groups(an):
        plan[anchor].at = values.get(knob_name(KnobKind.AT, an[anchor]), "root")
        for m in members:
            p = plan[m.op]
            p.located = True
            if inline_choice(an, m) and values.get(knob_name(KnobKind.INLINE, m), 0) == 1:
                p.inline = True


def _decide_plain(plan, an, values, rfactor_ok):
    for f in an.stages():
        plan[f.op].vec_mult = values.get(knob_name(KnobKind.VEC, f), 1)
        plan[f.op].prefetch = values.get(knob_name(KnobKind.PREFETCH, f), 0)
        plan[f.op].nontemporal = values.get(knob_name(KnobKind.NONTEMPORAL, f), 0) == 1


# the rules, in order ---------------------------------------------------------------------------

def _names(facts):
    return [f.name for f in facts]


@dataclass(frozen=True)
class Rule:
    """A rule as the space generator runs it.  ``fires(an, rfactor_ok)``: the names of the
    stages it fires on (a name once per firing, as ``SketchSpace.fired`` lists it);
    ``define(space, an, rfactor_ok)``: adds its knobs to the config space;
    ``decide(plan, an, values, rfactor_ok)``: reads a config's values of them into the stages'
    :class:`~.plan.StagePlan` (both only for a rule with choices)."""
    kind: RuleKind
    fires: Callable
    define: Callable | None = None
    decide: Callable | None = None


#: the rules in the order they fire, define their knobs (the knob order is the space's index
#: order, so it is part of what a log records) and decide; packing's knobs follow each tiled
#: stage's tiles, so the tiling rule defines them; a tiled stage taken as rows is decided by
#: rfactor after tiling
RULES = (
    Rule(RuleKind.INLINE, lambda an, ok: _names(fires_inline(an)), decide=_decide_inline),
    Rule(RuleKind.MULTI_LEVEL_TILING, lambda an, ok: _names(fires_tiling(an)),
         define=_define_tiling, decide=_decide_tiling),
    Rule(RuleKind.FUSE_CONSUMER,
         lambda an, ok: [f.name for pair in fires_fusion(an) for f in pair]),
    Rule(RuleKind.PACK, lambda an, ok: list(dict.fromkeys(f.name for f, _, _ in fires_pack(an))),
         decide=_decide_pack),
    Rule(RuleKind.RFACTOR,
         lambda an, ok: list(dict.fromkeys(_names(
             fires_rfactor(an, ok) + fires_row_sketch(an, ok) + fires_split_sketch(an, ok)
             + fires_dot_sketch(an, ok)))),
         define=_define_rfactor, decide=_decide_rfactor),
    Rule(RuleKind.TENSORIZE, lambda an, ok: [f.name for f in fires_tensorize(an)],
         define=define_tensorize, decide=decide_tensorize),
    Rule(RuleKind.COMPUTE_LOCATION,
         lambda an, ok: [m.name for _, members in location_groups(an) for m in members],
         define=_define_location, decide=_decide_location),
    Rule(RuleKind.SCAN, lambda an, ok: _names(fires_scan(an)), define=_define_scan,
         decide=_decide_scan),
    Rule(RuleKind.SCATTER, lambda an, ok: _names(fires_scatter(an)),
         define=_define_scatter, decide=_decide_scatter),
    Rule(RuleKind.PARALLEL_VECTORIZE_UNROLL, lambda an, ok: _names(fires_annotate(an)),
         define=_define_plain, decide=_decide_plain),
    Rule(RuleKind.FALLBACK, lambda an, ok: _names(fires_fallback(an))),
)
