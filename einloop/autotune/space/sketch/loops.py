"""Loop annotations shared by the plans of several stage kinds (plain, scatter)."""
from __future__ import annotations

import math

#: a stage whose whole iteration domain (data and reduction loops together) has fewer points
#: than this runs serially.  Starting a thread team and joining it costs a few microseconds on
#: an idle machine (OpenMP fork-join, as EPCC's syncbench measures it on 2-64 threads), and a
#: scheduler slice (1-4 ms) when a core is shared with another busy thread, since the join
#: waits for every team thread to run once.  A domain of 2^15 points runs serially in about
#: 3-30 us (a point is one multiply-add or one element, 1-8 a cycle at 1-4 GHz), so a second
#: core could save at most half of that: about the fork-join cost of an idle machine, and a
#: thousandth of a shared core's slice.  Stages this small are the gradients, norms and small
#: layers of a model at small sizes, called many times (a gradient check made thousands of
#: calls of such kernels at 9 ms each with a busy second core, 30 us each serially).
MIN_PARALLEL_POINTS = 1 << 15


def worth_threads(st, inside=(), min_points=MIN_PARALLEL_POINTS) -> bool:
    """Whether a parallel loop of stage *st*, with the stages *inside* computed within it (a
    cache_write's tile, an rfactor's lanes), has work enough for a thread team: False only when
    their iteration domains are all of known extents and have fewer than
    *min_points* points in all (a symbolic extent may be large at the call)."""
    points = 0
    for stage in (st, *inside):
        op = stage.op
        extents = [iv.extent for iv in (*op.axis, *getattr(op, "reduce_axis", ()))]
        if not all(isinstance(e, int) for e in extents):
            return True
        points += math.prod(extents)
    return points >= min_points


def parallel_outer(st, data, cores, inside=(), min_points=MIN_PARALLEL_POINTS):
    """Fuse the outer data loops *data* of stage *st* until they give every core several
    iterations (four: a little slack for uneven ends), and make the fused loop parallel (not
    for a stage too small to be worth a thread team, with the stages *inside* computed in its
    loops: :func:`worth_threads`).
    Returns the loops left outside what follows: the parallel one, then the rest of *data*;
    *data* unchanged when even all of them are one iteration."""
    if not data or not worth_threads(st, inside, min_points):
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
