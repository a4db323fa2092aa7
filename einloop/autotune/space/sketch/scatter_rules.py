"""The auto-scheduler on scatter stages (:mod:`einloop.te.scatter`): when the rule fires, and
how a plan becomes steps.

A scatter is computed at the root.  Its free axes are ordinary data loops: the outer ones fused
and parallel, the last one vectorized where it indexes the output's last dimension (contiguous
stores).  Its domain loops run serially inside them, or, where :func:`privatizable`, the first
is split into private copies of the output (``s.rfactor`` of a scatter, Halide's rfactor of a
histogram): the copies are the parallel loop of the new stage, and the stage itself adds them
up, parallel over the output.  The knobs are defined in :mod:`.rules` (``knobs_scatter``).
"""
from __future__ import annotations

import math

from ....ir import dtypes
from ....te.tensor import IterKind
from .analysis import Role
from .loops import MIN_PARALLEL_POINTS, parallel_outer

#: private copies of a scatter's output per core, each updated by one block of its domain in
#: parallel (0: the domain runs serially and only the free axes are parallel); searched
PRIVATE_COPIES_PER_CORE = (0, 1, 2)
#: a scatter's domain is privatized only if every copy gets at least this many of its first
#: axis's elements: a copy costs an initialisation and a combine of the whole output
PRIVATE_MIN_PART = 256


def fires_scatter(an):
    """The scatter stages (:class:`~.analysis.Role` SCATTER)."""
    return [f for f in an.stages() if f.role is Role.SCATTER]


def privatizable(an, f) -> bool:
    """May scatter *f*'s domain run in parallel on private copies of its output?  With several
    cores, a first domain axis long enough for every copy (:data:`PRIVATE_MIN_PART`), and the
    copies of all cores within the last-level cache."""
    cores = an.machine.cores
    if cores < 2 or not f.reduce:
        return False
    nbytes = math.prod(f.op.shape) * dtypes.bits(f.op.dtype) // 8
    most = max(PRIVATE_COPIES_PER_CORE) * cores
    return f.reduce[0].extent >= most * PRIVATE_MIN_PART and most * nbytes <= an.machine.cache_bytes


def scatter_vector_ok(f) -> bool:
    """Does the last free axis of scatter *f* index the output's last dimension (contiguous
    stores when vectorized)?"""
    return bool(f.spatial) and f.op.free_dims[-1] == len(f.op.shape) - 1


def apply_scatter(s, an, p):
    """Scatter plan *p* applied to schedule *s*: its private copies, if any, then the loops of
    both stages.  Returns the scatter's data loops (outermost first)."""
    lanes, cores = an.lanes(p.op), an.machine.cores
    st = s[p.op]
    if p.private_copies:
        first = next(iv for iv in st.leaf_iter_vars if iv.kind is IterKind.REDUCE)
        outer, _ = st.split(first, nparts=p.private_copies)
        p.rf_stage = s[s.rfactor(p.op.output(), outer)]
        annotate_scatter(p.rf_stage, lanes, cores, p.vec_mult, an.machine.min_parallel_points)
    return annotate_scatter(st, lanes, cores, p.vec_mult, an.machine.min_parallel_points)


def annotate_scatter(st, lanes, cores, vec_mult=1, min_points=MIN_PARALLEL_POINTS):
    """Scatter stage *st*'s loops: the domain inside the free loops, except the last free loop
    where it indexes the output's last dimension, which is split by ``lanes * vec_mult`` and
    vectorized innermost; the outer free loops fused until they give every core several
    iterations, and parallel.  Returns the free loops outside the domain."""
    leaves = list(st.leaf_iter_vars)
    data = [iv for iv in leaves if iv.kind is IterKind.DATA]
    domain = [iv for iv in leaves if iv.kind is IterKind.REDUCE]
    inner = []
    op = st.op
    if data and data[-1] is op.axis[-1] and op.free_dims[-1] == len(op.shape) - 1 \
            and data[-1].extent >= 2:
        v, width = data.pop(), lanes * vec_mult
        inner = list(st.split(v, factor=width)) if v.extent > width else [v]
    order = data + domain + inner
    if [id(x) for x in order] != [id(x) for x in leaves] and len(order) > 1:
        st.reorder(*order)
    if inner:
        st.vectorize(inner[-1])
    return parallel_outer(st, data, cores, min_points=min_points)
