"""Software prefetch: the statement that brings the next iteration's reads into the cache.

A loop whose iterations each read a fresh block of a large buffer (a row of a softmax, a tile
of an input) waits for memory at the start of every iteration when the data is not in cache:
the hardware prefetchers stop at page boundaries and track few streams, so the first lines of
each block miss, and while the iteration computes nothing is fetched.  A prefetch at the top of
iteration ``i`` of what iteration ``i + offset`` reads overlaps that wait with the work of the
iterations in between (Halide's ``Func::prefetch``, TVM's ``s[B].prefetch``).

The region is found on the loop IR of the body, after lowering: the flat index range of every
read of the buffer, the body's inner loops sweeping their ranges and the loop variable fixed
(:func:`~einloop.arith.bounds.region_of`), the reads' ranges united when they lie a constant
apart.  A region that is not such a range, or larger than PREFETCH_MAX_BYTES, is not prefetched:
a prefetch is a hint, and one that large would evict what the current iteration is using.
Nor is a region that every iteration reads alike (a bias vector): it is cached after the first.
"""
from __future__ import annotations

from ...arith import free_vars, region_of, simplify, substitute, walk
from ...ir import dtypes
from ...ir import expr as E
from ...ir.stmt import IfThenElse, Prefetch
from ...ir.visit import StmtVisitor

#: the most bytes one iteration prefetches.  Why it holds on other machines: the prefetched
#: lines must stay in cache for up to *offset* iterations while the current one works; 16 KiB
#: is half the smallest L1 data cache of x86-64 cores since 2008 and of current AArch64 cores
#: (32 KiB), and far below any L2, so the block arrives and stays
PREFETCH_MAX_BYTES = 16 * 1024


class _Reads(StmtVisitor):
    """The flat indices of every read of *buffer* in a statement, each with the ranges of the
    loops around it inside that statement (let-bound variables replaced by their values)."""

    def __init__(self, buffer):
        self.buffer = buffer
        self.ranges = {}            # inner loop variable -> (0, extent - 1)
        self.lets = {}              # let variable -> its value, itself free of lets
        self.reads = []             # (index, ranges) or (None, None) where a range is unknown
        self.loops_known = True

    def visit_expr(self, e):
        for x in walk(e):
            if isinstance(x, E.Load) and x.buffer is self.buffer:
                index = substitute(x.index, self.lets) if self.lets else x.index
                ok = self.loops_known
                self.reads.append((index, dict(self.ranges)) if ok else (None, None))

    def visit_IntrinsicCall(self, s):
        """A tensor intrinsic reads each input tile from its first element to its last."""
        for buf, ix, span in zip(s.buffers[1:], s.indices[1:], s.spans[1:]):
            if buf is self.buffer:
                ix = substitute(ix, self.lets) if self.lets else ix
                last = E.Binary(E.BinOp.ADD, ix, E.const(span - 1, dtypes.INDEX), dtypes.INDEX)
                for x in (ix, last):
                    self.reads.append((x, dict(self.ranges)) if self.loops_known else (None, None))

    def visit_For(self, s):
        known = self.loops_known
        if isinstance(s.extent, int):
            self.ranges[s.var] = (0, s.extent - 1)
        else:
            self.loops_known = False
        self.visit(s.body)
        self.ranges.pop(s.var, None)
        self.loops_known = known

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        self.lets[s.var] = substitute(s.value, self.lets) if self.lets else s.value
        self.visit(s.body)
        del self.lets[s.var]


def buffer_reads(body, buffer) -> list:
    """Every read of *buffer* in *body*: ``(flat index, ranges of the loops around it inside
    body)``, or ``(None, None)`` for one under a loop of symbolic extent."""
    scan = _Reads(buffer)
    scan.visit(body)
    return scan.reads


def region_read(reads):
    """``(start, count)``: the flat element range that *reads* (:func:`buffer_reads`) cover,
    *start* in terms of the variables bound outside their body; None when there is none."""
    if not reads:
        return None
    regions = []
    for index, ranges in reads:
        r = None if index is None else region_of(index, ranges)
        if r is None:
            return None
        regions.append(r)
    base, count = regions[0]
    lo, hi = 0, count
    for start, n in regions[1:]:
        gap = simplify(E.Binary(E.BinOp.SUB, start, base, dtypes.INDEX))
        if not isinstance(gap, E.Const):
            return None
        lo, hi = min(lo, gap.value), max(hi, gap.value + n)
    start = base if lo == 0 else E.Binary(E.BinOp.ADD, base, E.const(lo), dtypes.INDEX)
    return simplify(start), hi - lo


def prefetch_ahead(reads, var, extent, buffer, offset):
    """The statement to put first in the body of loop ``for var in range(extent)``, whose
    *reads* of *buffer* (:func:`buffer_reads`) are given: a prefetch of what iteration
    ``var + offset`` reads, when there is one (guarded by ``var + offset < extent``); None when
    the region is unknown, too large to prefetch or the same in every iteration."""
    region = region_read(reads)
    if region is None:
        return None
    start, count = region
    if count * dtypes.bits(buffer.dtype) // 8 > PREFETCH_MAX_BYTES:
        return None
    if var not in free_vars(start):
        return None             # every iteration reads the same: it is in cache after the first
    ahead = E.Binary(E.BinOp.ADD, var, E.const(offset), dtypes.INDEX)
    stmt = Prefetch(buffer, simplify(substitute(start, {var: ahead})), count)
    return IfThenElse(E.Compare(E.CmpOp.LT, ahead, E.as_expr(extent)), stmt)
