"""The detailed block of one replica group (``m_``: the most expensive one, ``s_``: the most
expensive one storing to another buffer): scalars, loop slots innermost first, and access slots
(the store first, then the loads by bytes touched)."""
from __future__ import annotations

from ....ir.expr import Scope
from ....ir.stmt import ForKind
from .layout import _VIRTUAL, _WIN_NAMES, _WINDOWS


def write_block(vals, prefix, g, n_loops, n_acc, total_cost):
    """Write block *prefix* of group *g* (a :class:`~einloop.autotune.model.feature.groups.Group`)
    into *vals*, with *n_loops* loop slots and *n_acc* access slots."""
    store = g.accesses[0]
    _scalars(vals, prefix, g, n_loops, total_cost)
    _loop_slots(vals, prefix, g.chain, g.accesses, store, g.vpos, n_loops)
    _access_slots(vals, prefix, g.chain, g.accesses, store, g.vpos, n_acc)


def _scalars(vals, prefix, g, n_loops, total_cost):
    rep, chain, accesses = g.rep, g.chain, g.accesses
    n = len(chain)
    vals[f"{prefix}_present"] = 1
    vals[f"{prefix}_trip"] = g.trip
    vals[f"{prefix}_trip_total"] = g.trip_total
    vals[f"{prefix}_replicas"] = g.R
    vals[f"{prefix}_chain_len"] = n
    vals[f"{prefix}_flops_per_iter"] = rep.flops
    vals[f"{prefix}_intrinsics_per_iter"] = rep.intr
    vals[f"{prefix}_loads_per_iter"] = len(rep.loads)
    vals[f"{prefix}_selects_per_iter"] = rep.sel
    store = accesses[0]
    vals[f"{prefix}_is_update"] = int(store.is_update)
    local = rep.buffer.scope is Scope.LOCAL
    vals[f"{prefix}_store_is_local"] = int(local)
    eb = store.eb
    vals[f"{prefix}_elem_bytes"] = eb
    lanes = 1
    for lp in chain:
        if lp.kind is ForKind.VECTORIZED:
            lanes = max(lanes, lp.extent)
    vals[f"{prefix}_vector_lanes"] = lanes
    vals[f"{prefix}_vector_bytes"] = lanes * eb
    if local:
        # distinct store offsets over the (virtual) unrolled loop; times any real unrolled
        # loop left in the chain (IR mixing expanded and kept unrolls) the store moves in
        n_accum = len(store.offsets)
        for pos, lp in enumerate(chain):
            if lp.kind is ForKind.UNROLLED and store.coefs[pos] != 0:
                n_accum *= lp.extent
        vals[f"{prefix}_n_accumulators"] = n_accum
        vals[f"{prefix}_accumulator_lanes"] = n_accum * lanes
        vals[f"{prefix}_accumulator_bytes"] = n_accum * lanes * eb
    vals[f"{prefix}_n_ifs"] = rep.n_if
    par, first_par = 1, None
    for i, lp in enumerate(chain):
        if lp.kind is ForKind.PARALLEL:
            par *= lp.extent
            if first_par is None:
                first_par = i
    vals[f"{prefix}_parallel_extent"] = par if first_par is not None else 0
    vals[f"{prefix}_loops_inside_parallel"] = 0 if first_par is None else n - first_par - 1
    outer = 1
    for lp in chain[:max(0, n - n_loops)]:
        outer *= lp.extent
    vals[f"{prefix}_outer_extent"] = outer
    vals[f"{prefix}_cost_frac"] = g.cost / total_cost if total_cost > 0 else 0
    vals[f"{prefix}_flops"] = g.flops
    if n:
        vals[f"{prefix}_working_set_all"] = sum(a.fp[0][0] * a.eb for a in accesses)


def _stride(a, pos, vpos):
    """Stride of access *a* along chain position *pos* (the virtual loop's at *vpos*)."""
    return a.vstride if pos == vpos else a.coefs[pos]


def _loop_slots(vals, prefix, chain, accesses, store, vpos, n_loops):
    n = len(chain)
    inner_work = 1
    for i in range(min(n, n_loops)):
        pos = n - 1 - i
        lp = chain[pos]
        inner_work *= lp.extent
        p = f"{prefix}_loop{i}_"
        vals[p + "present"] = 1
        vals[p + "extent"] = lp.extent
        k = lp.kind
        vals[p + ("unrolled" if k is _VIRTUAL else k.value)] = 1
        vals[p + "depth"] = pos
        vals[p + "inner_work"] = inner_work
        vals[p + "store_stride"] = _stride(store, pos, vpos)
        vals[p + "n_invariant"] = sum(1 for a in accesses if _stride(a, pos, vpos) == 0)
        vals[p + "ws_bytes"] = sum(a.fp[pos][0] * a.eb for a in accesses)
        vals[p + "ws_lines"] = sum(a.fp[pos][2] for a in accesses)


def _access_slots(vals, prefix, chain, accesses, store, vpos, n_acc):
    n = len(chain)
    vec_pos = next((i for i in range(n - 1, -1, -1) if chain[i].kind is ForKind.VECTORIZED),
                   None)
    ser_pos = next((i for i in range(n - 1, -1, -1) if chain[i].kind is ForKind.SERIAL), None)

    def stride_at(a, pos):
        return 0.0 if pos is None else _stride(a, pos, vpos)

    def size_key(a):
        if not n:
            return (0.0, 0.0)
        return (-a.fp[0][0] * a.eb, -a.fp[max(0, n - 2)][0] * a.eb)
    loads = sorted(accesses[1:], key=size_key)
    for i, a in enumerate(([store] + loads)[:n_acc]):
        p = f"{prefix}_acc{i}_"
        vals[p + "present"] = 1
        vals[p + "is_store"] = int(a.is_store)
        vals[p + "is_update"] = int(a.is_update)
        vals[p + a.buffer.scope.value] = 1
        vals[p + "elem_bytes"] = a.eb
        vals[p + "exact"] = int(a.exact)
        vals[p + "multiplicity"] = a.mult
        vals[p + "stride_inner"] = stride_at(a, n - 1 if n else None)
        sv = stride_at(a, vec_pos)
        vals[p + "stride_vec"] = sv
        vals[p + "stride_serial"] = stride_at(a, ser_pos)
        if vec_pos is not None:
            vals[p + ("vec_contig" if abs(sv) == 1 else
                      "vec_broadcast" if sv == 0 else "vec_gather")] = 1
        if not n:
            for w in _WIN_NAMES:
                vals[p + f"bytes_{w}"] = a.eb
                vals[p + f"reuse_{w}"] = 1
            continue
        for w, wn in zip(_WINDOWS, _WIN_NAMES):
            s = 0 if w is None else max(0, n - w)
            distinct, iters, lines = a.fp[s]
            vals[p + f"bytes_{wn}"] = distinct * a.eb
            vals[p + f"reuse_{wn}"] = iters / distinct
            if wn in ("w2", "all"):
                vals[p + f"lines_{wn}"] = lines
