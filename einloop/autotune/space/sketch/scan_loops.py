"""The scan rule's loops: how the auto-scheduler schedules a scan (:mod:`einloop.te.scan`).

A scan's steps must run in order for every spatial point, so its scan loop stays serial and
whole; everything else is free (:mod:`einloop.schedule.scan`).  The rule makes the schedule
that streams at copy bandwidth:

* scanning along an outer axis (a cumulative sum down the rows), the contiguous last axis is
  cut into a few wide blocks (``blocks`` per core), the blocks and the other spatial axes run
  in parallel, and inside a block each step is one contiguous run of vectors
  (``parallel i.outer, t, i.inner.outer, vectorized i.inner.inner``): a block's previous step
  stays in cache while the next streams in.  Narrow blocks (a few vectors) would cross a page
  at every step and stream at half that speed;
* scanning along the last axis (a cumulative sum along rows), the rows run in parallel, each a
  serial chain;
* a scan whose step reads other spatial points of the step before (a stencil recurrence) keeps
  its scan loop outermost, the spatial loops parallel and vectorized inside it.
"""
from __future__ import annotations

import math

from ....schedule.scan import is_partner, reads_other_points
from .loops import MIN_PARALLEL_POINTS, worth_threads

#: parallel blocks of a scan's spatial axes per core: one wide block each streams best; more
#: balance a machine whose cores are shared; searched
SCAN_BLOCKS = (1, 2, 4)


def annotate_scan(st, lanes, cores, vec_mult=1, blocks=1, vector_ok=True,
                  min_points=MIN_PARALLEL_POINTS) -> list:
    """Schedule scan stage *st* as the module says; returns the loops that may host other
    stages (none: the rules compute nothing at a scan's loops)."""
    if is_partner(st):
        return []                   # its stores are in the leader's loops
    t = st.scan_axis
    cross = reads_other_points(st.origin_op)
    others = [iv for iv in st.leaf_iter_vars if iv is not t]
    last = st.op.axis[-1]
    inner = []
    if vector_ok and others and others[-1] is last and isinstance(last.extent, int) \
            and last.extent >= 2:
        width = lanes * vec_mult
        block = last.extent if cross else _block(last.extent, cores * blocks, width)
        if block < last.extent:
            others[-1], vi = st.split(last, factor=block)
        else:
            others, vi = others[:-1], last
        inner = list(st.split(vi, factor=width)) if vi.extent > width else [vi]
    order = [t] + others + inner if cross else others + [t] + inner
    if [id(x) for x in order] != [id(x) for x in st.leaf_iter_vars]:
        st.reorder(*order)
    if inner:
        st.vectorize(inner[-1])
    par = others or (inner[:1] if cross and len(inner) == 2 else [])
    extents = [iv.extent for iv in par]
    if par and all(isinstance(e, int) for e in extents) and math.prod(extents) >= 2 \
            and worth_threads(st, (), min_points):
        st.parallel(st.fuse(*par) if len(par) > 1 else par[0])
    return []


def _block(extent, nblocks, width):
    """Columns per parallel block: *extent* in *nblocks* parts, rounded up to whole vectors."""
    per = -(-extent // nblocks)
    return min(extent, -(-per // width) * width)
