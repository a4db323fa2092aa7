"""Conditions as facts about variable ranges: ``negate`` and ``refine``.

Where a branch runs, its condition holds, so the ranges of the loop variables shrink.  The
refinement is sound for every condition: it may keep points where the condition fails (it refines
less when a form is not understood), never drop a point where it holds.  ``None`` means no point
satisfies the condition: the branch is dead.  Comparisons are read on int64 index arithmetic,
which does not wrap (codegen emits it with ``nsw``); narrower integers and floats refine nothing.
"""
from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import BinOp, CmpOp, LogicOp
from .bounds import const_bounds, prove
from .linear import terms_of

LT, LE, GT, GE, EQ, NE = CmpOp.LT, CmpOp.LE, CmpOp.GT, CmpOp.GE, CmpOp.EQ, CmpOp.NE
_NEGATE = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}
_FLIP = {LT: GT, LE: GE, GT: LT, GE: LE, EQ: EQ, NE: NE}


def negate(cond):
    """A condition that holds exactly where *cond* does not.

    Integer comparisons flip and ``and``/``or`` follow De Morgan; a float comparison becomes
    ``Not`` (with NaN, ``not (a < b)`` is not ``a >= b``).
    """
    if isinstance(cond, E.Const):
        return E.const(not cond.value)
    if isinstance(cond, E.Not):
        return cond.a
    if isinstance(cond, E.Logical):
        other = LogicOp.OR if cond.op is LogicOp.AND else LogicOp.AND
        return E.Logical(other, negate(cond.a), negate(cond.b))
    if isinstance(cond, E.Compare) and not dtypes.is_float(cond.a.dtype):
        return E.Compare(_NEGATE[cond.op], cond.a, cond.b)
    return E.Not(cond)


def refine(ranges, cond):
    """``ranges`` (Var -> (lo, hi); None: nothing known) narrowed to where *cond* holds; None if
    it never does."""
    ranges = ranges or {}
    decided = prove(cond, ranges)
    if decided is not None:
        return ranges if decided else None
    if isinstance(cond, E.Logical) and cond.op is LogicOp.AND:
        first = refine(ranges, cond.a)
        return None if first is None else refine(first, cond.b)    # None: dead, not unknown
    if isinstance(cond, E.Logical):
        return _hull(refine(ranges, cond.a), refine(ranges, cond.b))
    if isinstance(cond, E.Not):
        inner = negate(cond.a)
        return ranges if isinstance(inner, E.Not) else refine(ranges, inner)
    if isinstance(cond, E.Compare) and cond.a.dtype == dtypes.INDEX:
        split = _split_extremum(cond)
        return _refine_linear(ranges, cond) if split is None else refine(ranges, split)
    return ranges


def _hull(a, b):
    """The ranges where either holds: a variable ranged in only one of them is not ranged."""
    if a is None or b is None:
        return b if a is None else a
    return {v: (min(a[v][0], b[v][0]), max(a[v][1], b[v][1])) for v in a if v in b}


def _split_extremum(cond):
    """``min(x, y) < c`` as ``x < c or y < c`` (and the like); None for other forms."""
    for side, other, op in ((cond.a, cond.b, cond.op), (cond.b, cond.a, _FLIP[cond.op])):
        if isinstance(side, E.Binary) and (side.op is BinOp.MIN or side.op is BinOp.MAX) \
                and op is not EQ and op is not NE:
            below = op is LT or op is LE                # side op other bounds side above
            join = LogicOp.OR if (side.op is BinOp.MIN) == below else LogicOp.AND
            return E.Logical(join, E.Compare(op, side.a, other), E.Compare(op, side.b, other))
    return None


def _refine_linear(ranges, cond):
    """Refine each variable ``v`` of ``k*v + rest op 0`` (``rest`` bounded by interval arithmetic)."""
    terms = terms_of(E.Binary(BinOp.SUB, cond.a, cond.b, dtypes.INDEX))
    const = terms.pop(None, 0)
    out = dict(ranges)
    for v, k in terms.items():
        if not isinstance(v, E.Var) or v not in out or k == 0:
            continue
        rest = _rest_bounds(terms, v, out, const)
        if rest is None:
            continue
        lo, hi = out[v]
        # k*v op -rest for some rest in [r0, r1]: the bounds on k*v
        r0, r1 = rest
        op = cond.op
        top = -r0 - 1 if op is LT else -r0 if op is LE or op is EQ else None
        bottom = -r1 + 1 if op is GT else -r1 if op is GE or op is EQ else None
        if top is not None:
            lo, hi = (lo, min(hi, top // k)) if k > 0 else (max(lo, -(top // -k)), hi)
        if bottom is not None:
            lo, hi = (max(lo, -(-bottom // k)), hi) if k > 0 else (lo, min(hi, bottom // k))
        if lo > hi:
            return None
        out[v] = (lo, hi)
    return out


def _rest_bounds(terms, v, ranges, const):
    lo = hi = const
    for atom, k in terms.items():
        if atom is v:
            continue
        b = const_bounds(atom, ranges)
        if b is None:
            return None
        lo, hi = lo + min(k * b[0], k * b[1]), hi + max(k * b[0], k * b[1])
    return (lo, hi)


def holds_on(cond, var, ranges):
    """The widest interval ``(lo, hi)`` of *var* found inside ``ranges[var]`` on which *cond*
    holds for every value of the other variables in ``ranges``; None when none is found.

    The dual of :func:`refine` (where *cond* may hold): used to find the iterations of a loop in
    which a clamp or guard is decided.  Sound, not complete: a form not understood gives None.
    """
    lo, hi = ranges[var]
    if isinstance(cond, E.Const):
        return (lo, hi) if cond.value else None
    if isinstance(cond, E.Logical) and cond.op is LogicOp.AND:
        return _meet(holds_on(cond.a, var, ranges), holds_on(cond.b, var, ranges))
    if isinstance(cond, E.Logical):
        return _join(holds_on(cond.a, var, ranges), holds_on(cond.b, var, ranges))
    if isinstance(cond, E.Not):
        inner = negate(cond.a)
        return None if isinstance(inner, E.Not) else holds_on(inner, var, ranges)
    if not (isinstance(cond, E.Compare) and cond.a.dtype == dtypes.INDEX):
        return (lo, hi) if prove(cond, ranges) is True else None
    split = _split_extremum(cond)
    if split is not None:
        return holds_on(split, var, ranges)
    if cond.op is EQ or cond.op is NE:
        both = (LE, GE) if cond.op is EQ else (LT, GT)
        parts = [E.Compare(op, cond.a, cond.b) for op in both]
        join = LogicOp.AND if cond.op is EQ else LogicOp.OR
        return holds_on(E.Logical(join, *parts), var, ranges)
    return _holds_linear(cond, var, ranges)


def _holds_linear(cond, var, ranges):
    """Where ``k*var + rest op 0`` holds for every ``rest`` in its interval bounds."""
    terms = terms_of(E.Binary(BinOp.SUB, cond.a, cond.b, dtypes.INDEX))
    const = terms.pop(None, 0)
    k = terms.get(var, 0)
    lo, hi = ranges[var]
    if k == 0:
        return (lo, hi) if prove(cond, ranges) is True else None
    rest = _rest_bounds(terms, var, ranges, const)
    if rest is None:
        return None
    r0, r1 = rest
    if cond.op is LT or cond.op is LE:      # k*var <= top for the largest rest
        top = -r1 - (cond.op is LT)
        lo, hi = (lo, min(hi, top // k)) if k > 0 else (max(lo, -(top // -k)), hi)
    else:                                   # k*var >= bottom for the smallest rest
        bottom = -r0 + (cond.op is GT)
        lo, hi = (max(lo, -(-bottom // k)), hi) if k > 0 else (lo, min(hi, bottom // k))
    return (lo, hi) if lo <= hi else None


def _meet(a, b):
    if a is None or b is None:
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def _join(a, b):
    """An interval inside the union of *a* and *b*: their hull if they touch, else the wider."""
    if a is None or b is None:
        return b if a is None else a
    if max(a[0], b[0]) <= min(a[1], b[1]) + 1:
        return (min(a[0], b[0]), max(a[1], b[1]))
    return max(a, b, key=lambda iv: iv[1] - iv[0])
