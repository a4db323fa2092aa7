"""A config's plan (:mod:`.plan`) applied to a fresh schedule: the rules' primitives, in phases.

Phases, in the order primitives must come: inline; rfactor; per tiled stage its packed copies,
cache_write and loop structure; the loop structure of every other root stage (split, reorder,
fuse, annotations); then the stages computed at another stage's loops get their loops;
compute_at last, once every target loop exists (a loop that hosts a stage can no longer be
split or fused).  The plans hold every decision; what a phase makes that a later one needs (an
rfactor stage, the loops that may host others) is recorded on the stage's plan.
"""
from __future__ import annotations

import math

from ....ir.stmt import ForKind
from ....schedule.passes.inline import inline_bodies
from ....schedule.stage import AttachKind, Fuse, Split
from ....te.tensor import IterKind, PlaceholderOp
from .analysis import Role, contiguous_last, dot_rows, windowed_last
from .rules import PACK_BLOCK, PACK_NONE, RFACTOR_CHUNKS_PER_CORE, location_groups
from .scan_loops import annotate_scan
from .loops import MIN_PARALLEL_POINTS, parallel_outer, worth_threads
from .scatter_rules import annotate_scatter, apply_scatter
from .tensor_amx import apply_amx, is_amx
from .tensor_apply import apply_tensorized


def plain_schedule(s, an):
    """The safe fast schedule: inline what is legal; every other stage at the root, its outer
    data loops parallel, its contiguous innermost data loop vectorized; no tiling.  A product
    of rows with data reuse (:func:`~.analysis.dot_rows`: ``X @ W.T``) is vectorized along its
    reduction instead (:func:`plain_rows`)."""
    for f in an.stages():
        if an.dag.is_inlinable(f.op):
            s[f.op].compute_inline()
    rows = plain_rows_stages(s, an)
    for f in an.stages():
        if an.dag.is_inlinable(f.op):
            continue
        if id(f.op) in rows:
            plain_rows(s, an, f)
        elif f.role is Role.SCAN:
            annotate_scan(s[f.op], an.lanes(f.op), an.machine.cores, vector_ok=f.vector_ok,
                          min_points=an.machine.min_parallel_points)
        elif f.role is Role.SCATTER:
            annotate_scatter(s[f.op], an.lanes(f.op), an.machine.cores,
                             min_points=an.machine.min_parallel_points)
        else:
            annotate_plain(s[f.op], an.lanes(f.op), an.machine.cores, vec_mult=1, attached=False,
                           min_points=an.machine.min_parallel_points)
    return s


def plain_rows_stages(s, an) -> set:
    """The ids of the ops of *an*'s stages that the plain schedule *s* (its inlining done) reduces in
    vector lanes: products of rows with data reuse, as they read once inlined stages are
    substituted (:func:`~.analysis.dot_rows`)."""
    bodies = {id(st.origin_op): body for st, body in inline_bodies(s).items()}
    return {id(f.op) for f in an.stages()
            if not an.dag.is_inlinable(f.op) and an.dag.has_data_reuse(f.op)
            and f.role is not Role.SCATTER
            and dot_rows(f.op, an.lanes(f.op), bodies.get(id(f.op), f.op.body))}


#: rows the plain schedule of a product of rows (``X @ W.T``) reduces side by side, where its
#: row loop is a multiple of it: each vector of X loaded serves that many rows of W, and each
#: row is a chain of adds of its own.  Why it holds on other machines: 4 rows take 4 accumulator
#: registers and 5 loads per 4 multiply-adds (1 per row and one of X), within the 2 loads a
#: cycle of every x86-64 core since Sandy Bridge and Zen and of current AArch64 cores, and 4
#: chains cover an add latency of 4 cycles; the tuned space searches 1 to 8 (ROWS_INTERLEAVED)
PLAIN_INTERLEAVE = 4


def plain_rows(s, an, f):
    """Stage *f* as rows reduced in vector lanes: the reduction split by the lanes and factored
    out (each output's partial sums, one per lane, accumulated over contiguous loads), the lanes
    added up by the stage itself, at the loop over its innermost data loop's blocks of
    :data:`PLAIN_INTERLEAVE` rows reduced side by side (or of single rows where the loop is no
    multiple of it), or, where that loop is fused into the parallel one, at the root."""
    lanes, cores = an.lanes(f.op), an.machine.cores
    rf = rfactor_rows(s, f, lanes)
    st = s[f.op]
    data = [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.DATA]
    rows = data[-1] if isinstance(data[-1].extent, int) and data[-1].extent > 1 else None
    # blocks of rows where another data loop runs outside them (a single row loop, a GEMV's,
    # is the parallel one, one row an iteration, as before)
    blocks = rows is not None and len(data) >= 2 and rows.extent % PLAIN_INTERLEAVE == 0
    _, loop = rows_in_blocks(st, rf, rows, PLAIN_INTERLEAVE if blocks else 1, lanes, cores,
                             min_points=an.machine.min_parallel_points)
    if loop is not None:
        rf.compute_at(st, loop)


def rows_in_blocks(st, rf, rows, interleave, lanes, cores, vec_mult=1,
                   min_points=MIN_PARALLEL_POINTS):
    """Stage *st* annotated plain with its loop *rows* split into blocks of *interleave* rows,
    and its lanes' stage *rf* annotated to reduce a block's rows side by side.  Returns the
    stage's host loops and the loop *rf* is to be computed at: the row loop itself for one row a
    block, the loop over blocks otherwise, or None (at the root) where that loop was fused into
    the parallel one."""
    if rows is not None and interleave > 1:
        rows = st.split(rows, factor=interleave)[1]     # a block's rows
    hosts = annotate_plain(st, lanes, cores, vec_mult, inside=(rf,), min_points=min_points)
    at = next((n for n, h in enumerate(hosts) if h is rows), None)
    if at is None or (interleave > 1 and at == 0):
        loop = None
    else:
        loop = rows if interleave == 1 else hosts[at - 1]
    annotate_plain(rf, lanes, cores, 1, loop is not None, lanes_last=True, interleave=interleave,
                   min_points=min_points)
    return hosts, loop


def apply_plan(s, an, plan):
    """Schedule *s* as *plan* (a :class:`~.plan.Plan` of *an*'s stages) says, phase by phase."""
    cores = an.machine.cores
    for p in plan:
        if p.inline:
            s[p.op].compute_inline()
    for p in plan:                              # rfactor: row stages, then tiled ones as rows
        if p.facts.role is Role.ROW and p.rfactor != "none":
            chunks = RFACTOR_CHUNKS_PER_CORE * cores if p.rfactor == "par" else 0
            p.rf_stage = rfactor_rows(s, p.facts, an.lanes(p.op) * p.accumulators, chunks)
    for p in plan:
        if p.as_rows:
            p.rf_stage = rfactor_rows(s, p.facts, an.lanes(p.op) * p.accumulators)
        if p.split_parts:
            p.rf_stage = rfactor_parts(s, p.facts, p.split_parts)
        if p.dot_tile:
            p.rf_stage = rfactor_rows(s, p.facts, an.lanes(p.op))
    attach_later = []                           # (stage, parent, loop), in the order made
    for p in plan:
        if p.tiled or p.tensor is not None:
            loops, later = apply_tiling(s, an, p) if p.tensor is None \
                else apply_amx(s, an, p) if is_amx(p.tensor.intrin) \
                else apply_tensorized(s, an, p)
            fused = p.facts.fused_into is not None and (p.cache_level or p.tensor is not None)
            (plan[p.facts.fused_into] if fused else p).hosts = loops
            attach_later += later
    packed = _inline_into_copies(s, plan)
    for p in plan:                              # every other stage computed at the root
        fused_done = p.facts.role is Role.FUSED and p.hosts is not None
        if p.inline or p.tiled or p.tensor is not None or fused_done or p.located:
            continue
        if p.as_rows:
            p.hosts, later = _rows_sketch(s, an, p)
            attach_later += later
            continue
        if p.split_parts:
            p.hosts = _split_sketch(s, an, p)
            continue
        if p.dot_tile:
            p.hosts, later = _dot_sketch(s, an, p)
            attach_later += later
            continue
        if p.facts.role is Role.SCAN:
            p.hosts = annotate_scan(s[p.op], an.lanes(p.op), cores, p.vec_mult, p.scan_blocks,
                                    p.facts.vector_ok, an.machine.min_parallel_points)
            continue
        if p.facts.role is Role.SCATTER:
            p.hosts = apply_scatter(s, an, p)
            continue
        p.hosts = _plain(s, an, p, attached=False)
    for anchor, members in location_groups(an):
        attach_later += _place_group(s, an, plan, anchor, members, packed)
    for stage, parent, loop in attach_later:
        stage.compute_at(parent, loop)
    for p in plan:
        if p.prefetch and not p.inline:
            prefetch_inputs(s, s[p.op], p.prefetch)
        if p.nontemporal and not p.inline and s[p.op].attach is AttachKind.ROOT:
            s[p.op].nontemporal()
    return s


def prefetch_inputs(s, st, distance):
    """Rule 6's prefetch: at root stage *st*'s parallel loop, every tensor that an iteration
    reads and does not compute (an input, a stage computed at the root), *distance* iterations
    ahead.  Nothing for a stage without a parallel loop."""
    loop = next((iv for iv in st.leaf_iter_vars
                 if st.annotations.get(iv) is ForKind.PARALLEL), None)
    if loop is None or st.attach is not AttachKind.ROOT:
        return
    inside = [st]
    for host in inside:                      # grows: stages computed inside st's loops, nested
        inside += [o for o in s.stages if o.attach is AttachKind.AT and o.attach_stage is host]
    seen, reads = {id(x) for x in inside}, []

    def read_by(stage):
        for t in stage.op.input_tensors:
            src = s[t]
            if src.attach is AttachKind.INLINE:
                read_by(src)
            elif id(src) not in seen:
                seen.add(id(src))
                reads.append(t)
    for stage in inside:
        read_by(stage)
    for t in reads:
        st.prefetch(t, loop, distance)


def _inline_into_copies(s, plan) -> set:
    """Inline into the copies that tensorized sketches make at the root (AMX's packs) each
    packed operand that is injective; return the ids of the ops those copies read: the packed
    operands and, through the stages inlined into them, what they read.  These are computed at
    the root, never at a loop of another stage, which the copy would not be inside."""
    out, todo = set(), [t.op for p in plan for t in p.packed]
    while todo:
        op = todo.pop()
        if isinstance(op, PlaceholderOp) or id(op) in out:
            continue
        out.add(id(op))
        p = plan[op]
        if p.facts.role in (Role.INLINE, Role.FLEXIBLE) and not p.inline:
            s[op].compute_inline()
            p.inline = True
        if p.inline:
            todo += [t.op for t in op.input_tensors]
    return out


def _place_group(s, an, plan, anchor, members, packed=frozenset()):
    """Rule 5/1: the *members* anchored at root stage *anchor* get their loops, for the loop
    of *anchor* its plan chose, or for the root where there is none to take (the anchor's loops
    are not a fused tile's: its tiled producer has no accumulator level or is taken as rows).
    A member a tensorized sketch copies (ids of ops in *packed*) stays at the root, where the
    copy reads it.  Returns the (stage, parent, loop) to compute_at once every loop exists."""
    host = plan[anchor]
    loops = host.hosts or []
    producers = [x for x in plan if x.facts.fused_into is anchor or x.op is anchor]
    producer_level = [x.cache_level for x in producers if x.op is not anchor]
    rows_feed = any(x.as_rows for x in producers)         # read by a root rfactor stage
    if any(m.role is Role.ROW for m in members):
        loops = _row_hosts(s[anchor], loops)
    if host.at == "root" or not loops or 0 in producer_level or rows_feed:
        loop = None
    else:
        loop = loops[min(int(host.at), len(loops) - 1)]
    attach = []
    for m in members:
        p = plan[m.op]
        if p.inline:
            continue
        here = loop if id(m.op) not in packed else None
        _plain(s, an, p, attached=here is not None)
        if here is not None:
            attach.append((s[m.op], s[anchor], here))
            if p.rf_stage is not None:
                attach.append((p.rf_stage, s[anchor], here))
    return attach


def _row_hosts(st, loops):
    """The *loops* of stage *st* that may host row reductions: those not derived from its last
    data axis.  A row reduction (indexed by the other axes) computed inside a loop over the last
    axis would be recomputed for every iteration of it (once per column vector of a softmax)."""
    last = st.op.axis[-1] if st.op.axis else None
    derived = {id(last)}
    for rel in st.relations:                     # relations are in the order they were made
        if isinstance(rel, Split) and id(rel.parent) in derived:
            derived |= {id(rel.outer), id(rel.inner)}
        elif isinstance(rel, Fuse) and (id(rel.outer) in derived or id(rel.inner) in derived):
            derived.add(id(rel.fused))
    # a fused loop that includes the last axis still hosts (the seeds keep that axis's part
    # of it at one iteration); loops over the last axis alone do not
    fused = {id(rel.fused) for rel in st.relations if isinstance(rel, Fuse)}
    return [lp for lp in loops if id(lp) not in derived or id(lp) in fused]


def _rows_sketch(s, an, p):
    """A tiled stage taken as rows (y = A @ x): its final reduction (each row's lanes) runs in
    parallel over blocks of ``p.interleave`` rows, and each block's lanes are reduced at that
    block's loop, its rows side by side: one parallel region, not one for the lanes and another
    for the rows.  Returns the host loops and the (stage, parent, loop) to attach."""
    lanes, cores = an.lanes(p.op), an.machine.cores
    st = s[p.op]
    data = [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.DATA]
    rows = data[-1] if data and data[-1].extent > 1 else None
    hosts, loop = rows_in_blocks(st, p.rf_stage, rows, p.interleave, lanes, cores, p.vec_mult,
                                 an.machine.min_parallel_points)
    return hosts, ([(p.rf_stage, st, loop)] if loop is not None else [])


def _split_sketch(s, an, p):
    """A tiled stage with few rows, split-k: each part (a parallel iteration) streams its block
    of the weight, ``p.split_k_unroll`` weight rows at a time, adding them into one strip of
    ``p.vec_mult`` SIMD vectors of its partial sums after another, for each of the stage's few
    rows (which read that block of weight rows again, from cache); the stage itself adds the
    parts up, a plain stage.  Returns the stage's host loops."""
    lanes, cores = an.lanes(p.op), an.machine.cores
    rf = p.rf_stage
    part, *rows, vec = [iv for iv in rf.leaf_iter_vars if iv.kind is IterKind.DATA]
    k, *others = [iv for iv in rf.leaf_iter_vars if iv.kind is IterKind.REDUCE]
    ko, ki = rf.split(k, factor=p.split_k_unroll)
    width = lanes * p.vec_mult
    vo, vi = rf.split(vec, factor=width) if vec.extent > width else (None, vec)
    # the rows outside the strips: each strip's loop body is then the same whatever the rows,
    # and a symbolic row count (a batch of n) leaves it whole, as fast as at a static count
    rf.reorder(part, ko, *others, *rows, *([vo] if vo is not None else []), ki, vi)
    rf.vectorize(vi)
    rf.unroll(ki)
    if worth_threads(rf, (), an.machine.min_parallel_points):
        rf.parallel(part)
    return annotate_plain(s[p.op], lanes, cores, 1, attached=False,
                          min_points=an.machine.min_parallel_points)


def _dot_sketch(s, an, p):
    """A tiled stage ``C[i, j] = sum_k A[i, k] * B[j, k]`` computed as dot products: its lanes'
    stage (``C.rf[i, j, lane]``, reduced over the vectors of k) runs, per tile of
    ``p.dot_tile`` rows x columns, the vectors of k outermost and the tile's partial-sum vectors
    inside, unrolled, so each loaded vector of A serves the tile's columns and each of B its rows;
    the stage sums each output's lanes.  Its column blocks run in parallel (B streamed once, a
    block of its rows per iteration), the rows of a block serially inside.  Returns the stage's
    host loops and the (stage, parent, loop) to attach."""
    rows, cols = p.dot_tile
    st, rf = s[p.op], p.rf_stage
    i, j = [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.DATA]
    jo, ji = st.split(j, factor=cols)
    io, ii = st.split(i, factor=rows)
    lane = [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE]
    st.reorder(jo, io, ii, ji, *lane)
    if worth_threads(st, (rf,), an.machine.min_parallel_points):
        st.parallel(jo)
    ri, rj, rl = [iv for iv in rf.leaf_iter_vars if iv.kind is IterKind.DATA]
    ko = [iv for iv in rf.leaf_iter_vars if iv.kind is IterKind.REDUCE]
    rf.reorder(*ko, ri, rj, rl)
    rf.vectorize(rl)
    rf.unroll(rj)
    rf.unroll(ri)
    return [jo, io], [(rf, st, io)]


def _plain(s, an, p, attached):
    """Rule 6 on the stage of plan *p* and on its rfactor stage, if it has one."""
    lanes, cores = an.lanes(p.op), an.machine.cores
    if p.rf_stage is not None:
        annotate_plain(p.rf_stage, lanes, cores, 1, attached, lanes_last=True,
                       min_points=an.machine.min_parallel_points)
    return annotate_plain(s[p.op], lanes, cores, p.vec_mult, attached,
                          min_points=an.machine.min_parallel_points)


# rule 6: parallel, vectorize -------------------------------------------------------------------

def annotate_plain(st, lanes, cores, vec_mult=1, attached=False, lanes_last=False, interleave=1,
                   inside=(), min_points=MIN_PARALLEL_POINTS):
    """Reduction loops inside the data loops but outside the contiguous last data loop, which is
    split by ``lanes * vec_mult`` and vectorized, the outer data loops fused until they give
    every core several iterations and run in parallel (not for a stage computed inside
    another's loop).  *lanes_last*: the last data axis is an rfactor's lanes, contiguous by
    construction even where the read's index (a fused reduction) does not show it.
    *interleave* > 1 (with *lanes_last*): the data loop outside the lanes is split by it and its
    inner part runs inside the reduction loops, unrolled (rows reduced side by side).  *inside*:
    stages to be computed in its loops (their work counts toward the parallel loop's, which
    needs *min_points* in all: :func:`~.loops.worth_threads`).  Returns
    the data loops that may host other stages, outermost first."""
    leaves = list(st.leaf_iter_vars)
    data = [iv for iv in leaves if iv.kind is IterKind.DATA]
    red = [iv for iv in leaves if iv.kind is IterKind.REDUCE]
    vi, inner, rows = None, [], None
    if interleave > 1 and lanes_last and red and len(data) >= 2 \
            and data[-2].extent >= interleave:
        ro, rows = st.split(data[-2], factor=interleave)
        data = data[:-2] + [ro, data[-1]]
    if data and data[-1].extent >= 2 and data[-1] is st.op.axis[-1] \
            and (lanes_last or contiguous_last(st.op) or windowed_last(st.op, lanes)):
        v, width = data[-1], lanes * vec_mult
        vo = None
        if v.extent > width:
            vo, vi = st.split(v, factor=width)
        else:
            vi = v
        data = data[:-1]
        if vo is not None and red:
            inner = [vo]            # the reduction streams whole rows: i, k, j (not i, j, k)
        elif vo is not None:
            data = data + [vo]
    order = data + red + ([rows] if rows is not None else []) + inner \
        + ([vi] if vi is not None else [])
    if [id(x) for x in order] != [id(x) for x in leaves] and len(order) > 1:
        st.reorder(*order)
    if vi is not None:
        st.vectorize(vi)
    if rows is not None:
        st.unroll(rows)
    if attached:
        return data
    return parallel_outer(st, data, cores, inside, min_points)


def unroll_inner(st, loops, step):
    """MetaSchedule's max-unroll step: unroll the innermost *loops* ((IterVar, extent), inner
    last; the vectorized loop counts once) while the product of their extents stays within
    *step*."""
    prod = 1
    for iv, ext in reversed(loops):
        if st.annotations.get(iv) is ForKind.VECTORIZED or ext == 1:
            continue
        if prod * ext > step:
            break
        prod *= ext
        st.unroll(iv)


# rule 5: rfactor -------------------------------------------------------------------------------

def rfactor_rows(s, f, lanes, chunks=0):
    """Fuse the reduction loops, split them by the vector width and factor the lanes out as the
    last data axis of a new stage (reduced there over the rest); returns that stage.

    With *chunks*, the rest is first split into that many chunks, factored out as a data axis
    (a stage that combines the chunks' lanes), and the lanes are factored out of that stage:
    the returned stage then has data axes (rows, chunk, lane), for a parallel loop over the
    chunks and a vector loop over the lanes."""
    st = s[f.op]
    red = [iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE]
    k = st.fuse(*red) if len(red) > 1 else red[0]
    ko, ki = st.split(k, factor=lanes)
    if not chunks:
        return s[s.rfactor(f.op.output(), ki, factor_axis=len(f.spatial))]
    kp, _ = st.split(ko, factor=-(-ko.extent // chunks))
    per_chunk = s.rfactor(f.op.output(), kp, factor_axis=len(f.spatial))
    lane = [iv for iv in s[per_chunk].leaf_iter_vars if iv.kind is IterKind.REDUCE][-1]
    return s[s.rfactor(per_chunk, lane, factor_axis=len(f.spatial) + 1)]


def rfactor_parts(s, f, parts):
    """Split the first reduction loop of tiled stage *f* into *parts* and factor them out as
    the first data axis of a new stage (each part's partial sums over its share of the
    reduction); returns that stage.  *f* then adds the parts up."""
    st = s[f.op]
    first = next(iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE)
    ko, _ = st.split(first, nparts=parts)
    return s[s.rfactor(f.op.output(), ko, factor_axis=0)]


# rules 2, 3, 4: multi-level tiling, consumer fusion, packing -----------------------------------

def _split_levels(st, iv, inner):
    """Split *iv* into ``len(inner) + 1`` loops with inner extents *inner*; outer first."""
    loops, rest = [], iv
    for n in range(len(inner)):
        outer, rest = st.split(rest, factor=math.prod(inner[n:]))
        loops.append(outer)
    return loops + [rest]


def apply_tiling(s, an, p):
    """Rules 2-4 on the tiled stage of plan *p*: returns (the outer stage's loops that may host
    other stages, [(stage, parent, loop)] to compute_at once all loops exist)."""
    f, level, step = p.facts, p.cache_level, p.unroll
    ssz, rsz = p.spatial_tiles, p.reduce_tiles
    lanes, cores = an.lanes(f.op), an.machine.cores
    per_block = []                  # packed copies made inside the parallel outer loop
    for (src, dim, pos), mode in zip(f.packable, p.packs):
        if mode != PACK_NONE:
            factor = math.prod(ssz[pos][1 if level == 1 else 2:])
            # this stage's copy alone: another stage reading the operand (X in X @ W1 and
            # X @ W3) keeps its own, so each is computed in its own reader's loops
            copy = s.pack(src.output(), dim, factor, readers=[s[f.op]])
            annotate_plain(s[copy], lanes, cores, 1, attached=mode == PACK_BLOCK,
                           min_points=an.machine.min_parallel_points)
            if mode == PACK_BLOCK:
                if dim == len(src.shape) - 1:
                    read_in_source_order(s[copy])
                per_block.append(s[copy])
    if level == 0:
        st = s[f.op]
        lv = [_split_levels(st, iv, sz[1:]) if iv.extent > 1 else [iv] + [None] * 3
              for iv, sz in zip(st.op.axis, ssz)]
        rv = [_split_levels(st, iv, sz[1:]) if iv.extent > 1 else [iv, None]
              for iv, sz in zip(st.op.reduce_axis, rsz)]
        order = _level(lv, 0) + _level(lv, 1) + _level(rv, 0) + _level(lv, 2) + _level(rv, 1) \
            + _level(lv, 3)
        st.reorder(*order)
        outer, s1 = _parallel_outer(st, _level(lv, 0), _level(lv, 1), cores, (),
                                    an.machine.min_parallel_points)
        inner = _inner_extents(lv, ssz, rv, rsz, (2, 3), (1,), f.spatial, f.reduce)
        _vectorize_innermost(st, lv, f.vector_ok, ssz[-1][-1])
        unroll_inner(st, inner, step)
        return [outer] + s1, [(copy, st, outer) for copy in per_block]
    if f.fused_into is not None:
        out_st, in_st = s[f.fused_into], s[f.op]
    else:
        out_st = s[f.op]
        in_st = s[s.cache_write(f.op.output(), "local")]
    lv = [_split_levels(out_st, iv, sz[1:]) if iv.extent > 1 else [iv] + [None] * 3
          for iv, sz in zip(out_st.op.axis, ssz)]
    out_st.reorder(*(_level(lv, 0) + _level(lv, 1) + _level(lv, 2) + _level(lv, 3)))
    outer, s1 = _parallel_outer(out_st, _level(lv, 0), _level(lv, 1), cores, (in_st,),
                                an.machine.min_parallel_points)
    _vectorize_innermost(out_st, lv, f.vector_ok, ssz[-1][-1])
    attach = outer if level == 1 or not s1 else s1[-1]
    first = 1 if level == 1 else 2
    iv_l = [_split_levels(in_st, iv, sz[first + 1:]) if iv.extent > 1 else [iv]
            for iv, sz in zip(in_st.op.axis, ssz)]
    iv_l = [x + [None] * (4 - first - len(x)) for x in iv_l]
    rv = [_split_levels(in_st, iv, sz[1:]) if iv.extent > 1 else [None, iv]
          for iv, sz in zip(in_st.op.reduce_axis, rsz)]
    lvl_sz = [sz[first:] for sz in ssz]
    vector_ok, vsize = f.vector_ok, ssz[-1][-1]
    if p.vector_pos is not None:
        # another axis is the vector loop: innermost at every level of the accumulator's
        # loops, and innermost in its storage, so that its lanes are contiguous
        vp = p.vector_pos
        in_st.storage_order(*_axis_last(list(in_st.op.axis), vp))
        iv_l, lvl_sz = _axis_last(iv_l, vp), _axis_last(lvl_sz, vp)
        vector_ok, vsize = True, ssz[vp][-1]
    if level == 1:
        order = _level(iv_l, 0) + _level(rv, 0) + _level(iv_l, 1) + _level(rv, 1) + _level(iv_l, 2)
    else:
        order = _level(rv, 0) + _level(iv_l, 0) + _level(rv, 1) + _level(iv_l, 1)
    if len(order) > 1:
        in_st.reorder(*order)
    inner = _inner_extents(iv_l, lvl_sz, rv, rsz, (len(iv_l[0]) - 2, len(iv_l[0]) - 1), (1,),
                           f.spatial, f.reduce)
    _vectorize_innermost(in_st, iv_l, vector_ok, vsize)
    unroll_inner(in_st, inner, step)
    eligible = [outer] + (s1 if level == 2 else [])
    return eligible, [(copy, out_st, outer) for copy in per_block] + [(in_st, out_st, attach)]


def read_in_source_order(copy):
    """Reorder the loops of a block's copy of an operand packed along its last (contiguous)
    axis so that it reads the source row by row: ``W[k, j0:j0 + 64]`` for k outer, the panels
    inner.  In the copy's own order (panel outer, k inner) every step reads one row segment a
    whole row past the last; read in rows, the source is read in order and the block's few
    panels are written as parallel streams."""
    leaves = list(copy.leaf_iter_vars)
    panel = leaves[0]                                   # the packed axis's outer part
    rest = [iv for iv in leaves[1:] if iv.var in {a.var for a in copy.op.axis[1:-1]}]
    if rest:
        tail = leaves[1 + len(rest):]                   # the contiguous axis's loops
        copy.reorder(*rest, panel, *tail)


def _level(per_axis, n):
    return [loops[n] for loops in per_axis if loops[n] is not None]


def _parallel_outer(st, s0, s1, cores, inside=(), min_points=MIN_PARALLEL_POINTS):
    """Fuse the level-0 loops *s0* and run them in parallel; when they have fewer iterations
    than cores, the level-1 loops *s1* are fused in too (a tile choice never leaves the stage
    serial, unless it is too small to be worth threads, with the stages *inside* it:
    :func:`~.loops.worth_threads`).  Returns (the parallel loop, the level-1 loops still
    separate)."""
    loops = list(s0)
    if math.prod(iv.extent for iv in loops) < cores and s1:
        loops, s1 = loops + list(s1), []
    fused = st.fuse(*loops) if len(loops) > 1 else loops[0]
    if math.prod(iv.extent for iv in loops) >= 2 and worth_threads(st, inside, min_points):
        st.parallel(fused)
    return fused, list(s1)


def _vectorize_innermost(st, per_axis, ok, size):
    """Vectorize the innermost loop of the last axis of *per_axis* (its tile: *size*)."""
    last = per_axis[-1][-1]
    if ok and last is not None and size > 1:
        st.vectorize(last)


def _axis_last(per_axis, pos):
    """*per_axis* with the entry of axis *pos* moved to the end."""
    return per_axis[:pos] + per_axis[pos + 1:] + [per_axis[pos]]


def _inner_extents(lv, ssz, rv, rsz, s_levels, r_levels, spatial, reduce):
    """(loop, extent) of the loops a micro-kernel unrolls: spatial level s_levels[0], reduce
    r_levels, spatial s_levels[1], innermost last."""
    out = []
    a, b = s_levels
    for loops, sz in zip(lv, ssz):
        if loops[a] is not None:
            out.append((loops[a], sz[a]))
    for loops, sz in zip(rv, rsz):
        for n in r_levels:
            if loops[n] is not None:
                out.append((loops[n], sz[n]))
    for loops, sz in zip(lv, ssz):
        if loops[b] is not None:
            out.append((loops[b], sz[b]))
    return out
