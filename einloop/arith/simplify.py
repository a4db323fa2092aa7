"""Expression simplification: constant folding, linear-form canonicalisation of int64 index
arithmetic, and range-based rewriting of //, %, comparisons, min and max.

Only rewrites that hold for every value are made; ``ranges`` (Var -> (lo, hi)) supplies the
facts known about loop variables.
"""
from ..te import dtypes
from ..te import expr as E
from .bounds import const_bounds, prove
from .visit import transform, structural_key

_FOLD = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "max": max, "min": min,
}
_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


class _Terms(dict):
    """atom -> coefficient, where structurally equal atoms share one entry (key None: constant)."""

    def __init__(self):
        super().__init__()
        self._canon = {}

    def add(self, atom, k):
        if atom is not None:
            atom = self._canon.setdefault(structural_key(atom), atom)
        self[atom] = self.get(atom, 0) + k


def _linear(e, out, scale):
    """Accumulate int64 *e* * scale into ``out`` (a _Terms)."""
    if isinstance(e, E.Const):
        out.add(None, e.value * scale)
    elif isinstance(e, E.Binary) and e.op in ("+", "-"):
        _linear(e.a, out, scale)
        _linear(e.b, out, scale if e.op == "+" else -scale)
    elif isinstance(e, E.Binary) and e.op == "*" and isinstance(e.b, E.Const):
        _linear(e.a, out, scale * e.b.value)
    elif isinstance(e, E.Binary) and e.op == "*" and isinstance(e.a, E.Const):
        _linear(e.b, out, scale * e.a.value)
    else:
        out.add(e, scale)


def _from_linear(terms):
    const = terms.pop(None, 0)
    result = None
    for atom, c in terms.items():
        if c == 0:
            continue
        term = atom if c in (1, -1) else E.Binary("*", atom, E.const(abs(c)), dtypes.INDEX)
        if result is None:
            result = term if c > 0 else E.Binary("*", atom, E.const(c), dtypes.INDEX) \
                if c != -1 else E.Binary("-", E.const(0), atom, dtypes.INDEX)
        else:
            result = E.Binary("+" if c > 0 else "-", result, term, dtypes.INDEX)
    if result is None:
        return E.const(const)
    if const:
        result = E.Binary("+" if const > 0 else "-", result, E.const(abs(const)), dtypes.INDEX)
    return result


def _canonical(e):
    terms = _Terms()
    _linear(e, terms, 1)
    return _from_linear(terms)


def _split_multiple(e, c):
    """Write int64 *e* as ``c * q + r``: returns (q, r) with q built from terms divisible by c."""
    terms = _Terms()
    _linear(e, terms, 1)
    q, r = {}, {}
    for atom, k in terms.items():
        if k % c == 0:
            q[atom] = k // c
        else:
            r[atom] = k
    return _from_linear(q), _from_linear(r)


def _fold(e, ranges):
    if isinstance(e, E.Binary):
        a, b = e.a, e.b
        ca, cb = isinstance(a, E.Const), isinstance(b, E.Const)
        isint = dtypes.is_int(e.dtype)
        if ca and cb:
            if e.op in _FOLD:
                return E.const(_FOLD[e.op](a.value, b.value), e.dtype)
            if isint and b.value != 0:
                if e.op in ("//", "%"):
                    return E.const(a.value // b.value if e.op == "//" else a.value % b.value,
                                   e.dtype)
                if e.op in ("tdiv", "tmod"):
                    q = int(a.value / b.value)
                    return E.const(q if e.op == "tdiv" else a.value - q * b.value, e.dtype)
        if e.dtype == dtypes.INDEX and e.op in ("+", "-", "*"):
            return _canonical(e)
        if isint and e.op in ("//", "%", "tdiv", "tmod") and cb and b.value > 0:
            return _divmod(e, ranges)
        if e.op in ("max", "min") and isint:
            ba, bb = const_bounds(a, ranges), const_bounds(b, ranges)
            if ba and bb:
                if ba[1] <= bb[0]:
                    return b if e.op == "max" else a
                if bb[1] <= ba[0]:
                    return a if e.op == "max" else b
        if isint or e.op == "*":
            if e.op == "*" and (_is(a, 1)):
                return b
            if e.op in ("*", "//", "tdiv") and _is(b, 1):
                return a
        if isint and e.op in ("+", "-") and _is(b, 0):
            return a
        return None
    if isinstance(e, E.Compare):
        if isinstance(e.a, E.Const) and isinstance(e.b, E.Const):
            return E.const(_CMP[e.op](e.a.value, e.b.value))
        if ranges is not None and dtypes.is_int(e.a.dtype):
            p = prove(e, ranges)
            if p is not None:
                return E.const(p)
        return None
    if isinstance(e, E.Logical):
        a, b = e.a, e.b
        for x, y in ((a, b), (b, a)):
            if isinstance(x, E.Const):
                if e.op == "and":
                    return y if x.value else E.const(False)
                return E.const(True) if x.value else y
        return None
    if isinstance(e, E.Not) and isinstance(e.a, E.Const):
        return E.const(not e.a.value)
    if isinstance(e, E.Select) and isinstance(e.cond, E.Const):
        return e.true_value if e.cond.value else e.false_value
    if isinstance(e, E.Cast) and isinstance(e.value, E.Const):
        v = e.value.value
        if dtypes.is_float(e.dtype):
            return E.const(float(v), e.dtype)
        if dtypes.is_int(e.dtype) and not isinstance(v, float):
            return E.const(int(v), e.dtype)
    return None


def _is(e, v):
    return isinstance(e, E.Const) and e.value == v


def _divmod(e, ranges):
    """Rewrite (c*q + r) // c -> q + r // c and (c*q + r) % c -> r % c, dropping r where 0 <= r < c."""
    c = e.b.value
    floor = e.op in ("//", "%")
    a = e.a
    if ranges is not None and not floor:
        ba = const_bounds(a, ranges)
        if ba is None or ba[0] < 0:
            return None
        floor = True          # non-negative dividend: trunc and floor agree
    if not floor or e.dtype != dtypes.INDEX:
        return None
    q, r = _split_multiple(a, c)
    br = const_bounds(r, ranges or {})
    small = br is not None and 0 <= br[0] and br[1] < c
    if e.op in ("//", "tdiv"):
        if small:
            return q
        if _is(q, 0):
            return None
        return _canonical(E.Binary("+", q, E.Binary("//", r, e.b, e.dtype), e.dtype))
    if small:
        return r
    if _is(q, 0):
        return None
    return E.Binary("%", r, e.b, e.dtype)


def simplify(e, ranges=None):
    """Simplify *e*; ``ranges`` (Var -> (lo, hi)) enables range-based rewrites."""
    return transform(e, lambda x: _fold(x, ranges))
