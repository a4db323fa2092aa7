"""Linear forms of int64 index expressions: ``sum(k * atom) + c``.

Index arithmetic is canonicalised through these forms, so equal sums print and compare equal.
Coefficients live in the ring of int64 (mod 2**64), where every rewrite here holds.  The
floor-division pairs that ``fuse`` and ``split`` leave behind are folded back
(``k*c*(y // c) + k*(y % c) -> k*y`` and ``k*a*((y // a) % b) + k*(y % a) -> k*(y % (a*b))``),
so an index over fused loops is affine again and vector loops get contiguous accesses.
"""
from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import structural_key


def _const(v):
    return E.Const(dtypes.wrap(v, dtypes.INDEX), dtypes.INDEX)


class Terms(dict):
    """atom -> coefficient, where structurally equal atoms share one entry (key None: constant)."""

    def __init__(self):
        super().__init__()
        self._canon = {}

    def add(self, atom, k):
        if atom is not None:
            atom = self._canon.setdefault(structural_key(atom), atom)
        self[atom] = dtypes.wrap(self.get(atom, 0) + k, dtypes.INDEX)


def linear(e, out, scale):
    """Accumulate int64 *e* * scale into ``out`` (a Terms)."""
    if isinstance(e, E.Const):
        out.add(None, e.value * scale)
    elif isinstance(e, E.Binary) and e.op in ("+", "-"):
        linear(e.a, out, scale)
        linear(e.b, out, scale if e.op == "+" else -scale)
    elif isinstance(e, E.Binary) and e.op == "*" and isinstance(e.b, E.Const):
        linear(e.a, out, scale * e.b.value)
    elif isinstance(e, E.Binary) and e.op == "*" and isinstance(e.a, E.Const):
        linear(e.b, out, scale * e.a.value)
    else:
        out.add(e, scale)


def terms_of(e):
    """The linear form of int64 *e*."""
    terms = Terms()
    linear(e, terms, 1)
    return terms


def from_linear(terms):
    """The expression of a linear form (consumes its constant)."""
    const = terms.pop(None, 0)
    result = None
    for atom, c in terms.items():
        if c == 0:
            continue
        term = atom if c in (1, -1) else E.Binary("*", atom, _const(abs(c)), dtypes.INDEX)
        if result is None:
            result = term if c > 0 else E.Binary("*", atom, _const(c), dtypes.INDEX) \
                if c != -1 else E.Binary("-", _const(0), atom, dtypes.INDEX)
        else:
            result = E.Binary("+" if c > 0 else "-", result, term, dtypes.INDEX)
    if result is None:
        return _const(const)
    if const:
        result = E.Binary("+" if const > 0 else "-", result, _const(abs(const)), dtypes.INDEX)
    return result


def split_multiple(e, c):
    """Write int64 *e* as ``c * q + r``: returns (q, r) with q built from terms divisible by c."""
    q, r = Terms(), Terms()
    for atom, k in terms_of(e).items():
        if k % c == 0:
            q.add(atom, k // c)
        else:
            r.add(atom, k)
    return from_linear(q), from_linear(r)


def recombine(terms, floor_view, make_mod):
    """Fold the div/mod pairs of a fused index back into their dividend, in place.

    ``floor_view(atom)`` is ``(op, y, c)`` when *atom* is ``y // c`` or ``y % c`` (floor
    semantics, constant ``c > 0``), else None; ``make_mod(y, c)`` builds ``y % c``.
    """
    while _recombine_once(terms, floor_view, make_mod):
        pass


def _recombine_once(terms, floor_view, make_mod):
    mods = [(m, km) for m, km in terms.items()
            if isinstance(m, E.Binary) and m.op in ("%", "tmod") and km != 0]
    if not mods:
        return False
    views = {a: floor_view(a) for a in terms if a is not None}
    for m, km in mods:
        vm = views[m]
        if vm is None:
            continue
        _, y, c = vm
        key = structural_key(y)
        for d, kd in terms.items():
            vd = views.get(d)
            if d is m or vd is None or kd != km * c:
                continue
            if vd[0] == "//" and vd[2] == c and structural_key(vd[1]) == key:
                del terms[m], terms[d]                     # k*c*(y // c) + k*(y % c) = k*y
                linear(y, terms, km)
                return True
            inner = floor_view(vd[1]) if vd[0] == "%" else None
            if inner is not None and inner[0] == "//" and inner[2] == c \
                    and structural_key(inner[1]) == key:
                del terms[m], terms[d]         # k*c*((y // c) % b) + k*(y % c) = k*(y % (c*b))
                linear(make_mod(y, c * vd[2]), terms, km)
                return True
    return False
