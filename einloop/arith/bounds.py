"""Interval analysis over integer expressions.

``const_bounds`` gives inclusive integer bounds of an expression when each variable lies in a
known range; ``region_of`` gives a *symbolic* interval ``(min_expr, extent)`` when some variables
are fixed (outer loops at a compute_at point) and others sweep their ranges.  Both are
conservative: ``None`` means "unknown", never a wrong answer.
"""
from ..te import expr as E


def const_bounds(e, ranges):
    """Inclusive (lo, hi) of integer expression *e*, or None; ``ranges``: Var -> (lo, hi)."""
    if isinstance(e, E.Const):
        if isinstance(e.value, bool) or not isinstance(e.value, int):
            return None
        return (e.value, e.value)
    if isinstance(e, E.Var):
        return ranges.get(e)
    if isinstance(e, E.Cast):
        if e.dtype.startswith("int") or e.dtype.startswith("uint"):
            return const_bounds(e.value, ranges)
        return None
    if isinstance(e, E.Select):
        a, b = const_bounds(e.true_value, ranges), const_bounds(e.false_value, ranges)
        if a is None or b is None:
            return None
        return (min(a[0], b[0]), max(a[1], b[1]))
    if not isinstance(e, E.Binary):
        return None
    a = const_bounds(e.a, ranges)
    b = const_bounds(e.b, ranges)
    op = e.op
    if op in ("%", "tmod") and b is not None and b[0] == b[1] and b[0] > 0:
        c = b[0]
        if a is not None and a[0] >= 0 and a[1] < c:
            return a
        if op == "tmod" and (a is None or a[0] < 0):
            return (-(c - 1), c - 1)
        return (0, c - 1)
    if a is None or b is None:
        return None
    if op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if op == "*":
        c = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
        return (min(c), max(c))
    if op in ("//", "tdiv") and b[0] == b[1] and b[0] > 0:
        return (a[0] // b[0], a[1] // b[0])
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    return None


def prove(cond, ranges):
    """True/False if *cond* is decided for all values in ``ranges``, else None."""
    if isinstance(cond, E.Const):
        return bool(cond.value)
    if isinstance(cond, E.Logical):
        a, b = prove(cond.a, ranges), prove(cond.b, ranges)
        if cond.op == "and":
            return False if (a is False or b is False) else (True if a and b else None)
        return True if (a is True or b is True) else (False if a is False and b is False else None)
    if isinstance(cond, E.Not):
        a = prove(cond.a, ranges)
        return None if a is None else not a
    if not isinstance(cond, E.Compare):
        return None
    a, b = const_bounds(cond.a, ranges), const_bounds(cond.b, ranges)
    if a is None or b is None:
        return None
    d = (a[0] - b[1], a[1] - b[0])          # bounds of a - b
    decide = {"<": (d[1] < 0, d[0] >= 0), "<=": (d[1] <= 0, d[0] > 0),
              ">": (d[0] > 0, d[1] <= 0), ">=": (d[0] >= 0, d[1] < 0),
              "==": (d[0] == d[1] == 0, d[0] > 0 or d[1] < 0),
              "!=": (d[0] > 0 or d[1] < 0, d[0] == d[1] == 0)}
    yes, no = decide[cond.op]
    return True if yes else (False if no else None)


def refine(ranges, cond):
    """Narrow variable ranges by a condition known to hold (``var op const`` terms of an 'and')."""
    if isinstance(cond, E.Logical) and cond.op == "and":
        return refine(refine(ranges, cond.a), cond.b)
    if not isinstance(cond, E.Compare):
        return ranges
    op, a, b = cond.op, cond.a, cond.b
    flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
    if not isinstance(a, E.Var) and isinstance(b, E.Var):
        a, b, op = b, a, flip[op]
    # a - c op b  or  a + c op b  ->  a op b +/- c
    shift = 0
    if isinstance(a, E.Binary) and a.op in ("+", "-") and isinstance(a.a, E.Var) \
            and isinstance(a.b, E.Const):
        shift = a.b.value if a.op == "+" else -a.b.value
        a = a.a
    if not isinstance(a, E.Var) or a not in ranges:
        return ranges
    cb = const_bounds(b, ranges)
    if cb is None:
        return ranges
    lo, hi = ranges[a]
    if op == "<":
        hi = min(hi, cb[1] - 1 - shift)
    elif op == "<=":
        hi = min(hi, cb[1] - shift)
    elif op == ">":
        lo = max(lo, cb[0] + 1 - shift)
    elif op == ">=":
        lo = max(lo, cb[0] - shift)
    elif op == "==":
        lo, hi = max(lo, cb[0] - shift), min(hi, cb[1] - shift)
    else:
        return ranges
    out = dict(ranges)
    out[a] = (lo, hi)
    return out


def region_of(e, varying, ranges):
    """Symbolic interval ``(min_expr, extent)`` of integer *e*, or None.

    Variables in ``varying`` (Var -> (lo, hi)) sweep their ranges; all others are fixed, and
    ``ranges`` gives every variable's full range for the conservative fallback.
    """
    if not any(isinstance(x, E.Var) and x in varying for x in _vars(e)):
        return (e, 1)
    if isinstance(e, E.Var):
        lo, hi = varying[e]
        return (E.const(lo), hi - lo + 1)
    if isinstance(e, E.Binary) and e.op in ("+", "-", "*"):
        a, b = region_of(e.a, varying, ranges), region_of(e.b, varying, ranges)
        if a is not None and b is not None:
            (ma, ea), (mb, eb) = a, b
            if e.op == "+":
                return (E.Binary("+", ma, mb, e.dtype), ea + eb - 1)
            if e.op == "-":
                return (E.Binary("-", ma, E.Binary("+", mb, E.const(eb - 1), e.dtype), e.dtype),
                        ea + eb - 1)
            for (m, ext), other in (((ma, ea), e.b), ((mb, eb), e.a)):
                if isinstance(other, E.Const):
                    c = other.value
                    if c >= 0:
                        return (E.Binary("*", m, other, e.dtype), (ext - 1) * c + 1)
                    top = E.Binary("+", m, E.const(ext - 1), e.dtype)
                    return (E.Binary("*", top, other, e.dtype), (ext - 1) * -c + 1)
    if isinstance(e, E.Binary) and e.op in ("//", "tdiv") and isinstance(e.b, E.Const) \
            and e.b.value > 0:
        a = region_of(e.a, varying, ranges)
        if a is not None:
            c = e.b.value
            return (E.Binary("//", a[0], e.b, e.dtype), (a[1] - 1 + c - 1) // c + 1)
    full = dict(ranges)
    full.update(varying)
    cb = const_bounds(e, full)
    if cb is None:
        return None
    return (E.const(cb[0]), cb[1] - cb[0] + 1)


def _vars(e):
    from .visit import walk
    return [x for x in walk(e) if isinstance(x, E.Var)]
