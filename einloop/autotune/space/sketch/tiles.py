"""Tile-size candidates of the multi-level tiling rule, and picking the candidate nearest a wish.

Perfect tiles (every inner factor product divides the extent, as Ansor and MetaSchedule use),
the innermost at most 64 and, on the vectorized axis, whole SIMD vectors or whole vectors and a
half (56 = 3.5 vectors of 16); the vectorized axis also gets 1, 2 and 4 SIMD vectors as
innermost tile where they do not divide (einloop guards the tail), so awkward extents (50, 56,
229) still get full vectors.  The other data axes also get the register-tile heights 3, 5, 6
and 7 where they do not divide: a 6 x 2-vector accumulator tile (12 of AVX2's 16 registers) is the classic
micro-kernel, and 6 rarely divides a power-of-two extent.
"""
from __future__ import annotations

import math

MAX_INNERMOST = 64
#: register-tile heights offered even where they do not divide the extent (the tail is guarded).
#: Why they hold on other machines: every divisor is offered anyway; these are the heights of
#: 2-vector register tiles on 16-register machines (AVX2, SSE, up to 6 rows) and of 1-vector
#: ones, all within the 32 registers of AVX-512 and NEON too (taller tiles there are divisors
#: or a search away); the seeds cut their rows to the model's registers
REGISTER_ROWS = (3, 5, 6, 7)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _perfect(n, parts, max_inner):
    """Inner-factor tuples (outermost first) of perfect splits of *n* into *parts* loops."""
    if parts == 1:
        return [()]
    out = []
    for inner in divisors(n):
        if parts == 2 and inner > max_inner:
            continue
        for rest in _perfect(n // inner, parts - 1, n) if parts > 2 else [()]:
            out.append(rest + (inner,))
    return out


def split_sizes(extent, parts, vector_lanes=0, max_inner=MAX_INNERMOST, register_rows=False):
    """Split sizes ``(-1, f1, ..., f_{parts-1})`` for an axis of *extent*.

    ``vector_lanes`` > 0 marks the vectorized axis: innermost tiles of one, two and four vectors
    are added where they do not divide (the tail is guarded).  ``register_rows`` adds the
    :data:`REGISTER_ROWS` heights the same way.
    """
    combos = [c for c in _perfect(extent, parts, max_inner) if c[-1] <= max_inner]
    if vector_lanes and extent > vector_lanes:
        # a vector loop of a fraction of vectors ends in a narrower vector every iteration
        # (codegen splits it by powers of two): keep whole vectors of the machine's lanes, or
        # whole vectors and one half vector (56 floats: 3 x 16 + 8 on AVX-512, a row of a
        # 56 x 56 image, as efficient as a masked fourth vector without its mask), and 1 (the
        # loop not vectorized); 28 floats there would end in 8 + 4
        half = max(1, vector_lanes // 2)
        combos = [c for c in combos if c[-1] == 1 or c[-1] % vector_lanes == 0
                  or (c[-1] > vector_lanes and c[-1] % half == 0)]
    extra = (vector_lanes, 2 * vector_lanes, 4 * vector_lanes) if vector_lanes else ()
    if register_rows:
        extra += REGISTER_ROWS
    for inner in extra:
        if inner < extent and extent % inner and inner <= max_inner:
            rest = -(-extent // inner)
            combos += [c + (inner,) for c in _perfect(rest, parts - 1, rest)]
    seen, out = set(), []
    for c in combos:
        if c not in seen:
            seen.add(c)
            out.append((-1,) + c)
    return out


def nearest(sizes, wish):
    """The index in *sizes* whose inner factors are nearest *wish* (log distance; ``None`` in
    the wish means any value)."""
    def cost(sz):
        return sum(abs(math.log2(f) - math.log2(w)) for f, w in zip(sz[1:], wish[1:])
                   if w is not None)
    return min(range(len(sizes)), key=lambda i: (cost(sizes[i]), i))
