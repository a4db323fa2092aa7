"""Interval analysis over integer expressions.

``const_bounds`` gives inclusive integer bounds of an expression when each variable lies in a
known range; ``region_of`` gives a *symbolic* interval ``(min_expr, extent)`` when some variables
are fixed (outer loops at a compute_at point) and others sweep their ranges.  Both are
conservative: ``None`` means "unknown", never a wrong answer.

Bounds are of the values the machine computes: arithmetic on a dtype whose interval leaves the
dtype's range wraps around (an int8 cast of 120..129 is -128..127, not 120..129), so such a result
gets the exact wrapped interval when no wrap boundary falls inside it, else the dtype's full range.
A value of unknown origin (a tensor element, a call) of a narrow integer dtype still lies in that
dtype's range; int64 ones are unknown.
"""
from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import BinOp, CmpOp, LogicOp


def const_bounds(e, ranges):
    """Inclusive (lo, hi) of integer or bool expression *e*, or None.

    ``ranges``: Var -> (lo, hi) of the variables known, or None when none is.
    """
    return _bounds(e, ranges or {})


def _bounds(e, ranges):
    if isinstance(e, E.Const):
        return None if isinstance(e.value, float) else (int(e.value), int(e.value))
    if isinstance(e, E.Var) and e in ranges:
        return ranges[e]
    if not (dtypes.is_int(e.dtype) or e.dtype == dtypes.BOOL):
        return None
    if isinstance(e, (E.Compare, E.Logical, E.Not)):
        return (0, 1)
    b = None
    if isinstance(e, E.Cast):
        b = _cast(e, ranges)
    elif isinstance(e, E.Select):
        t, f = _bounds(e.true_value, ranges), _bounds(e.false_value, ranges)
        b = None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
    elif isinstance(e, E.Binary):
        b = _binary(e.op, _bounds(e.a, ranges), _bounds(e.b, ranges))
    elif isinstance(e, E.Call) and e.name == "abs":
        b = _abs(_bounds(e.args[0], ranges))
    return _unknown(e.dtype) if b is None else _fit(b, e.dtype)


def _unknown(dtype):
    """Bounds of a value known only by its dtype (None for int64: too wide to be of use)."""
    return None if dtype == dtypes.INDEX else dtypes.int_range(dtype)


def _fit(b, dtype):
    """The values an exact-arithmetic interval *b* takes in *dtype*, after wrap-around."""
    lo, hi = dtypes.int_range(dtype)
    if lo <= b[0] and b[1] <= hi:
        return b
    if dtype == dtypes.BOOL:                 # a conversion to bool: nonzero is True
        return (1, 1) if b[0] > 0 or b[1] < 0 else (0, 1)
    wlo, whi = dtypes.wrap(b[0], dtype), dtypes.wrap(b[1], dtype)
    if b[1] - b[0] == whi - wlo:             # no wrap boundary inside: shifted as a whole
        return (wlo, whi)
    return (lo, hi)


def _cast(e, ranges):
    if dtypes.is_float(e.value.dtype):
        return None                          # out-of-range float conversions are undefined
    return _bounds(e.value, ranges)


def _abs(a):
    if a is None:
        return None
    if a[0] >= 0:
        return a
    if a[1] <= 0:
        return (-a[1], -a[0])
    return (0, max(-a[0], a[1]))


def _binary(op, a, b):
    """Exact-arithmetic bounds of ``a op b`` (before wrap-around), or None."""
    if (op is BinOp.MOD or op is BinOp.TMOD) and b is not None:
        return _mod(op, a, b)
    if a is None or b is None:
        return None
    if op is BinOp.ADD:
        return (a[0] + b[0], a[1] + b[1])
    if op is BinOp.SUB:
        return (a[0] - b[1], a[1] - b[0])
    if op is BinOp.MUL:
        c = [x * y for x in a for y in b]
        return (min(c), max(c))
    if op is BinOp.MAX:
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op is BinOp.MIN:
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op is BinOp.FLOORDIV or op is BinOp.TDIV:
        return _div(op, a, b)
    return None


def _div(op, a, b):
    """Quotient bounds: extremes at the corners of each sign part of the divisor; x // 0 == 0."""
    div = (lambda x, y: x // y) if op is BinOp.FLOORDIV else _trunc_div
    parts = [(max(b[0], 1), b[1])] if b[1] >= 1 else []
    if b[0] <= -1:
        parts.append((b[0], min(b[1], -1)))
    values = [div(x, y) for lo_hi in parts for x in a for y in lo_hi]
    if b[0] <= 0 <= b[1]:
        values.append(0)
    return (min(values), max(values))


def _trunc_div(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _mod(op, a, b):
    """Remainder bounds: |r| < |divisor|, floor's r has the divisor's sign, trunc's the
    dividend's; x % 0 == 0."""
    if a is not None and a[0] >= 0 and b[0] > a[1]:
        return a                              # a % b == a
    m = max(abs(b[0]), abs(b[1]), 1) - 1
    if op is BinOp.MOD:
        lo = 0 if b[0] >= 0 else -m
        hi = 0 if b[1] <= 0 else m
        if a is not None and a[0] >= 0 and b[0] >= 0:
            hi = min(hi, a[1])
        return (lo, hi)
    lo, hi = -m, m
    if a is not None:
        lo, hi = max(lo, min(0, a[0])), min(hi, max(0, a[1]))
    return (lo, hi)


def prove(cond, ranges):
    """True/False if *cond* is decided for all values in ``ranges`` (None: nothing known), else
    None."""
    if isinstance(cond, E.Const):
        return bool(cond.value)
    if isinstance(cond, E.Logical):
        a, b = prove(cond.a, ranges), prove(cond.b, ranges)
        if cond.op is LogicOp.AND:
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
    d = (a[0] - b[1], a[1] - b[0])          # bounds of a - b, exact: both are actual values
    op = cond.op
    if op is CmpOp.LT:
        yes, no = d[1] < 0, d[0] >= 0
    elif op is CmpOp.LE:
        yes, no = d[1] <= 0, d[0] > 0
    elif op is CmpOp.GT:
        yes, no = d[0] > 0, d[1] <= 0
    elif op is CmpOp.GE:
        yes, no = d[0] >= 0, d[1] < 0
    elif op is CmpOp.EQ:
        yes, no = d[0] == d[1] == 0, d[0] > 0 or d[1] < 0
    else:
        yes, no = d[0] > 0 or d[1] < 0, d[0] == d[1] == 0
    return True if yes else (False if no else None)


_REGION_OPS = frozenset((BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MIN, BinOp.MAX))


def region_of(e, varying):
    """Symbolic interval ``(min_expr, extent)`` of integer *e*, or None.

    Variables in ``varying`` (Var -> (lo, hi)) sweep their ranges; all others are fixed:
    ``min_expr`` depends on the fixed variables only and ``extent`` is a constant.  None when *e*
    reads tensor data (its value is unknown before the kernel runs) or mixes fixed and varying
    variables in a way not tracked here; the caller then falls back to constant bounds.
    Symbolic rules apply to int64 index arithmetic only, where wrap-around cannot happen.
    """
    from ..ir.visit import walk
    if any(isinstance(x, (E.TensorRead, E.Reduce)) for x in walk(e)):
        return None
    if not any(isinstance(x, E.Var) and x in varying for x in _vars(e)):
        return (e, 1)
    if isinstance(e, E.Var):
        lo, hi = varying[e]
        return (E.const(lo), hi - lo + 1)
    symbolic = isinstance(e, E.Binary) and e.dtype == dtypes.INDEX
    if symbolic and e.op in _REGION_OPS:
        a, b = region_of(e.a, varying), region_of(e.b, varying)
        if a is not None and b is not None:
            (ma, ea), (mb, eb) = a, b
            if e.op is BinOp.ADD:
                return (E.Binary(BinOp.ADD, ma, mb, e.dtype), ea + eb - 1)
            if e.op is BinOp.SUB:
                top = E.Binary(BinOp.ADD, mb, E.const(eb - 1), e.dtype)
                return (E.Binary(BinOp.SUB, ma, top, e.dtype), ea + eb - 1)
            if e.op is BinOp.MIN or e.op is BinOp.MAX:
                # both are monotone and 1-Lipschitz: the result's interval starts at the min/max
                # of the starts and is no wider than the wider operand's
                return (E.Binary(e.op, ma, mb, e.dtype), max(ea, eb))
            for (m, ext), other in (((ma, ea), e.b), ((mb, eb), e.a)):
                if isinstance(other, E.Const):
                    c = other.value
                    if c >= 0:
                        return (E.Binary(BinOp.MUL, m, other, e.dtype), (ext - 1) * c + 1)
                    top = E.Binary(BinOp.ADD, m, E.const(ext - 1), e.dtype)
                    return (E.Binary(BinOp.MUL, top, other, e.dtype), (ext - 1) * -c + 1)
    if symbolic and e.op is BinOp.FLOORDIV and isinstance(e.b, E.Const) and e.b.value > 0:
        a = region_of(e.a, varying)
        if a is not None:
            c = e.b.value
            return (E.Binary(BinOp.FLOORDIV, a[0], e.b, e.dtype), (a[1] - 1 + c - 1) // c + 1)
    if symbolic and e.op is BinOp.MOD and isinstance(e.b, E.Const) and e.b.value > 0 \
            and region_of(e.a, varying) is not None:
        return (E.const(0), e.b.value)      # every residue, wherever the operand starts
    if not all(x in varying for x in _vars(e)):
        return None
    cb = const_bounds(e, varying)
    if cb is None:
        return None
    return (E.const(cb[0]), cb[1] - cb[0] + 1)


def _vars(e):
    from ..ir.visit import walk
    return [x for x in walk(e) if isinstance(x, E.Var)]
