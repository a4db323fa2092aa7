"""How much memory one access touches in the innermost loops: distinct elements, iterations and
cache lines for every window of loops (loops ``s..end`` of the chain, for every start ``s``).

Distinct elements are the product of the per-loop distinct counts, capped by the span of the
index; the replicas of an unrolled body are a union over their constant offsets; lines assume
the smallest non-zero stride runs along a cache line.
"""
from __future__ import annotations

import math

from .layout import CACHE_LINE


def footprints(a, chain, vpos):
    """For every window start s of *chain* (loops s..end): (distinct elements, iterations,
    lines) of access *a* (a :class:`~einloop.autotune.model.feature.groups.Access`); *vpos* is the
    position of the virtual unroll loop, or -1."""
    n = len(chain)
    out = [None] * n
    prod_d = 1.0
    span = 0.0
    iters = 1.0
    with_virtual = False
    cmin, cmin_ext = math.inf, 1
    n_off = len(a.offsets)
    off_range = a.offsets[-1] - a.offsets[0] if a.offsets else 0.0
    eb = a.eb
    for s in range(n - 1, -1, -1):
        e = chain[s].extent
        iters *= e
        if s == vpos:
            with_virtual = True
            c = abs(a.vstride)
        else:
            c = abs(a.coefs[s])
            if c > 0:
                prod_d *= e if c >= 1 else math.floor(c * (e - 1)) + 1
                span += c * (e - 1)
        if 0 < c < cmin:
            cmin, cmin_ext = c, e
        distinct = min(prod_d, span + 1)
        if with_virtual:
            distinct = min(n_off * distinct, off_range + span + 1)
        distinct = max(1.0, distinct)
        if cmin * eb < CACHE_LINE:
            per_line = max(1.0, min(CACHE_LINE / (cmin * eb), cmin_ext))
            lines = max(math.ceil(distinct * eb / CACHE_LINE), distinct / per_line)
        else:
            lines = distinct
        out[s] = (distinct, iters, max(1.0, lines))
    return out
