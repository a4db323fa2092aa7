"""Loop annotations shared by the plans of several stage kinds (plain, scatter)."""
from __future__ import annotations


def parallel_outer(st, data, cores):
    """Fuse the outer data loops *data* of stage *st* until they give every core several
    iterations (four: a little slack for uneven ends), and make the fused loop parallel.
    Returns the loops left outside what follows: the parallel one, then the rest of *data*;
    *data* unchanged when even all of them are one iteration."""
    if not data:
        return data
    k, prod = 0, 1
    while k < len(data) and prod < 4 * cores:
        prod *= data[k].extent
        k += 1
    if prod < 2:
        return data
    fused = st.fuse(*data[:k]) if k > 1 else data[0]
    st.parallel(fused)
    return [fused] + data[k:]
