"""Heuristic first configs: what a performance engineer would try before measuring anything.

With 200 trials (5x fewer than Ansor's budget) the tuner measures these first.  Per tiled stage:
the vectorized axis gets an innermost tile of 1, 2 or 4 SIMD vectors and a panel of about 64
elements; the *row* axis (a data axis that the vector-loaded operands do not depend on, so a
loaded vector is reused for every row: GEMM's i, conv2d's output channels) gets a register tile
with rows x vectors accumulators fitting the register file; other axes stay outer, where they
feed the parallel loop; the last reduction axis is unrolled by 4.  Row operators compute their
reductions at the row loop with rfactor; packing goes to the operand blocked along the vector or
the row axis.
"""
from __future__ import annotations

import functools
import itertools
import math

from ....arith import simplify
from ....ir.expr import TensorRead
from ....ir.visit import free_vars, substitute
from ....te.tensor import ComputeOp, PlaceholderOp
from .analysis import Role, var_ids
from .rules import (PACK_BLOCK, PACK_NONE, PACK_ROOT, SKETCHES, SPLIT_K_UNROLLS, KnobKind,
                    dot_tiles, fires_dot_sketch, fires_rfactor, fires_row_sketch,
                    fires_split_sketch, inline_choice, knob_name, location_groups,
                    rfactor_modes, tile_axes)
from .tensor_rules import tensor_wishes
from .tiles import REGISTER_ROWS, divisors, nearest


def config_from(sp, wishes):
    """The config of *sp* with each knob named in *wishes* at the wished value (split knobs:
    the nearest sizes; ``None`` factors free), the others at their defaults."""
    cs = sp.config_space
    point = []
    for name, knob in cs.knobs.items():
        w = wishes.get(name)
        if w is None:
            point.append(knob.default_index)
        elif knob.kind == "split":
            point.append(nearest([e.size for e in knob.entities], w))
        else:
            vals = [e.val for e in knob.entities]
            point.append(vals.index(w) if w in vals else knob.default_index)
    return cs.get(cs.index_of(point))


def _row_axis(an, f, vec):
    """The data axis (not *vec*) of largest extent that every read using *vec* misses."""
    vec_reads = [r for r in an.dag.reads(f.op)
                 if vec is not None and any(v is vec.var for ix in r.indices
                                            for v in free_vars(ix))]
    best = None
    for iv in f.spatial:
        if iv is vec or iv.extent < 2:
            continue
        if any(any(v is iv.var for ix in r.indices for v in free_vars(ix)) for r in vec_reads):
            continue
        if best is None or iv.extent > best.extent:
            best = iv
    return best


def _vector_and_row(an, f):
    """*f*'s vectorized data axis (its contiguous last one, None if it cannot be vectorized)
    and its row axis (:func:`_row_axis`)."""
    vec = f.spatial[-1] if f.vector_ok and f.spatial[-1].extent > 1 else None
    return vec, _row_axis(an, f, vec)


def _second_axis(an, f, vec, row):
    """The largest data axis other than *vec* and *row* (None if it has extent < 2)."""
    rest = [iv for iv in f.spatial if iv is not vec and iv is not row and iv.extent >= 2]
    return max(rest, key=lambda iv: iv.extent, default=None)


def _fit(extent, want, most=None):
    """The divisor of *extent* nearest *want* (log scale), at most *most* (default *want* * 2)."""
    ds = [d for d in divisors(extent) if d <= (max(1, want) * 2 if most is None else most)]
    return min(ds, key=lambda d: (abs(math.log2(d) - math.log2(max(1, want))), -d))


#: pack an operand only when at least this many rows reuse each packed element.  Why it holds
#: on any machine: the copy reads and writes each element once, the product reads it once per
#: row; at 32 rows the copy adds at most 1/16 to the operand's traffic, a ratio of memory
#: passes, not a speed.  A seed's choice only: the pack knob is searched at every row count.
PACK_MIN_ROWS = 32
#: independent multiply-add chains a core needs in flight to keep its FMA units busy: latency
#: (4-5 cycles) times FMA pipes (2) on x86-64 cores since Haswell and Zen, 4 x 1 on those with
#: one 512-bit pipe; without FMA, a multiply and an add pipe in sequence ask about as many
#: (see :func:`_accumulator_budget` for the registers they may take)
FMA_CHAINS = 8


#: the vector registers the rows of the seed variants (_VARIANTS) were chosen for: AVX2's 16.
#: A machine with twice as many (AVX-512, NEON: 32) holds a register tile twice as tall with the
#: same vectors, so its seeds double the rows (still cut to :func:`_accumulator_budget`): each
#: loaded operand vector then feeds twice the multiply-adds
VARIANT_REGISTERS = 16
#: a seed's rows that do not divide the row extent are kept where the last tile's unused rows
#: are at most this share of the extent (6 rows of 128: 22 tiles, 4 rows unused, 3%), and
#: otherwise moved to the nearest divisor; the one partial tile costs its share of the work,
#: while a shorter divisor costs every tile its loads
MAX_TAIL_WASTE = 1 / 16


def _height(extent, want, most) -> int:
    """The register-tile height nearest *want* (log scale), at most *most*, among those the
    space offers (divisors of *extent* and the :data:`~.tiles.REGISTER_ROWS`) whose partial last
    tile wastes at most :data:`MAX_TAIL_WASTE` of *extent*."""
    def fits(h):
        return extent % h == 0 or -(-extent // h) * h <= extent * (1 + MAX_TAIL_WASTE)
    heights = [h for h in set(divisors(extent)) | set(REGISTER_ROWS) if h <= min(most, extent)
               and fits(h)]
    return min(heights, key=lambda h: (abs(math.log2(h) - math.log2(max(1, want))), -h))


def _accumulator_budget(machine, vectors) -> int:
    """Register-tile rows that fit the machine's vector registers with *vectors* accumulators
    per row: besides the accumulators, the tile needs its *vectors* loaded operand vectors, one
    broadcast and, without FMA, one product before it is added."""
    spare = vectors + 1 + (0 if machine.fma else 1)
    return max(1, (machine.registers - spare) // vectors)


def _tiled_wishes(an, f, rows, vectors, panel, kunroll, unroll, pack, rows_outer=False,
                  alt=False):
    """The register tile (rows x vectors accumulators, level 3), nothing at level 2 (so the
    accumulator is exactly the register tile and LLVM keeps it in registers across the whole
    reduction), a *panel* of columns at level 1 and the rest outer and parallel.

    *rows_outer*: the stage hosts row reductions (a softmax feeding ``@ V``), so the parallel
    outer loop runs over row blocks only and each row's reductions are computed once.
    *alt*: the vectors run along the stage's other vector axis (``vector_alt``: a
    convolution's output channels) and the rows along its last axis (the pixels of a row), as
    oneDNN's kernels do; the operand packed along the channels (the weights, read by every
    block) is packed once at the root."""
    tile = functools.partial(knob_name, KnobKind.TILE, f)
    lanes = an.lanes(f.op)
    spatial, reduce = tile_axes(f)
    if alt:
        vec, row = f.spatial[f.vector_alt], f.spatial[-1]
    else:
        vec, row = _vector_and_row(an, f)
    w = {knob_name(KnobKind.CACHE, f): 2, knob_name(KnobKind.UNROLL, f): unroll}
    if alt:
        w[knob_name(KnobKind.VECTOR_AXIS, f)] = "alt"
    s3v, vec_outer = 1, 1
    second, second_size = None, 1
    if vec is not None and vectors > 1 and vec.extent % lanes == 0 \
            and vec.extent % (vectors * lanes):
        # vectors * lanes would leave a wasted tail: one vector, the other rows of the tile
        # taken from a second data axis that the vector's reads use (conv2d's y next to x)
        second = _second_axis(an, f, vec, row)
        if second is not None:
            second_size = _fit(second.extent, vectors)
            w[tile(second)] = (-1, 1, 1, second_size)
            vectors = 1
    if vec is not None:
        s3v = min(vectors * lanes, vec.extent)
        s1v = _fit(-(-vec.extent // s3v), max(1, panel // s3v))
        if rows_outer and row is not None:
            s1v = -(-vec.extent // s3v)
        w[tile(vec)] = (-1, s1v, 1, s3v)
        vec_outer = -(-vec.extent // (s1v * s3v))
    if row is not None:
        nvec = max(1, -(-s3v // lanes)) * second_size
        budget = _accumulator_budget(an.machine, nvec)
        rows *= max(1, an.machine.registers // VARIANT_REGISTERS)
        r = max(1, min(rows, budget, row.extent))
        if alt:
            # a divisor within the registers, so that no tile of a few rows (a few pixels of a
            # row, 1 of 64 output channels in tiles of 7) is left over
            r = _fit(row.extent, r, most=budget)
        elif isinstance(row.extent, int) and row.extent % r:
            r = _height(row.extent, r, budget)
        rest = -(-row.extent // r)
        if rows_outer:
            w[tile(row)] = (-1, 1, 1, r)
        elif vec_outer < an.machine.cores:
            w[tile(row)] = (-1, max(1, rest // an.machine.cores), 1, r)
        else:
            w[tile(row)] = (-1, rest, 1, r)
    for iv in spatial:
        if iv is not vec and iv is not row and iv is not second:
            w[tile(iv)] = (-1, 1, 1, 1)
    for n, iv in enumerate(reduce):
        k = _fit(iv.extent, kunroll) if n == len(reduce) - 1 else 1
        w[tile(iv)] = (-1, k)
    # an operand already contiguous along the packed axis is packed for locality alone, which
    # costs a pass over it each call, repaid only when many rows reuse it: with few (a dense
    # layer at a small batch) the copy moves as much memory as the product reads
    few_rows = row is not None and row.extent < PACK_MIN_ROWS
    # packed per block where each block of the parallel outer loop holds all the rows (the
    # block's panel is then copied once, and read from cache by every row of it), else once
    # at the root
    rows_whole = row is None or w[tile(row)][1] * w[tile(row)][3] \
        >= row.extent
    # a constant operand (a weight) is packed once, ahead of the calls: at the root, whatever
    # the rows
    for src, dim, pos in f.packable:
        axis = f.spatial[pos]
        only_locality = dim == len(src.shape) - 1
        wanted = pack and (src.constant or not (few_rows and only_locality)) and (
            axis is vec or (axis is row and not any(f.spatial[p] is vec
                                                    for _, _, p in f.packable)))
        per_block = axis is vec and rows_whole and not alt and not src.constant
        w[knob_name(KnobKind.PACK, f, src)] = PACK_NONE if not wanted \
            else PACK_BLOCK if per_block else PACK_ROOT
    return w


#: a skinny stage's row block: this many rows (or all, if fewer) run in parallel blocks.  Why
#: it holds on any machine: every block streams the whole weight, so fewer rows per block cost
#: weight traffic and more cost parallel blocks; at 4, each weight vector loaded feeds 4
#: multiply-adds, 2 per load port of the 2-load-port cores (every x86-64 core since Sandy
#: Bridge and Zen), so the loads do not bound it; the strip is derived from FMA_CHAINS
SKINNY_ROWS = 4
#: a skinny stage's reduction unroll: the weight rows one pass over a strip of accumulators
#: streams at once.  A block of several rows does several multiply-adds per weight vector it
#: loads, so 4 rows in flight keep it busy; a single row (a GEMV) does one, so it is bound by
#: streaming alone, and then each accumulator is loaded and stored once per that many rows and
#: the prefetchers follow that many streams.  The best count for one row depends on the memory
#: system (16 was best and 4 a third slower streaming an 11 MB weight from a Zen 5 L3; 32 was
#: worse again), so it is not derived but measured: the seeds try each, most promising first
SKINNY_K_UNROLL = 4
GEMV_K_UNROLLS = (16, 8, 4)


def _skinny_wishes(an, f, kunroll=None):
    """A stage with few rows (a dense layer at a small batch) does a few multiply-adds per
    element of its vector-read operand (the weight), so it is bound by streaming that operand,
    not by arithmetic.  Each block of SKINNY_ROWS rows runs over all the columns in strips of
    FMA_CHAINS / SKINNY_ROWS vectors (the register tile keeps FMA_CHAINS accumulators in
    flight, across the whole reduction, unrolled by *kunroll*), the weight read in place: a copy
    would read and write it once more, as much traffic as the product's.  The parallel loop runs
    over the row blocks, and over as many column blocks as it takes to give every core one.
    A single row (a dense layer at batch 1: a GEMV) is one block.  *kunroll*: the reduction's
    unroll (default: SKINNY_K_UNROLL, or GEMV_K_UNROLLS[0] for one row).  None where the stage
    is not skinny."""
    tile = functools.partial(knob_name, KnobKind.TILE, f)
    lanes, cores = an.lanes(f.op), an.machine.cores
    spatial, reduce = tile_axes(f)
    vec, row = _vector_and_row(an, f)
    if vec is None or vec.extent % lanes:
        return None
    if row is None and any(iv is not vec and iv.extent > 1 for iv in f.spatial):
        return None                 # no row axis, yet several rows: not a dense layer's shape
    if row is not None and row.extent >= PACK_MIN_ROWS:
        return None
    if any(f.spatial[pos] is vec and dim != len(src.shape) - 1 for src, dim, pos in f.packable):
        return None                 # read with a stride along the vector axis: needs its copy
    rows = 1 if row is None else min(row.extent, SKINNY_ROWS)
    if kunroll is None:
        kunroll = GEMV_K_UNROLLS[0] if row is None else SKINNY_K_UNROLL
    # a full block keeps FMA_CHAINS accumulators; fewer rows keep fewer (streaming bounds them)
    vectors = max(1, -(-FMA_CHAINS // SKINNY_ROWS))
    while vectors > 1 and _accumulator_budget(an.machine, vectors) < rows:
        vectors -= 1
    strip = min(vectors * lanes, vec.extent)
    row_blocks = 1 if row is None else -(-row.extent // rows)
    col_blocks = max(1, -(-cores // row_blocks))
    per_block = _fit(max(1, vec.extent // strip), max(1, vec.extent // (strip * col_blocks)))
    w = {knob_name(KnobKind.CACHE, f): 1, knob_name(KnobKind.UNROLL, f): 64,
         tile(vec): (-1, 1, per_block, strip)}
    if row is not None:
        w[tile(row)] = (-1, 1, 1, rows)
    for iv in spatial:
        if iv is not vec and iv is not row:
            w[tile(iv)] = (-1, 1, 1, 1)
    for n, iv in enumerate(reduce):
        w[tile(iv)] = (-1, _fit(iv.extent, kunroll) if n == len(reduce) - 1 else 1)
    for src, _, _ in f.packable:
        w[knob_name(KnobKind.PACK, f, src)] = PACK_NONE
    return w


#: the split-k seeds' strip widths in SIMD vectors: one vector's partial sums per weight row
#: loaded and stored per unrolled block of rows, or two (fewer loop iterations, two streams of
#: stores); both are only first measurements: the space searches parts, unroll and width
SPLIT_SEED_VECTORS = (1, 2)


def _dot_wishes(an, rfactor_ok, extra):
    """The dot sketch's seed (:func:`~.rules.fires_dot_sketch`): every stage the rule fires on
    computed as dot products in its first register tile (:data:`~.rules.DOT_TILES`, the
    largest that fits the registers first)."""
    stages = [f for f in fires_dot_sketch(an, rfactor_ok) if dot_tiles(an, f)]
    if not stages:
        return []
    w = dict(extra)
    for f in stages:
        w.update({knob_name(KnobKind.SKETCH, f): "dot",
                  knob_name(KnobKind.DOT_TILE, f): dot_tiles(an, f)[0]})
    return [w]


def _split_wishes(an, rfactor_ok, extra):
    """Split-k seeds (:func:`~.rules.fires_split_sketch`): every stage the rule fires on split
    into one part per core, its weight rows added SPLIT_K_UNROLLS[0] at a time into strips of
    each of SPLIT_SEED_VECTORS vectors."""
    stages = fires_split_sketch(an, rfactor_ok)
    out = []
    for vectors in SPLIT_SEED_VECTORS if stages else ():
        w = dict(extra)
        for f in stages:
            w.update({knob_name(KnobKind.SKETCH, f): "split", knob_name(KnobKind.PARTS, f): 1,
                      knob_name(KnobKind.K_UNROLL, f): SPLIT_K_UNROLLS[0],
                      knob_name(KnobKind.VEC, f): vectors})
        out.append(w)
    return out


#: (rows, vectors, panel, k unroll, unroll step, pack), most promising first: 6 x 2 vectors
#: with a 2-vector panel is the classic AVX2 micro-kernel, 3 x 4 and 2 x 4 the wide ones.  Why
#: they hold on other machines: vectors count in the model's lanes and rows are upper bounds
#: cut to its register file (:func:`_accumulator_budget`), so every tile is whole vectors that
#: fit the registers; the first six keep FMA_CHAINS accumulators or more in flight; the panels
#: (columns a block reads, K x panel elements) span 16-256 columns because cache sizes differ
#: and no seed assumes one; and they only order the first measurements: every tile size of
#: the space is searched
_VARIANTS = [(6, 2, 16, 4, 64, True), (4, 2, 64, 4, 64, True), (3, 4, 32, 4, 64, True),
             (6, 2, 64, 4, 64, True), (2, 4, 32, 8, 64, True), (8, 1, 64, 4, 64, True),
             (6, 2, 16, 4, 64, False), (4, 1, 32, 1, 16, False), (6, 2, 128, 8, 64, True),
             (3, 2, 64, 4, 64, True), (4, 4, 64, 4, 512, True), (4, 2, 256, 4, 64, False)]


def _is_view(op) -> bool:
    """Is *op* a layout view: one read of one tensor at remapped indices, nothing computed
    (reshape, permute, slice, squeeze, expand as the PyTorch backend and einloop.nn declare
    them)?"""
    return isinstance(op, ComputeOp) and isinstance(op.body, TensorRead)


def _through_views(read, ranges):
    """*read* (a TensorRead) seen through the chain of views it reads: the read of the first
    tensor that is no view, at the indices the views compose to, simplified on *ranges* (Var
    -> (lo, hi) of the reader's loops: a head's ``(64 * bh + d) // 512`` is ``bh // 8``)."""
    while _is_view(read.tensor.op):
        op = read.tensor.op
        at = {iv.var: ix for iv, ix in zip(op.axis, read.indices)}
        inner = op.body
        read = TensorRead(inner.tensor, tuple(simplify(substitute(ix, at), ranges)
                                              for ix in inner.indices), inner.dtype)
    return read


def _gathers_when_inlined(an, f) -> bool:
    """Would inlining view *f* (and the views it reads) make a tiled stage read across rows:
    its vector axis (its last data axis) indexing the source in a dimension other than the
    last, a gather of one element per row?  Attention's ``K.T`` per head is such a view (the
    scores' columns run along K's rows); its ``Q`` and ``V`` per head are not (broadcast along
    the columns, or along the last dimension, where a slice's clamp ``min(h * 64 + c, 511)``
    still loads a vector)."""
    for c in an.dag.consumers(f.op):
        cf = an.facts.get(id(c))
        if cf is None or cf.role is not Role.TILED or not cf.spatial:
            continue
        vec = id(cf.spatial[-1].var)
        ranges = {iv.var: (0, iv.extent - 1) for iv in cf.spatial + cf.reduce
                  if isinstance(iv.extent, int)}
        for r in an.dag.reads(c):
            if r.tensor.op is f.op and \
                    any(vec in var_ids([ix]) for ix in _through_views(r, ranges).indices[:-1]):
                return True
    return False


def _views_an_input(op) -> bool:
    """Is view *op*, through the views it reads, a view of an input (a placeholder)?  Not of
    a computed stage: inlined into a product, a softmax's division would be computed again
    at every column block of the product's tile."""
    while _is_view(op):
        op = op.body.tensor.op
    return isinstance(op, PlaceholderOp)


def _view_chain_wishes(an) -> dict:
    """Inline every view stage whose readers are all views too, so that a chain of views
    (an attention kernel's ``qkv[0]`` squeezed, reshaped and permuted into heads) is one copy,
    its last stage, instead of a copy per view, each computed again at every tile; and that
    last view too where it views an input and its readers are tiled stages that read the
    input contiguously along their vector axis once it is inlined (attention's Q and V per
    head: no copy at all).  A
    last view that would make a tiled stage gather stays a copy (:func:`_transposing_views`
    places it).  Then a stage only kept copies read is computed in them
    (:func:`_into_copies_wishes`)."""
    w = {}
    for f in an.stages():
        users = an.dag.consumers(f.op)
        if not (inline_choice(an, f) and _is_view(f.op) and users):
            continue
        if all(map(_is_view, users)) or (
                _views_an_input(f.op) and not _gathers_when_inlined(an, f)
                and all(an.facts.get(id(c)) is not None and an[c].role is Role.TILED
                        for c in users)):
            w[knob_name(KnobKind.INLINE, f)] = 1
    return _into_copies_wishes(an, w)


def _into_copies_wishes(an, w) -> dict:
    """*w* with every cheap stage that only view copies read, copies that *w* keeps (a
    padding read by the residue-class copy of a strided convolution), inlined into them:
    computed in their pass over memory, not in a pass of its own before them."""
    for f in an.stages():
        users = an.dag.consumers(f.op)
        if users and not _is_view(f.op) and inline_choice(an, f) and all(
                _is_view(c) and id(c) in an.facts and
                w.get(knob_name(KnobKind.INLINE, an[c])) != 1 for c in users):
            w[knob_name(KnobKind.INLINE, f)] = 1
    return w


def _transposing_views(an) -> set:
    """The ids of the view stages the seeds keep as copies because a tiled stage would read
    them across rows once inlined (attention's ``K.T`` per head).  Their compute-location
    group is placed at the anchor's outermost tile loop (its parallel one), so that each
    block of the product copies the block of K it reads, transposed, into a buffer that stays
    in cache while the block reads it contiguously, instead of one pass over all of K before
    the product."""
    return {id(f.op) for f in an.stages()
            if f.role is Role.FLEXIBLE and _is_view(f.op) and _gathers_when_inlined(an, f)}


def seed_configs(sp, n=8):
    """Up to *n* distinct heuristic configs of *sp*, most promising first."""
    an = sp.analysis
    if not sp.config_space.knobs:
        return [sp.config_space.get(0)]
    row_ops = [_view_chain_wishes(an) for _ in range(2)]
    transposing = _transposing_views(an)
    for i, (vecs, at) in enumerate(((2, 0), (1, 0))):
        for f in fires_rfactor(an, sp.rfactor_ok):
            row_ops[i][knob_name(KnobKind.RFACTOR, f)] = rfactor_modes(an, f)[-1]
        for f in fires_row_sketch(an, sp.rfactor_ok):
            row_ops[i][knob_name(KnobKind.SKETCH, f)] = SKETCHES[1 - i]
        for anchor, members in location_groups(an):
            row_ops[i][knob_name(KnobKind.AT, an[anchor])] = \
                at if any(m.role is Role.ROW or id(m.op) in transposing for m in members) \
                else "root"
        for f in an.stages():
            row_ops[i][knob_name(KnobKind.VEC, f)] = vecs
    out, seen = [], set()
    tiled = [f for f in an.stages() if f.role is Role.TILED]
    row_hosts = {id(anchor) for anchor, members in location_groups(an)
                 if any(m.role is Role.ROW for m in members)}
    # the tensorized sketch first where the rule fires: one instruction per lanes x group
    # multiply-adds does more than any tiling of the same loops in int32
    wishes = tensor_wishes(an, row_ops[0])
    skinny_stages = [f for f in tiled
                     if id(f.fused_into if f.fused_into is not None else f.op) not in row_hosts]
    # one row: each of GEMV_K_UNROLLS; several: SKINNY_K_UNROLL (the default of _skinny_wishes)
    gemv = skinny_stages and all(_vector_and_row(an, f)[1] is None for f in skinny_stages)
    for kunroll in GEMV_K_UNROLLS if gemv else (None,):
        skinny = [_skinny_wishes(an, f, kunroll) for f in skinny_stages]
        if skinny and all(skinny):
            wishes.append({k: v for sk in [row_ops[0]] + skinny for k, v in sk.items()})
    wishes += _dot_wishes(an, sp.rfactor_ok, row_ops[0])
    wishes += _split_wishes(an, sp.rfactor_ok, row_ops[0])
    # each variant also with the vectors along the other axis, where a stage has one (a
    # convolution whose rows are no multiple of the lanes)
    for variant, alt, extra in itertools.product(_VARIANTS, (False, True), row_ops):
        if alt and not any(f.vector_alt is not None for f in tiled):
            continue
        w = dict(extra)
        for f in tiled:
            host = f.fused_into if f.fused_into is not None else f.op
            w.update(_tiled_wishes(an, f, *variant, rows_outer=id(host) in row_hosts,
                                   alt=alt and f.vector_alt is not None))
        wishes.append(w)
    for w in wishes:
        cfg = config_from(sp, w)
        if cfg.index not in seen:
            seen.add(cfg.index)
            out.append(cfg)
        if len(out) >= n:
            break
    return out
