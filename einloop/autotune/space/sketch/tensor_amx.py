"""The AMX tensorized sketch: a GEMM-like reduction computed by einloop's AMX intrinsics
(:mod:`einloop.codegen.amx`), 32 x 32 output blocks at a time.

A stage ``C[..., i, j] = sum(k) A[..., i, k] * B[..., k, j]`` (u8 x s8 -> s32, or bf16 x bf16
-> f32; batched matmul's batch axes outside) is scheduled as ``examples/gemm_amx.py`` is by
hand, with the schedule's own primitives:

- A is read through ``s.pack`` by 16 on its row dimension, then by ``E`` (the K values of a
  64-byte tile row) on ``k``: ``[.., M, K] -> [K/E, M/16, .., 16, E]``, so each tile the
  intrinsic loads is a dense kilobyte (the intrinsic takes strides, so where the tiles lie is
  free; dense tiles load faster than rows a K block apart);
- B through packs: by 16 along ``j``, by the group ``g`` (4 int8, 2 bf16 values of ``k``
  side by side) along ``k``, then by 1 along the panel axis and each batch axis (a pack by 1
  moves an axis to the front): ``[.., K, N] -> [.., N/16, K/g, 16, g, 1, ..]``, a 16-column
  panel contiguous over K in the tiles' layout (each tile a dense kilobyte); all but the last
  copy are inlined into it, so B is read once;
- a 32 x 32 accumulator (``cache_write``, or the stage itself under a fused elementwise
  consumer) is computed per output block; its K loop is split by ``kb``, and the intrinsic's
  loops ``(2, 16, 2, 16)`` (the block's rows and columns by 16) and ``(kb/E, 16, g)``
  tensorized; the first K block zeroes the accumulator tiles (the intrinsic's reset form);
- the output blocks loop in the knob's :class:`~.tensor_apply.TileOrder` (row blocks outside:
  a block of A stays in cache over the columns; or column panels outside), the column blocks
  in groups of the panel knob's (a group of B's panels stays in cache while every row block
  passes over it, a block of A is reused across the group: for bf16 at K = 1024 neither all of
  B nor a row block of A fits a core's cache), the outer loops fused into the parallel loop.

The sketch needs the row and column extents to be multiples of 32 and ``K`` of ``kb`` (an
accumulator clamped at a partial block would not start where the packed tiles do); where they
are not, or the tile does not match, it is not tensorized and the plan records why
(:attr:`~.plan.StagePlan.tensor_skipped`), which the rule's probe turns into a skipped
candidate, never an error.
"""
from __future__ import annotations

from types import SimpleNamespace

from ....codegen import amx
from ....ir.visit import free_vars, reads_of
from ....te.tensor_intrin import lookup
from ....schedule.tensorize import Mismatch, body_pairs, mismatch
from .loops import parallel_outer
from .tensor_apply import _tile_loops, weight_read

#: the AMX block: output rows and columns per intrinsic call
BLOCK = 32
#: rows of a tile register (and columns of its 32-bit results); a tile row is 64 bytes
TILE = 16
#: the K depths offered, in bytes of a row of A (the intrinsic's ``kb`` elements)
KDEPTH_BYTES = (128, 256, 512, 1024)


def offered_for(target) -> tuple:
    """The AMX intrinsics the rule offers on *target* (none without AMX), int8 then bf16,
    each at the K depths of :data:`KDEPTH_BYTES`."""
    out = []
    for kind, size in (("u8s8", 1), ("bf16", 2)):
        table = amx.for_target(target, kind)
        out += [table[b // size] for b in KDEPTH_BYTES if b // size in table]
    return tuple(out)


#: the K depth (bytes of a row of A) seeds take: a call's A and B tiles (2 x 8 kilobytes
#: each) fit the 48-kilobyte level-1 cache of Sapphire Rapids, with room for C
SEED_KDEPTH_BYTES = 512


def seed_intrinsic(names) -> str:
    """The intrinsic a seed takes among *names* (offered, best first): of the AMX ones of the
    first one's kind, the deepest up to :data:`SEED_KDEPTH_BYTES`; else the first."""
    first = lookup(names[0])
    if not amx.is_amx(first):
        return names[0]
    fits = [n for n in names if amx.is_amx(lookup(n))
            and lookup(n).op.output_dtype() == first.op.output_dtype()
            and _kdepth_bytes(lookup(n)) <= SEED_KDEPTH_BYTES]
    return max(fits, key=lambda n: amx.k_depth(lookup(n)), default=names[0])


def _kdepth_bytes(intrin) -> int:
    """Bytes of a row of A that one call of AMX intrinsic *intrin* reduces over."""
    return amx.k_depth(intrin) * 4 // amx.group(intrin)


def is_amx(intrin) -> bool:
    """Does the tensorize knob's *intrin* take this sketch?"""
    return amx.is_amx(intrin)


def row_read(op):
    """``(tensor, row dim, k dim)`` of the operand of reduction *op* indexed by its row axis
    (second last data axis) and last reduction axis, each alone in one dimension and not by
    the column axis: the A that is packed on ``k``.  None when there is not exactly one."""
    if len(op.axis) < 2 or not op.reduce_axis:
        return None
    i, j, k = op.axis[-2].var, op.axis[-1].var, op.reduce_axis[-1].var
    found = []
    for r in reads_of(op.body):
        used = [free_vars(ix) for ix in r.indices]
        if any(j in u for u in used):
            continue
        idim = [d for d, u in enumerate(used) if i in u]
        kdim = [d for d, u in enumerate(used) if k in u]
        if len(idim) != 1 or len(kdim) != 1 or r.indices[idim[0]] is not i \
                or r.indices[kdim[0]] is not k:
            return None
        found.append((r.tensor, idim[0], kdim[0]))
    return found[0] if len(found) == 1 else None


def shape_reason(f, intrin):
    """Why stage facts *f* cannot take the AMX sketch with *intrin* (its expression, extents,
    operands), or None."""
    try:                         # what it computes first (dtypes, casts), then the shapes
        body_pairs(SimpleNamespace(name=f.name), f.op.body, intrin)
    except Mismatch as e:
        return str(e)
    kb = amx.k_depth(intrin)
    rows, cols, k = f.spatial[-2].extent, f.spatial[-1].extent, f.reduce[-1].extent
    if rows % BLOCK or cols % BLOCK or k % kb:
        return (f"AMX blocks need rows ({rows}) and columns ({cols}) that are multiples of "
                f"{BLOCK} and a reduction ({k}) that is a multiple of the K depth {kb}")
    if row_read(f.op) is None:
        return (f"no operand of {f.name} is indexed by its row axis and its last reduction "
                "axis alone (the A packed into the AMX tiles)")
    return None


def apply_amx(s, an, p, pack_weight_fn=None):
    """The AMX sketch of plan *p* on schedule *s*: returns (the loops that may host other
    stages, [(stage, parent, loop)] to compute_at once every loop exists), as
    :func:`~.tensor_apply.apply_tensorized` does."""
    tp, f, cores = p.tensor, p.facts, an.machine.cores
    intrin = tp.intrin
    why = shape_reason(f, intrin)
    if why is not None:
        p.tensor_skipped = why
        return _untensorized(s, an, p)
    kb, g = amx.k_depth(intrin), amx.group(intrin)
    min_points = an.machine.min_parallel_points
    p.packed = (row_read(f.op)[0], weight_read(f.op)[0])
    _pack_rows(s, f.op, TILE * g, cores, min_points)
    _pack_panels(s, f.op, g, cores, min_points)
    if f.fused_into is not None:
        out_st, in_st = s[f.fused_into], s[f.op]
    else:
        out_st = s[f.op]
        in_st = s[s.cache_write(f.op.output(), "local")]
    *outer, row, col = out_st.op.axis
    io, jo, ii, ji = out_st.tile(row, col, BLOCK, BLOCK)
    tile = _tile_loops(out_st, jo, io, tp)
    out_st.reorder(*outer, *tile, ii, ji)
    out_st.vectorize(ji)
    loops = parallel_outer(out_st, [*outer, *tile], cores, (in_st,), min_points)
    p.tensor_skipped = _tensorize_block(in_st, intrin, kb, g)
    return loops[:1], [(in_st, out_st, loops[-1])]


def _untensorized(s, an, p):
    """A stage the sketch does not fit: its outer data loops parallel, nothing else (the
    config is exact and slow; the tuner measures and drops it)."""
    st = s[p.facts.op]
    loops = parallel_outer(st, list(st.op.axis[:-1]), an.machine.cores,
                           min_points=an.machine.min_parallel_points)
    return loops[:1], []


def _pack_rows(s, op, row, cores, min_points):
    """A read through ``[K/row, M/16, .., 16, row]`` (each tile of 16 rows x *row* K values
    dense), parallel; the first copy inlined into the second."""
    tensor, idim, kd = row_read(op)
    by_rows = s.pack(tensor, idim, TILE, readers=[s[op]])     # [M/16, .., K, .., 16]
    packed = s.pack(by_rows, 1 + (kd if kd < idim else kd - 1), row)
    s[by_rows].compute_inline()
    st = s[packed]
    parallel_outer(st, list(st.leaf_iter_vars), cores, min_points=min_points)


def _pack_panels(s, op, g, cores, min_points):
    """B read through ``[.., N/16, K/g, 16, g, 1, ..]`` (a 16-column panel dense over K in
    the tiles' layout): packed by 16 on ``j``, by *g* on ``k``, then by 1 on the panel axis
    and on each batch axis, last first (a pack by 1 moves its axis to the front); all but the
    last copy inlined."""
    tensor, jd, kd = weight_read(op)
    by_cols = s.pack(tensor, jd, TILE, readers=[s[op]])        # [N/16, .., K, .., 16]
    kd_now = 1 + (kd if kd < jd else kd - 1)
    grouped = s.pack(by_cols, kd_now, g)                        # [K/g, N/16, .., 16, g]
    copies = [by_cols, grouped, s.pack(grouped, 1, 1)]          # [N/16, K/g, .., 16, g, 1]
    batch = len(tensor.shape) - 2                               # the other dims, to the front
    for _ in range(batch):
        copies.append(s.pack(copies[-1], batch + 1, 1))
    for c in copies[:-1]:
        s[c].compute_inline()
    st = s[copies[-1]]
    parallel_outer(st, list(st.leaf_iter_vars), cores, min_points=min_points)


def _tensorize_block(st, intrin, kb, g):
    """The accumulator *st*'s loops: other data and reduction loops, then K by blocks of *kb*
    outside the 32 x 32 block, whose loops by tiles of 16 and the ``(kb/E, 16, g)`` K loops
    are tensorized if :func:`mismatch` finds nothing.  Returns the mismatch's reason, or
    None."""
    *others, row, col = st.op.axis
    *red_others, k = st.op.reduce_axis
    mo, no, mc, nc = st.tile(row, col, BLOCK, BLOCK)
    mt, mi = st.split(mc, factor=TILE)
    nt, ni = st.split(nc, factor=TILE)
    kt, kr = st.split(k, factor=kb)
    ks, ke = st.split(kr, factor=TILE * g)
    kq, kg = st.split(ke, factor=g)
    st.reorder(*others, mo, no, *red_others, kt, mt, mi, nt, ni, ks, kq, kg)
    why = mismatch(st, mt, intrin)
    if why is None:
        st.tensorize(mt, intrin)
    return why
