"""Replica groups: the stores an unrolled loop made of one store, seen again as one store inside a
*virtual* unrolled loop, with the accesses (the store, then its loads) of the group.

Two IRs give the same groups: with unrolls expanded, the replicas (same buffer, same value shape,
same loop chain shape) are grouped and the virtual loop goes where their loop chains part; with
unrolls kept as loops (``lower(..., expand_unroll=False)``), the real unrolled loops around a
store are merged into that virtual loop where the outermost of them was.
"""
from __future__ import annotations

import math

from ....ir.stmt import ForKind
from .footprint import footprints
from .layout import _INTRINSIC_COST, _MAX_MERGED, _VIRTUAL
from .walk import Loop, elem_bytes


class Access:
    """One distinct access of a group: its strides along the group's chain and its offsets
    over the replicas (``fp``: :func:`~einloop.autotune.model.feature.footprint.footprints`)."""
    __slots__ = ("buffer", "is_store", "is_update", "mult", "coefs", "offsets", "vstride",
                 "exact", "eb", "fp")


class Group:
    """A replica group, described: ``rep`` is its first store, ``R`` the number of replicas,
    ``chain`` the loops (virtual loop at ``vpos``, -1 if none), ``trip`` the iterations of one
    replica, ``cost`` trip x replicas x (1 + flops + loads + intrinsic calls weighted)."""
    __slots__ = ("reps", "rep", "R", "chain", "vpos", "trip", "trip_total", "accesses",
                 "flops", "cost")


def replica_groups(stores):
    """The stores grouped by buffer, value shape, enclosing ifs and loop chain shape (in order
    of first appearance)."""
    groups = {}
    for rec in stores:
        key = (id(rec.buffer), rec.sig, rec.n_if, tuple((lp.extent, lp.kind) for lp in rec.chain))
        groups.setdefault(key, []).append(rec)
    return list(groups.values())


def describe(reps, affine) -> Group:
    """Everything the feature blocks need about the replica group *reps*; *affine* is the
    function's :class:`~einloop.autotune.model.feature.affine.ApproxAffine`."""
    rep = reps[0]
    R = len(reps)
    chain = list(rep.chain)
    trip = math.prod(lp.extent for lp in rep.chain)
    # real unrolled loops (IR lowered without expanding unrolls) become the one virtual loop
    # that the replicas of an expanded unroll give, where the outermost of them was: both IRs
    # look alike (the replicas' chains part at the outermost unrolled loop)
    unrolled = [i for i, lp in enumerate(chain) if lp.kind is ForKind.UNROLLED]
    merge = ()
    if R == 1 and unrolled:
        merge = tuple(chain[i] for i in unrolled)
        R = math.prod(lp.extent for lp in merge)
        if R > _MAX_MERGED:
            merge, R = (), 1
    if merge:
        p = unrolled[0]
        trip //= R
        chain = [lp for lp in chain if lp.kind is not ForKind.UNROLLED]
        chain.insert(p, Loop(None, None, R, _VIRTUAL))
    elif R > 1:
        # where the replicas' chains part: the virtual unrolled loop goes there
        p = len(chain)
        for other in reps[1:]:
            q = 0
            oc = other.chain
            while q < p and oc[q].key == chain[q].key:
                q += 1
            p = q
        chain.insert(p, Loop(None, None, R, _VIRTUAL))
    vpos = p if R > 1 else -1
    accesses = _accesses(reps, chain, merge, R, affine)
    for a in accesses:
        a.fp = footprints(a, chain, vpos)
    g = Group()
    g.reps, g.rep, g.R, g.chain, g.vpos, g.trip = reps, rep, R, chain, vpos, trip
    g.trip_total = trip * R
    g.accesses = accesses
    g.flops = trip * R * rep.flops
    g.cost = trip * R * (1 + rep.flops + len(rep.loads) + _INTRINSIC_COST * rep.intr)
    return g


def _accesses(reps, chain, merge, R, affine):
    """The store, then the loads in order (the same order in every replica); a load of the
    stored element marks the store an update, and duplicate accesses merge into one."""
    per_rep = []
    for r in reps:
        forms = [(r.buffer, True, affine.visit(r.index))]
        forms += [(ld.buffer, False, affine.visit(ld.index)) for ld in r.loads]
        per_rep.append(forms)
    accesses = []
    for j, (buf, is_store, (coefs, const, exact)) in enumerate(per_rep[0]):
        if merge:
            offs = {const}
            for lp in merge:
                c = coefs.get(lp.var, 0.0)
                if c:
                    offs = {o + c * i for o in offs for i in range(lp.extent)}
            offsets = sorted({round(o, 6) for o in offs})
            vstride = coefs.get(merge[-1].var, 0.0)
        else:
            offsets = sorted({round(pr[j][2][1], 6) for pr in per_rep})
            vstride = per_rep[1][j][2][1] - const if R > 1 else 0.0
        cvec = [0.0 if lp.var is None else coefs.get(lp.var, 0.0) for lp in chain]
        ex = exact and all(pr[j][2][2] for pr in per_rep)
        merged = False
        for a in accesses:
            if a.buffer is buf and a.coefs == cvec and a.offsets == offsets:
                if a.is_store and not is_store:
                    a.is_update = True
                else:
                    a.mult += 1
                merged = True
                break
        if merged:
            continue
        a = Access()
        a.buffer, a.is_store, a.is_update, a.mult = buf, is_store, False, 1
        a.coefs, a.offsets, a.vstride, a.exact = cvec, offsets, vstride, ex
        a.eb = elem_bytes(buf.dtype)
        accesses.append(a)
    return accesses
