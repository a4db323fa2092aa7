"""Whole-kernel features (``g_``): trip-weighted totals over the replica groups and the counts of
the walk; then the blocks of the main group and of the second one."""
from __future__ import annotations

from ....ir.stmt import ForKind
from .block import write_block
from .layout import N_ACCESSES_MAIN, N_ACCESSES_SECOND, N_LOOPS_MAIN, N_LOOPS_SECOND
from .walk import elem_bytes


def write_kernel(vals, func, nest, groups):
    """Write the ``g_`` values of *func* (walked as *nest*, a
    :class:`~einloop.autotune.model.feature.walk.NestScan`, grouped as *groups*) and the
    ``m_``/``s_`` blocks into *vals*."""
    total_cost = sum(g.cost for g in groups)
    total_flops = sum(g.flops for g in groups)
    vec_fl = par_fl = 0
    st_tot = st_vec = st_par = st_if = 0
    bytes_st = bytes_ld = intr = sel = 0
    max_par = 0
    for g in groups:
        kinds = {lp.kind for lp in g.chain}
        tt = g.trip_total
        rep = g.rep
        st_tot += tt
        if ForKind.VECTORIZED in kinds:
            vec_fl += g.flops
            st_vec += tt
        if ForKind.PARALLEL in kinds:
            par_fl += g.flops
            st_par += tt
            pe = 1
            for lp in g.chain:
                if lp.kind is ForKind.PARALLEL:
                    pe *= lp.extent
            max_par = max(max_par, pe)
        if rep.n_if:
            st_if += tt
        bytes_st += tt * elem_bytes(rep.buffer.dtype)
        bytes_ld += tt * sum(elem_bytes(ld.buffer.dtype) for ld in rep.loads)
        intr += tt * rep.intr
        sel += tt * rep.sel
    arg_bytes = sum(b.size * elem_bytes(b.dtype) for b in func.args)
    totals = {
        "flops": total_flops,
        "flops_vectorized_frac": vec_fl / total_flops if total_flops else 0,
        "flops_parallel_frac": par_fl / total_flops if total_flops else 0,
        "stores_vectorized_frac": st_vec / st_tot if st_tot else 0,
        "stores_parallel_frac": st_par / st_tot if st_tot else 0,
        "stores_guarded_frac": st_if / st_tot if st_tot else 0,
        "n_store_stmts": nest.n_store_stmts,
        "n_groups": len(groups),
        "n_loops": nest.n_loops,
        "max_depth": nest.max_depth,
        "n_parallel_loops": nest.n_par,
        "has_parallel": int(nest.n_par > 0),
        "max_parallel_extent": max_par,
        "n_vectorized_loops": nest.n_vec,
        "max_vector_lanes": nest.max_lanes if nest.n_vec else 0,
        "n_unrolled_groups": sum(1 for g in groups if g.R > 1),
        "max_replicas": max((g.R for g in groups), default=0),
        "n_stages": len({id(g.rep.buffer) for g in groups}),
        "n_allocates": nest.n_alloc,
        "local_bytes": nest.local_bytes,
        "local_bytes_max": nest.local_max,
        "n_temps": len(func.temps),
        "temp_bytes": sum(b.size * elem_bytes(b.dtype) for b in func.temps),
        "arg_bytes": arg_bytes,
        "bytes_stored": bytes_st,
        "bytes_loaded": bytes_ld,
        "arith_intensity": total_flops / arg_bytes if arg_bytes else 0,
        "intrinsic_calls": intr,
        "selects": sel,
        "n_ifs": nest.n_ifs,
        "n_lets": nest.n_lets,
    }
    for k, v in totals.items():
        vals["g_" + k] = v
    if not groups:
        return
    order = sorted(range(len(groups)), key=lambda i: -groups[i].cost)
    main = groups[order[0]]
    vals["g_main_cost_frac"] = main.cost / total_cost if total_cost else 0
    vals["g_main_flops_frac"] = main.flops / total_flops if total_flops else 0
    write_block(vals, "m", main, N_LOOPS_MAIN, N_ACCESSES_MAIN, total_cost)
    for i in order[1:]:
        if groups[i].rep.buffer is not main.rep.buffer:
            write_block(vals, "s", groups[i], N_LOOPS_SECOND, N_ACCESSES_SECOND, total_cost)
            break
