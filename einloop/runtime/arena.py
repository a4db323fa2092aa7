"""Placing the buffers of a sequence of kernel calls in one block of memory.

A sequence of kernels (a partition of a model) passes intermediate results from one kernel to
the next and gives each kernel its temporaries.  Allocating each of them on every call costs an
allocation per buffer; placing them all in one block (an *arena*) costs one.  Buffers whose
lifetimes do not overlap share bytes, so the arena is smaller than their sum and the memory the
sequence touches stays in cache (what Inductor's and TVM's memory planners do for the same
reason).

The plan is computed once: each buffer gets a byte offset, aligned to :data:`ALIGNMENT`, such
that two buffers alive at the same step never overlap.  Buffers are placed largest first, each at
the lowest offset that fits between the buffers already placed that share a step with it
(first fit by decreasing size, a standard heuristic for offline interval packing).
"""
from __future__ import annotations

from typing import NamedTuple

from ..errors import InternalError

#: bytes every buffer's offset is a multiple of: a cache line, and the widest vector
#: (AVX-512) einloop's kernels load with alignment hints
ALIGNMENT = 64


class Lifetime(NamedTuple):
    """A buffer of *nbytes* alive from step *first* to step *last* (both included)."""
    nbytes: int
    first: int
    last: int


class ArenaPlan(NamedTuple):
    """Byte offsets, one per buffer in the order given, and the arena's size in bytes."""
    offsets: tuple
    nbytes: int


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def plan_arena(buffers) -> ArenaPlan:
    """Offsets for *buffers* (:class:`Lifetime` s) in one arena; buffers alive at a common
    step get disjoint byte ranges."""
    buffers = [Lifetime(*b) for b in buffers]
    for b in buffers:
        if b.nbytes < 0 or b.first > b.last:
            raise InternalError(f"arena: a buffer of {b.nbytes} bytes alive from step "
                                f"{b.first} to {b.last}")
    order = sorted(range(len(buffers)), key=lambda i: (-buffers[i].nbytes, i))
    offsets: list = [None] * len(buffers)
    placed = []                                     # (offset, end, first, last)
    for i in order:
        b = buffers[i]
        size = _aligned(max(b.nbytes, 1))
        taken = sorted((o, e) for o, e, f, l in placed if f <= b.last and b.first <= l)
        offset = 0
        for o, e in taken:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[i] = offset
        placed.append((offset, offset + size, b.first, b.last))
    return ArenaPlan(tuple(offsets), max((e for _, e, _, _ in placed), default=0))


__all__ = ["ALIGNMENT", "ArenaPlan", "Lifetime", "plan_arena"]
